#!/usr/bin/env bash
# What `make up` runs once the images are built: the operator's token when none is
# configured, the stack started and waited for, then where everything is.
#
# Usage: deploy/up.sh COMPOSE_COMMAND...
#   e.g. deploy/up.sh docker-compose -p zoscii --project-directory . -f docker-compose.yml
#
# The operator's token (admin actions: `zoscii queues`, purge, delete, replay, and the
# console's buttons): when ZOSCII_ADMIN_TOKEN_SHA256 is neither in the environment nor a
# line of ENV_FILE, a random one is made, kept in ADMIN_TOKEN_FILE (mode 0600, the
# directory 0700) and its sha256 appended to ENV_FILE, where compose reads it; the api
# and statissa only ever see the hash. It is printed once, when made. A token file left
# from before gives the hash again instead of a new token. To have no such token, put
# an empty `ZOSCII_ADMIN_TOKEN_SHA256=` line in ENV_FILE (admin actions then need a
# client with the admin right, or nobody has them).
#
# Env: ENV_FILE=.env  ADMIN_TOKEN_FILE=secrets/admin-token  UP_TIMEOUT=240
set -euo pipefail

[ "$#" -gt 0 ] || { echo "usage: $0 COMPOSE_COMMAND..." >&2; exit 2; }
COMPOSE=("$@")
ENV_FILE=${ENV_FILE:-.env}
TOKEN_FILE=${ADMIN_TOKEN_FILE:-secrets/admin-token}
UP_TIMEOUT=${UP_TIMEOUT:-240}
HERE=$(cd "$(dirname "$0")" && pwd)

# A setting as compose sees it: the shell's environment first, then ENV_FILE.
setting() {  # name
  if [ -n "${!1+set}" ]; then printf '%s' "${!1}"; return; fi
  [ -f "$ENV_FILE" ] && sed -n "s/^$1=//p" "$ENV_FILE" | tail -n 1 | sed -e 's/^"\(.*\)"$/\1/'
  return 0
}
configured() {  # name: set in the environment, or a line of ENV_FILE (even empty)
  [ -n "${!1+set}" ] || { [ -f "$ENV_FILE" ] && grep -q "^$1=" "$ENV_FILE"; }
}
sha256_of() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

new_token=""
if ! configured ZOSCII_ADMIN_TOKEN_SHA256; then
  if [ -s "$TOKEN_FILE" ]; then
    token=$(tr -d ' \n' < "$TOKEN_FILE")
    how="from $TOKEN_FILE"
  else
    token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    mkdir -p "$(dirname "$TOKEN_FILE")"
    chmod 0700 "$(dirname "$TOKEN_FILE")" 2>/dev/null || true
    (umask 077; printf '%s\n' "$token" > "$TOKEN_FILE")
    new_token=$token
    how="new"
  fi
  [ -f "$ENV_FILE" ] || (umask 077; : > "$ENV_FILE")
  [ -z "$(tail -c 1 "$ENV_FILE")" ] || echo >> "$ENV_FILE"
  {
    echo "# The operator's token for admin actions (its sha256; the token: $TOKEN_FILE),"
    echo "# made by make up on $(date -u +%Y-%m-%dT%H:%M:%SZ)."
    echo "ZOSCII_ADMIN_TOKEN_SHA256=$(sha256_of "$token")"
  } >> "$ENV_FILE"
  echo "[up] operator's token: $how ($TOKEN_FILE), its sha256 added to $ENV_FILE" >&2
fi

"${COMPOSE[@]}" --env-file "$ENV_FILE" up -d --no-build --remove-orphans
"$HERE/wait-healthy.sh" "$UP_TIMEOUT" "${COMPOSE[@]}" --env-file "$ENV_FILE"

port() {  # service container-port -> host:port as a browser on this host writes it
  "${COMPOSE[@]}" --env-file "$ENV_FILE" port "$1" "$2" | sed 's/^0\.0\.0\.0:/localhost:/'
}
api=$(port proxy 8080) direct=$(port api 8080) stats=$(port statissa 9103)
zoscii=zoscii
if ! command -v zoscii >/dev/null && [ -x .venv/bin/zoscii ]; then zoscii=.venv/bin/zoscii; fi
echo
echo "  API:         http://$api/   (index.php works too; through the proxy: clients go here)"
if [ "$(setting ZOSCII_DIRECT_ACCESS | tr '[:upper:]' '[:lower:]')" = public ]; then
  echo "  API direct:  http://$direct/   (the api itself, PUBLIC: ZOSCII_DIRECT_ACCESS=public,"
  echo "               no proxy in front of it: SECURITY.md, \"Slow clients\")"
else
  echo "  API direct:  http://$direct/   (the api itself: /metrics and tools on this host. Not"
  echo "               a public port: it answers this host and the compose network only;"
  echo "               ZOSCII_DIRECT_ACCESS=public would make it one, without the proxy)"
fi
echo "  Console:     http://$stats/   (statistics, /metrics, /stats.json)"
echo "  replikate:   http://$(port replikate 9101)/metrics"
echo "  claireup:    http://$(port claireup 9102)/metrics"
echo
if [ -n "$new_token" ]; then
  echo "  The operator's token, made now and shown only this once (kept in $TOKEN_FILE;"
  echo "  the stack has only its sha256, ZOSCII_ADMIN_TOKEN_SHA256 in $ENV_FILE):"
  echo
  echo "      $new_token"
  echo
  echo "  CLI:      export ZOSCII_URL=http://$api/ ZOSCII_TOKEN=$new_token"
  echo "            $zoscii queues"
  echo "  Console:  admin actions ask for it on a queue's page: user admin, the token as password"
elif [ -n "$(setting ZOSCII_ADMIN_TOKEN_SHA256)" ]; then
  if [ -s "$TOKEN_FILE" ]; then where="in $TOKEN_FILE"; else where="yours"; fi
  echo "  Admin:       the operator's token ($where):"
  echo "               export ZOSCII_URL=http://$api/ ZOSCII_TOKEN=\$(cat $TOKEN_FILE)"
  echo "               $zoscii queues"
else
  echo "  Admin:       no operator's token (ZOSCII_ADMIN_TOKEN_SHA256 is empty): admin actions"
  echo "               need a client with the admin right (ZOSCII_AUTH_FILE)"
fi
