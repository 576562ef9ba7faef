#!/bin/sh
# zoscii/proxy: render nginx's configuration from the environment, then run nginx in the
# foreground as PID 1 (it reaps its own workers; SIGQUIT, the image's stop signal, lets
# requests in flight finish). The root filesystem is read-only: the configuration and
# nginx's pid and unused temp directories go to /tmp (tmpfs), request and answer bodies
# too large for memory to /var/spool/zoscii-proxy (a volume in docker-compose.yml).
#
# Settings (all optional):
#   ZOSCII_PROXY_UPSTREAM      host:port of the api                      (api:8080)
#   ZOSCII_PROXY_LIVE_UPSTREAM host:port of the live service, which takes waiting
#                              fetches and consumes and streams; none: the api takes
#                              them (it answers wait= itself)           (none)
#   ZOSCII_PROXY_PORT          port the proxy listens on                 (8080)
#   ZOSCII_PROXY_STATUS_PORT   127.0.0.1 port of /healthz and /status    (9180)
#   ZOSCII_MAX_MESSAGE_BYTES   the api's largest message; nginx accepts bodies up to
#                              that + 16 MiB (fields, multipart framing)  (1073741824)
#   ZOSCII_PROXY_HEADER_TIMEOUT_SECONDS  the whole request head          (10)
#   ZOSCII_PROXY_BODY_TIMEOUT_SECONDS    between two reads of a body     (30)
#   ZOSCII_PROXY_REAL_IP_FROM  addresses/CIDRs of a load balancer in front, comma
#                              separated: the client is then the last X-Forwarded-For
#                              hop it adds (empty: the peer is the client)
#   ZOSCII_PROXY_ACCESS_LOG    on | off                                  (on)
set -eu

die() { echo "zoscii-proxy: $*" >&2; exit 64; }
digits() {  # name value
  case "$2" in ''|*[!0-9]*) die "$1 must be a whole number, not '$2'" ;; esac
}

upstream=${ZOSCII_PROXY_UPSTREAM:-api:8080}
live_upstream=${ZOSCII_PROXY_LIVE_UPSTREAM:-none}
[ "$live_upstream" = none ] && live_upstream=$upstream
port=${ZOSCII_PROXY_PORT:-8080}
status_port=${ZOSCII_PROXY_STATUS_PORT:-9180}
max_message=${ZOSCII_MAX_MESSAGE_BYTES:-1073741824}
header_timeout=${ZOSCII_PROXY_HEADER_TIMEOUT_SECONDS:-10}
body_timeout=${ZOSCII_PROXY_BODY_TIMEOUT_SECONDS:-30}
real_ip_from=${ZOSCII_PROXY_REAL_IP_FROM:-}
access_log=${ZOSCII_PROXY_ACCESS_LOG:-on}

host_port() {  # name value
  case "$2" in
    *[!A-Za-z0-9.:_\[\]-]*|'') die "$1 must be host:port, not '$2'" ;;
    *:*) ;;
    *) die "$1 must be host:port, not '$2'" ;;
  esac
}
host_port ZOSCII_PROXY_UPSTREAM "$upstream"
host_port ZOSCII_PROXY_LIVE_UPSTREAM "$live_upstream"
for pair in "ZOSCII_PROXY_PORT $port" "ZOSCII_PROXY_STATUS_PORT $status_port" \
            "ZOSCII_MAX_MESSAGE_BYTES $max_message" \
            "ZOSCII_PROXY_HEADER_TIMEOUT_SECONDS $header_timeout" \
            "ZOSCII_PROXY_BODY_TIMEOUT_SECONDS $body_timeout"; do
  digits $pair
done
max_body=$((max_message + 16777216))
# Open files per worker: the hard limit the container was given, at most 65536.
nofile=$(ulimit -Hn)
case "$nofile" in unlimited) nofile=65536 ;; *[!0-9]*|'') nofile=16384 ;; esac
[ "$nofile" -gt 65536 ] && nofile=65536

real_ip=""
if [ -n "$real_ip_from" ]; then
  real_ip="    real_ip_header X-Forwarded-For;\\
    real_ip_recursive off;"
  for cidr in $(echo "$real_ip_from" | tr ',' ' '); do
    case "$cidr" in *[!0-9A-Fa-f.:/]*) die "ZOSCII_PROXY_REAL_IP_FROM: '$cidr' is not an address" ;; esac
    real_ip="$real_ip\\
    set_real_ip_from $cidr;"
  done
fi
case "$access_log" in
  on) access_log="/dev/stdout zoscii" ;;
  off) access_log="off" ;;
  *) die "ZOSCII_PROXY_ACCESS_LOG must be on or off" ;;
esac

mkdir -p /tmp/nginx /var/spool/zoscii-proxy/body /var/spool/zoscii-proxy/proxy
sed -e "s|@UPSTREAM@|$upstream|g" \
    -e "s|@LIVE_UPSTREAM@|$live_upstream|g" \
    -e "s|@NOFILE@|$nofile|g" \
    -e "s|@PORT@|$port|g" \
    -e "s|@STATUS_PORT@|$status_port|g" \
    -e "s|@MAX_BODY_BYTES@|$max_body|g" \
    -e "s|@HEADER_TIMEOUT@|$header_timeout|g" \
    -e "s|@BODY_TIMEOUT@|$body_timeout|g" \
    -e "s|@ACCESS_LOG@|$access_log|g" \
    -e "s|^@REAL_IP@\$|$real_ip|" \
    /etc/zoscii-proxy/nginx.conf.template > /tmp/nginx/nginx.conf
echo "$status_port" > /tmp/nginx/status-port

exec nginx -e stderr -c /tmp/nginx/nginx.conf -g 'daemon off;' "$@"
