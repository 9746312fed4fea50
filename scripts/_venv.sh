# Sourced by scripts/run and scripts/test: create or reuse .venv and install the project
# (editable) with the given extras ("" for the plain package: the broker alone), only when
# pyproject or setup.py changed, or when the compiled hot modules are older than their
# sources (an edit or a pull since the last build: the install compiles them again).
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${MAINSTEM_PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
extras=$1
stamp=.venv/.mainstem-installed-${extras:-plain}
compiled_stale() {
    .venv/bin/python -c 'import sys, mainstem.compiled as c; sys.exit(0 if c.STALE else 1)' \
        2>/dev/null
}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
        || compiled_stale; then
    .venv/bin/python -m pip install -q --upgrade pip setuptools >/dev/null
    .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
    touch "$stamp"
fi
