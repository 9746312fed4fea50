# Sourced by scripts/test: the cluster tests start a real etcd (Debian's etcd-server, 3.4);
# install it when missing (needs root, as on the project's machines and CI). The tests
# start and stop their own etcd processes on loopback ports; none runs as a service.
if ! command -v etcd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing etcd-server for the cluster tests" >&2
        # Debian's package would start a service on 2379/2380: deny service starts while
        # it installs (tests use their own ports, and stop only the processes they start).
        deny_starts=0
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
            chmod 755 /usr/sbin/policy-rc.d
            deny_starts=1
        fi
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
        [ "$deny_starts" = 0 ] || rm -f /usr/sbin/policy-rc.d
    else
        echo "warning: etcd missing and not root: cluster tests will fail" >&2
    fi
fi
