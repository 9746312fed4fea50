# Sourced by scripts/test: the console tests drive Debian's chromium through chromedriver;
# install both when missing (needs root, as on the project's machines and CI).
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing chromium and chromium-driver for the console tests" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "warning: chromium/chromedriver missing and not root: console tests will fail" >&2
    fi
fi
