# Sourced by the scripts that install Debian packages whose programs the tests start.
# debian_install WHO PACKAGE...: install the packages without their recommends (needs root,
# as on the project's machines and CI), denying service starts while they install: a
# package's service would take the default ports, and the tests start their own processes
# on their own ports and stop only those. WHO names the tests that need them.
debian_install() {
    local who=$1
    shift
    if [ "$(id -u)" != 0 ]; then
        echo "warning: $* missing and not root: $who will fail" >&2
        return
    fi
    echo "installing $* for $who" >&2
    local deny_starts=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        deny_starts=1
    fi
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
        >/dev/null
    [ "$deny_starts" = 0 ] || rm -f /usr/sbin/policy-rc.d
}
