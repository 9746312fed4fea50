# Sourced by bench/run_all: what the whole table needs and a fresh machine lacks.
# - the shared harness's venv (MAINSTEM_BENCH_PYTHON, default /tmp/bench-venv);
# - for the reference (skipped with --no-rabbitmq), Debian's rabbitmq-server, installed
#   without letting the package start its service (which would take 5672 and 25672):
#   run_all starts its own node with ../shared/bench/start_rabbitmq.sh.
bench_python="${MAINSTEM_BENCH_PYTHON:-/tmp/bench-venv/bin/python}"
if [ ! -x "$bench_python" ]; then
    echo "creating the harness venv $(dirname "$(dirname "$bench_python")")" >&2
    python3 -m venv "$(dirname "$(dirname "$bench_python")")"
    "$bench_python" -m pip install -q -r ../shared/bench/requirements.txt
fi
case " $* " in *" --no-rabbitmq "*) want_rabbitmq=0 ;; *) want_rabbitmq=1 ;; esac
if [ "$want_rabbitmq" = 1 ] && [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    if [ "$(id -u)" = 0 ] && [ ! -e /usr/sbin/policy-rc.d ]; then
        echo "installing Debian's rabbitmq-server (its service not started)" >&2
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d  # deny service starts
        chmod 755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    else
        echo "warning: rabbitmq-server missing (needs root): use --no-rabbitmq" >&2
    fi
fi
