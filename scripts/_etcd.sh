# Sourced by scripts/test: the cluster tests start a real etcd (Debian's etcd-server, 3.4);
# install it when missing (needs root, as on the project's machines and CI). The tests
# start and stop their own etcd processes on loopback ports; none runs as a service.
if ! command -v etcd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing etcd-server for the cluster tests" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
        # Debian's package may start a service on 2379/2380: tests use their own ports.
        pkill -x etcd 2>/dev/null || true
    else
        echo "warning: etcd missing and not root: cluster tests will fail" >&2
    fi
fi
