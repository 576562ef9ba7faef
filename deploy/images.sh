#!/usr/bin/env bash
# Build the service images and the proxy (what `make images` runs), with no network at
# build time beyond what deploy/wheelhouse.sh needs the first time (and Debian's mirrors
# for nginx, tini or Java when the base lacks them):
#
#   1. at once: build/wheels/ (deploy/wheelhouse.sh; instant when the requirements did
#      not change) and the base: python:3.11-slim-bookworm if it is here or can be pulled
#      within 20 s, else the local zoscii/base:bookworm built from Debian packages
#      (deploy/base/build-base.sh; built once, then reused)
#   2. the proxy (deploy/nginx/Dockerfile) as soon as the base is there; the stages every
#      service image starts with ("runtime" and "builder" of deploy/Dockerfile, tagged
#      zoscii/builder:$IMAGE_TAG) once the wheels are
#   3. zoscii/{statissa,api,replikate,claireup,phpmq,zmq,live}:$IMAGE_TAG from deploy/Dockerfile
#      (--build-arg SERVICE=<svc>), JOBS at a time, statissa (the longest) first
#
# Progress: every step that runs (not a cache hit) is named as it starts, the slow ones
# (5 s or more) with the time they took, each image with its time and size, and at the
# end the time of each part. Each image is built from a context holding only its own
# inputs (not the repository root with every service's wheels), and an image whose
# inputs did not change since it was built is not built again at all: a second run takes
# a second or two. Inputs are compared by content, and the wheels built from sdists are
# reproducible (deploy/wheelhouse.sh), so another clone of the same commit gets every
# layer from the engine's cache.
#
# Env: IMAGE_TAG=dev          tag of the images
#      BASE=auto|public|local which base to use (auto: as described above)
#      BASE_IMAGE             use this image as it is (skips the choice)
#      LOCAL_BASE=zoscii/base:bookworm   the local base's name (build-base.sh's BASE_REPO)
#      PUBLIC_BASE=python:3.11-slim-bookworm
#      SERVICES="api statissa"       build only these (proxy is one of them)
#      JOBS=3                        image builds at a time
#      NO_CACHE=1                    docker build --no-cache
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
IMAGE_TAG=${IMAGE_TAG:-dev}
BASE=${BASE:-auto}
PUBLIC_BASE=${PUBLIC_BASE:-python:3.11-slim-bookworm}
LOCAL_BASE=${LOCAL_BASE:-zoscii/base:bookworm}
JOBS=${JOBS:-3}
read -r -a SERVICES <<<"${SERVICES:-statissa api replikate claireup phpmq zmq live proxy}"
PULL_MEMO="$ROOT/build/.public-base-unreachable"
SLOW_STEP=5  # seconds: a step that takes this long is reported with its time

log() { printf '[images] %s\n' "$*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
mkdir -p build/.images

t0=$SECONDS
declare -A took=()

# ---- 1. the wheelhouse and the base, at once -------------------------------------
"$ROOT/deploy/wheelhouse.sh" 2>&1 | sed -u 's/^/  /' >&2 &
wheelhouse_pid=$!

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

ts=$SECONDS
if [ -n "${BASE_IMAGE:-}" ]; then
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
  if [ "$BASE_IMAGE" = "$LOCAL_BASE" ]; then  # no-op when the image exists
    BASE_REPO=${LOCAL_BASE%:*} SUITE=${LOCAL_BASE##*:} "$ROOT/deploy/base/build-base.sh" base
  fi
fi
took[base]=$((SECONDS - ts))
log "base: $BASE_IMAGE ($why)"

# ---- building one image, with its progress -------------------------------------------
build_args=()
[ "${NO_CACHE:-0}" = 1 ] && build_args+=(--no-cache)

# What deploy/Dockerfile reads for a service, besides build/wheels/<svc> and
# build/wheels/common and build: the only files its context holds. The proxy:
# deploy/nginx/ (its Dockerfile, template and scripts); "builder": the stages every service
# image starts with.
context_files() {  # svc
  local f
  if [ "$1" = proxy ]; then
    for f in Dockerfile nginx.conf.template entrypoint.sh healthcheck.sh; do
      printf '%s\0' "deploy/nginx/$f"
    done
    return 0
  fi
  printf '%s\0' deploy/Dockerfile
  [ "$1" = builder ] && return 0
  for f in .dockerignore pyproject.toml README.md src/zosciimq \
           "services/$1/pyproject.toml" "services/$1/requirements.txt" \
           "services/$1/zoscii_$1" services/"$1"/*.conf.py; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done
  return 0
}

wheel_dirs() {  # svc: the wheel directories its context holds
  case "$1" in
    proxy) ;;
    builder) echo build/wheels/common; echo build/wheels/build ;;
    *) echo build/wheels/common; echo build/wheels/build; echo "build/wheels/$1" ;;
  esac
}

# What an image is built from: the context files and wheels (contents: a wheel built
# from an sdist is not pinned by its name) and the base image's ID. The same key as the
# last build that produced the image now tagged means there is nothing to do, not even
# sending the context (half a GB for statissa) to the daemon.
inputs_key() {  # svc
  {
    echo "$BASE_IMAGE $(docker image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null)"
    { context_files "$1"; wheel_dirs "$1" | tr '\n' '\0'; } |
      xargs -0 -I{} find {} -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 |
      sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
}

# docker build's output -> a line per step that runs, with the time of the slow ones.
progress() {  # svc log
  local svc=$1 out=$2 line step="" started=$SECONDS
  while IFS= read -r line; do
    printf '%s\n' "$line" >> "$out"
    case "$line" in
      Step\ *)
        if [ -n "$step" ] && [ $((SECONDS - started)) -ge "$SLOW_STEP" ]; then
          log "$svc: $step took $((SECONDS - started))s"
        fi
        step=${line#Step }; step=${step%% : *}
        current=${line#* : }; started=$SECONDS ;;
      " ---> Running in "*)
        log "$svc: step $step: ${current:0:70}" ;;
      " ---> Using cache")
        step="" ;;
    esac
  done
  if [ -n "$step" ] && [ $((SECONDS - started)) -ge "$SLOW_STEP" ]; then
    log "$svc: $step took $((SECONDS - started))s"
  fi
}

build_one() {  # svc: builds zoscii/<svc>:$IMAGE_TAG (or, for "builder", the shared stages)
  local svc=$1 image="zoscii/$1:$IMAGE_TAG" ts=$SECONDS key memo current target=()
  local out="build/.images-$svc.log"
  [ "$svc" = builder ] && target=(--target builder)
  key=$(inputs_key "$svc")
  memo="build/.images/$svc-$(echo "$IMAGE_TAG" | tr -c 'A-Za-z0-9._\n-' _)"
  current=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  if [ "${NO_CACHE:-0}" != 1 ] && [ -n "$current" ] && [ -f "$memo" ] &&
     [ "$(cat "$memo")" = "$key $current" ]; then
    log "$image is up to date"
    return 0
  fi
  : > "$out"
  local rc=0
  if [ "$svc" = proxy ]; then
    context_files proxy | sed -z 's|^deploy/nginx/||' |
      tar -C "$ROOT/deploy/nginx" --null -T - -cf - |
      docker build "${build_args[@]}" --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$image" - 2>&1 |
      progress "$svc" "$out" || rc=$?
  else
    { context_files "$svc"; wheel_dirs "$svc" | tr '\n' '\0'; } |
      tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' \
        --null -T - -cf - |
      docker build "${build_args[@]}" "${target[@]}" -f deploy/Dockerfile \
        --build-arg SERVICE="$svc" --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$image" - 2>&1 |
      progress "$svc" "$out" || rc=$?
  fi
  if [ "$rc" != 0 ] || ! grep -q '^Successfully tagged' "$out"; then
    tail -n 60 "$out" >&2
    log "FAILED: $image (whole log: $out)"
    return 1
  fi
  rm -f "$out"
  echo "$key $(docker image inspect -f '{{.Id}}' "$image")" > "$memo"
  local size
  size=$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')
  log "$image ($size) built in $((SECONDS - ts))s"
}

# ---- 2 and 3: the images, JOBS at a time ---------------------------------------------
declare -A pid_of=() started_at=()
failed=()
start() {  # svc
  started_at[$1]=$SECONDS
  build_one "$1" &
  pid_of[$1]=$!
}
finish_one() {  # waits for any build; notes its time
  local svc pid rc=0
  wait -n "${pid_of[@]}" || rc=$?
  for svc in "${!pid_of[@]}"; do
    pid=${pid_of[$svc]}
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" || failed+=("$svc")
      took[$svc]=$((SECONDS - started_at[$svc]))
      unset "pid_of[$svc]"
    fi
  done
  return 0
}

for svc in "${SERVICES[@]}"; do
  [ "$svc" = proxy ] || [ -f "services/$svc/pyproject.toml" ] ||
    { log "no service $svc (services/$svc/pyproject.toml)"; exit 1; }
done
printf '%s\n' "${SERVICES[@]}" | grep -qx proxy && start proxy  # needs the base only

ts=$SECONDS
if ! wait "$wheelhouse_pid"; then log "FAILED: the wheelhouse"; exit 1; fi
took[wheelhouse]=$((SECONDS - t0))
if printf '%s\n' "${SERVICES[@]}" | grep -qvx proxy; then
  ts=$SECONDS
  build_one builder || exit 1
  took[builder]=$((SECONDS - ts))
fi
for svc in "${SERVICES[@]}"; do
  [ "$svc" = proxy ] && continue
  while [ "${#pid_of[@]}" -ge "$JOBS" ]; do finish_one; done
  if [ "${#failed[@]}" -gt 0 ]; then break; fi
  start "$svc"
done
while [ "${#pid_of[@]}" -gt 0 ]; do finish_one; done

summary=""
for part in wheelhouse base builder "${SERVICES[@]}"; do
  [ -n "${took[$part]:-}" ] && summary="$summary, $part ${took[$part]}s"
done
if [ "${#failed[@]}" -gt 0 ]; then
  log "FAILED: ${failed[*]} (after $((SECONDS - t0))s${summary})"
  exit 1
fi
log "done in $((SECONDS - t0))s (${summary#, })"
