#!/usr/bin/env bash
# Wait until every container of a compose project is healthy (used by `make up`).
#
# Usage: deploy/wait-healthy.sh TIMEOUT_SECONDS COMPOSE_COMMAND...
#   e.g. deploy/wait-healthy.sh 180 docker-compose -p zoscii -f docker-compose.yml
# Exits 0 when all are healthy (or, for one-shot containers like data-init, exited 0);
# 1 (with their state and last log lines) when one turns unhealthy, stops, or the
# timeout passes.
set -euo pipefail

TIMEOUT=${1:?timeout in seconds}; shift
[ "$#" -gt 0 ] || { echo "usage: $0 TIMEOUT COMPOSE_COMMAND..." >&2; exit 2; }
COMPOSE=("$@")

mapfile -t ids < <("${COMPOSE[@]}" ps -q)
if [ "${#ids[@]}" -eq 0 ]; then echo "no containers in this project" >&2; exit 1; fi

state_of() {  # name status health   (a one-shot container that exited 0: "done")
  docker inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.State.ExitCode}} {{.HostConfig.RestartPolicy.Name}}' "$1" |
    sed 's|^/||' | awk '{ if ($2 == "exited" && $4 == "0" && ($5 == "no" || $5 == "")) $2 = "done"; print $1, $2, $3 }'
}

deadline=$((SECONDS + TIMEOUT))
printf 'waiting for %d containers to be healthy (%ss at most)' "${#ids[@]}" "$TIMEOUT" >&2
while :; do
  pending=0 failed=()
  for id in "${ids[@]}"; do
    read -r name status health < <(state_of "$id")
    case "$status/$health" in
      running/healthy|running/none|done/*) ;;
      running/starting) pending=$((pending + 1)) ;;
      *) failed+=("$name: $status/$health") ;;
    esac
  done
  if [ "${#failed[@]}" -eq 0 ] && [ "$pending" -eq 0 ]; then
    printf ' all healthy after %ss\n' "$SECONDS" >&2; exit 0
  fi
  if [ "${#failed[@]}" -gt 0 ] || [ "$SECONDS" -ge "$deadline" ]; then
    printf '\n' >&2
    [ "${#failed[@]}" -gt 0 ] && printf 'FAILED %s\n' "${failed[@]}" >&2
    [ "$SECONDS" -ge "$deadline" ] && echo "TIMEOUT: not healthy after ${TIMEOUT}s" >&2
    for id in "${ids[@]}"; do
      read -r name status health < <(state_of "$id")
      echo "---- $name ($status/$health), last log lines:" >&2
      docker logs --tail 25 "$id" 2>&1 | sed 's/^/  /' >&2
      docker inspect -f '{{if .State.Health}}{{range .State.Health.Log}}  healthcheck: exit {{.ExitCode}} {{.Output}}{{end}}{{end}}' "$id" | tail -n 3 >&2
    done
    exit 1
  fi
  printf '.' >&2
  sleep 2
done
