#!/bin/sh
# The programs `make bench` drives, installed with apt-get when missing and we are root:
# wrk (the load generator) always; nginx, php-fpm and php-curl only when
# ZOSCII_BENCH_ORIGINAL names the original PHP implementation to compare with.
# Never fails: whatever is still missing, the bench reports (Python load generator
# instead of wrk, "not available" rows for the original).

missing=""
command -v wrk >/dev/null 2>&1 || missing="wrk"
if [ -n "${ZOSCII_BENCH_ORIGINAL:-}" ]; then
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx"
    fpm=$(command -v php-fpm 2>/dev/null || ls /usr/sbin/php-fpm* 2>/dev/null | head -n 1)
    if [ -z "$fpm" ]; then
        missing="$missing php-fpm php-curl"
    elif ! "$fpm" -m 2>/dev/null | grep -qx curl; then
        missing="$missing php-curl"
    fi
fi
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bench: installing$missing ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086  # one word per package
    apt-get install -y -q --no-install-recommends $missing >/dev/null \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $missing >/dev/null; } \
        || echo "bench: could not install$missing; the bench reports what is missing" >&2
else
    echo "bench: missing$missing (as root: apt-get install$missing); the bench reports what is missing" >&2
fi
exit 0
