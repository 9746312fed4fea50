# Sourced by scripts/run and scripts/test: create or reuse .venv and install the project
# (editable) with the given extras ("" for the plain package: the broker alone), only when
# pyproject changed.
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${MAINSTEM_PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
extras=$1
stamp=.venv/.mainstem-installed-${extras:-plain}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
    touch "$stamp"
fi
