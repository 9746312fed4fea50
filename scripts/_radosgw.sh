# Sourced by scripts/test: the tier's and the tables' S3 tests run against a real S3 server
# too, Ceph's RADOS Gateway (Debian's radosgw, with ceph-mon and ceph-osd under it: Debian
# 12's gateway stores only through a Ceph cluster). Installed when missing (needs root, as on
# the project's machines and CI), without the recommended extras; the tests start and stop
# their own single-node cluster on loopback ports (tests/support/radosgw.py), none as a service.
if ! command -v radosgw >/dev/null 2>&1 || ! command -v ceph-mon >/dev/null 2>&1 \
        || ! command -v ceph-osd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing radosgw, ceph-mon and ceph-osd for the S3 tests" >&2
        # the packages would start Ceph's services: deny service starts while they install
        deny_starts=0
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
            chmod 755 /usr/sbin/policy-rc.d
            deny_starts=1
        fi
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            radosgw ceph-mon ceph-osd >/dev/null
        [ "$deny_starts" = 0 ] || rm -f /usr/sbin/policy-rc.d
    else
        echo "warning: radosgw missing and not root: the S3 tests against it will fail" >&2
    fi
fi
