#!/usr/bin/env bash
# Build the service images and the proxy (what `make images` runs), with no network at
# build time beyond what deploy/wheelhouse.sh needs the first time (and, for the proxy,
# Debian's mirrors for the nginx package the first time):
#
#   1. build/wheels/ (deploy/wheelhouse.sh; instant when the requirements did not change)
#   2. the base: python:3.11-slim-bookworm if it is here or can be pulled within 20 s,
#      else the local zoscii/base(-java):bookworm built from Debian packages
#      (deploy/base/build-base.sh; built once, then reused)
#   3. zoscii/{api,replikate,claireup,statissa,phpmq,zmq,live}:$IMAGE_TAG, all from deploy/Dockerfile
#      (--build-arg SERVICE=<svc>), statissa on the Java base
#   4. zoscii/proxy:$IMAGE_TAG (nginx in front of the api) from deploy/nginx/Dockerfile, on
#      the same base as the services (its context: deploy/nginx/)
#
# Each image is built from a context holding only its own inputs (not the repository
# root with every service's wheels): nothing changed means every step is a cache hit and
# the whole run takes a second or two.
#
# Env: IMAGE_TAG=dev          tag of the four images
#      BASE=auto|public|local which base to use (auto: as described above)
#      BASE_IMAGE, JAVA_BASE_IMAGE   use these images as they are (skips the choice)
#      PUBLIC_BASE=python:3.11-slim-bookworm
#      SERVICES="api statissa"       build only these (proxy is one of them)
#      NO_CACHE=1                    docker build --no-cache
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
IMAGE_TAG=${IMAGE_TAG:-dev}
BASE=${BASE:-auto}
PUBLIC_BASE=${PUBLIC_BASE:-python:3.11-slim-bookworm}
LOCAL_BASE=zoscii/base:bookworm
LOCAL_JAVA_BASE=zoscii/base-java:bookworm
read -r -a SERVICES <<<"${SERVICES:-api replikate claireup statissa phpmq zmq live proxy}"
PULL_MEMO="$ROOT/build/.public-base-unreachable"

log() { printf '[images] %s\n' "$*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

t0=$SECONDS
"$ROOT/deploy/wheelhouse.sh"

# ---- choose the base ----------------------------------------------------------------
try_public() {
  have_image "$PUBLIC_BASE" && return 0
  # A pull that timed out is remembered for an hour, so repeated runs stay fast.
  if [ -f "$PULL_MEMO" ] && [ -n "$(find "$PULL_MEMO" -mmin -60 2>/dev/null)" ]; then
    return 1
  fi
  log "trying: docker pull $PUBLIC_BASE (20 s at most)"
  local rc=0
  timeout 20 docker pull -q "$PUBLIC_BASE" >/dev/null 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then rm -f "$PULL_MEMO"; return 0; fi
  if [ "$rc" = 124 ]; then mkdir -p "$(dirname "$PULL_MEMO")"; touch "$PULL_MEMO"; fi
  return 1
}

if [ -n "${BASE_IMAGE:-}" ]; then
  JAVA_BASE_IMAGE=${JAVA_BASE_IMAGE:-$BASE_IMAGE}
  why="BASE_IMAGE given"
else
  case "$BASE" in
    public) BASE_IMAGE=$PUBLIC_BASE; why="BASE=public" ;;
    local) BASE_IMAGE=$LOCAL_BASE; why="BASE=local" ;;
    auto)
      if try_public; then BASE_IMAGE=$PUBLIC_BASE; why="$PUBLIC_BASE is available"
      else BASE_IMAGE=$LOCAL_BASE; why="$PUBLIC_BASE cannot be pulled (no registry reachable)"; fi ;;
    *) log "BASE must be auto, public or local"; exit 2 ;;
  esac
  if [ "$BASE_IMAGE" = "$LOCAL_BASE" ]; then
    JAVA_BASE_IMAGE=$LOCAL_JAVA_BASE
    need=()
    for s in "${SERVICES[@]}"; do
      if [ "$s" = statissa ]; then need+=(java); else need+=(base); fi   # proxy: base
    done
    for what in $(printf '%s\n' "${need[@]}" | sort -u); do
      "$ROOT/deploy/base/build-base.sh" "$what"     # no-op when the image exists
    done
  else
    JAVA_BASE_IMAGE=$BASE_IMAGE                      # the Dockerfile adds Java with apt
  fi
fi
log "base: $BASE_IMAGE, statissa base: $JAVA_BASE_IMAGE ($why)"

# ---- build ----------------------------------------------------------------------------
build_args=()
[ "${NO_CACHE:-0}" = 1 ] && build_args+=(--no-cache)

# What deploy/Dockerfile reads for a service, besides build/wheels/<svc>: the only files
# its context holds. The proxy: deploy/nginx/ (its Dockerfile, template and scripts).
context_files() {  # svc
  local f
  if [ "$1" = proxy ]; then
    for f in Dockerfile nginx.conf.template entrypoint.sh healthcheck.sh; do
      printf '%s\0' "deploy/nginx/$f"
    done
    return 0
  fi
  for f in .dockerignore deploy/Dockerfile pyproject.toml README.md src/zosciimq \
           "services/$1/pyproject.toml" "services/$1/requirements.txt" \
           "services/$1/zoscii_$1" services/"$1"/*.conf.py; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done
  return 0
}

# What an image is built from: the context files (contents; wheels by name and size, a
# wheel's name pins its contents) and the base image's ID. The same key as the last build
# that produced the image now tagged means there is nothing to do, not even sending the
# context (half a GB for statissa) to the daemon.
inputs_key() {  # svc base
  {
    echo "$2 $(docker image inspect -f '{{.Id}}' "$2" 2>/dev/null)"
    context_files "$1" | xargs -0 -I{} find {} -type f ! -path '*/__pycache__/*' \
      ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
    [ "$1" = proxy ] || find "build/wheels/$1" -type f -printf '%f %s\n' | sort
  } | sha256sum | cut -d' ' -f1
}
mkdir -p build/.images

for svc in "${SERVICES[@]}"; do
  [ "$svc" = proxy ] || [ -f "services/$svc/pyproject.toml" ] ||
    { log "no service $svc (services/$svc/pyproject.toml)"; exit 1; }
  base=$BASE_IMAGE
  [ "$svc" = statissa ] && base=$JAVA_BASE_IMAGE
  image="zoscii/$svc:$IMAGE_TAG"
  ts=$SECONDS
  key=$(inputs_key "$svc" "$base")
  memo="build/.images/$svc-$(echo "$IMAGE_TAG" | tr -c 'A-Za-z0-9._\n-' _)"
  current=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  if [ "${NO_CACHE:-0}" != 1 ] && [ -n "$current" ] && [ -f "$memo" ] &&
     [ "$(cat "$memo")" = "$key $current" ]; then
    log "$image is up to date"
    continue
  fi
  # The context: what deploy/Dockerfile may COPY for this service. Same file contents
  # give the same cache keys as a build from the repository root (docker-compose build).
  if [ "$svc" = proxy ]; then
    # A context of its own, deploy/nginx/ (only the files context_files names).
    build() {
      context_files proxy | sed -z 's|^deploy/nginx/||' |
        tar -C "$ROOT/deploy/nginx" --null -T - -cf - |
        docker build "${build_args[@]}" --build-arg BASE_IMAGE="$base" -t "$image" -
    }
  else
    build() {
      { context_files "$svc"; printf '%s\0' "build/wheels/$svc"; } |
        tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' \
          --null -T - -cf - |
        docker build "${build_args[@]}" -f deploy/Dockerfile --build-arg SERVICE="$svc" \
          --build-arg BASE_IMAGE="$base" -t "$image" -
    }
  fi
  if ! build >"build/.images-$svc.log" 2>&1; then
    tail -n 60 "build/.images-$svc.log" >&2
    log "FAILED: $image (whole log: build/.images-$svc.log)"
    exit 1
  fi
  rm -f "build/.images-$svc.log"
  echo "$key $(docker image inspect -f '{{.Id}}' "$image")" > "$memo"
  size=$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')
  log "$image ($size) on $base in $((SECONDS - ts))s"
done
log "done in $((SECONDS - t0))s"
