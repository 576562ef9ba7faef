#!/bin/bash
# zoscii/proxy health check: GET /healthz on the proxy's loopback-only status server,
# which asks the api's /healthz through the same upstream as the clients' requests, so
# "healthy" means the whole path answers. No curl in the image: bash's /dev/tcp.
# `zoscii-proxy-health status` prints nginx's counters (stub_status) instead.
set -u
port=$(cat /tmp/nginx/status-port 2>/dev/null || echo "${ZOSCII_PROXY_STATUS_PORT:-9180}")
path=/healthz
[ "${1:-}" = status ] && path=/status
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$path" >&3
IFS= read -r -t 4 line <&3 || exit 1
if [ "$path" = /status ]; then
  while IFS= read -r -t 4 header <&3 && [ "${header%$'\r'}" != "" ]; do :; done
  cat <&3
  exit 0
fi
case "$line" in
  "HTTP/1.1 200"*) exit 0 ;;
  *) echo "$line" >&2; exit 1 ;;
esac
