# Sourced by scripts/test: the tier's and the tables' S3 tests run against a real S3 server
# too, Ceph's RADOS Gateway (Debian's radosgw, with ceph-mon and ceph-osd under it: Debian
# 12's gateway stores only through a Ceph cluster); installed when missing. The tests start
# and stop their own single-node cluster on loopback ports (tests/support/radosgw.py), none
# as a service.
source "$(dirname "${BASH_SOURCE[0]}")/_debian.sh"
for command in radosgw ceph-mon ceph-osd; do
    if ! command -v "$command" >/dev/null 2>&1; then
        debian_install "the S3 tests against Ceph's gateway" radosgw ceph-mon ceph-osd
        break
    fi
done
