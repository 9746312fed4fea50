# Sourced by scripts/test: the management API tests drive Debian's rabbitmqadmin (RabbitMQ
# 3.10.8), a single Python script. Only that file is taken from Debian's rabbitmq-server
# package: installing the package would start a RabbitMQ on 5672 and 25672.
if [ ! -x /usr/bin/rabbitmqadmin ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing rabbitmqadmin (from Debian's rabbitmq-server) for the admin tests" >&2
        work=$(mktemp -d)
        chmod 755 "$work"  # apt downloads as its own user
        (cd "$work" && apt-get update -qq >/dev/null && apt-get download -qq rabbitmq-server \
            >/dev/null && dpkg-deb --fsys-tarfile rabbitmq-server_*.deb \
            | tar -x ./usr/bin/rabbitmqadmin)
        install -m 755 "$work/usr/bin/rabbitmqadmin" /usr/bin/rabbitmqadmin
        rm -rf "$work"
    else
        echo "warning: rabbitmqadmin missing and not root: its admin tests will fail" >&2
    fi
fi
