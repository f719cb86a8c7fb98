#!/usr/bin/env bash
# The status page's browser test drives Debian's chromium headless. Install it when
# it is missing and this run may (root with apt, as on CI); otherwise say why the
# test will skip. Never fails the build: the test itself reports the skip reason.
set -u
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium is missing and cannot be installed here (needs root and apt-get):" \
         "the status page's browser test will skip" >&2
    exit 0
fi
echo "installing chromium (apt) for the status page's browser test" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
    echo "apt-get could not install chromium: the status page's browser test will skip" >&2
fi
exit 0
