# Sourced by scripts/test: the cluster tests start a real etcd (Debian's etcd-server, 3.4);
# installed when missing. The tests start and stop their own etcd processes on loopback
# ports; none runs as a service.
source "$(dirname "${BASH_SOURCE[0]}")/_debian.sh"
command -v etcd >/dev/null 2>&1 || debian_install "the cluster tests" etcd-server
