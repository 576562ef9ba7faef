#!/usr/bin/env bash
# Download (or build) every wheel the service images need into build/wheels/, so
# `docker build` installs with `pip install --no-index` and needs no network.
#
#   build/wheel-cache/    every wheel, once (not part of any image's build context)
#   build/wheels/<svc>/   exactly the wheels of services/<svc>/requirements.txt, plus the
#                         build backend of the project's own packages
#                         (deploy/build-requirements.txt), as plain copies (hard links
#                         would change the build cache keys of a build from the repository
#                         root); each image build copies only its own
#
# Wheels are fetched for the images' interpreter and platform (CPython 3.11, glibc
# manylinux, this machine's CPU), whatever Python runs this script. Packages that
# PyPI ships only as an sdist (pyspark) are built into a wheel here, on the host.
#
# Idempotent: a stamp keyed on the requirements files, this script and the target makes
# a second run return at once. FORCE=1 redoes it.
# Env: PYTHON (default python3), WHEEL_PYTHON_VERSION (3.11), WHEEL_ARCH (uname -m),
#      FORCE=1, PIP_INDEX_URL etc. as usual for pip.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/build/wheels"
POOL="$ROOT/build/wheel-cache"
SERVICES=(api replikate claireup statissa phpmq zmq live)
BUILD_REQUIREMENTS="$ROOT/deploy/build-requirements.txt"
PYTHON=${PYTHON:-python3}
PYVER=${WHEEL_PYTHON_VERSION:-3.11}
ARCH=${WHEEL_ARCH:-$(uname -m)}
ABI="cp${PYVER/./}"
# Debian bookworm has glibc 2.36.
PLATFORMS=(manylinux_2_36_"$ARCH" manylinux_2_28_"$ARCH" manylinux_2_17_"$ARCH"
           manylinux2014_"$ARCH" manylinux_2_5_"$ARCH" manylinux1_"$ARCH" linux_"$ARCH")

log() { printf '[wheelhouse] %s\n' "$*" >&2; }

target_args() {
  local p
  printf '%s\n' --only-binary=:all: --implementation cp --python-version "$PYVER" \
    --abi "$ABI" --abi abi3 --abi none
  for p in "${PLATFORMS[@]}"; do printf '%s\n' --platform "$p"; done
}
mapfile -t TARGET < <(target_args)

stamp_key() {
  {
    echo "target=$PYVER/$ABI/$ARCH"
    sha256sum < "$0"
    for s in "${SERVICES[@]}"; do echo "$s"; sha256sum < "$ROOT/services/$s/requirements.txt"; done
    sha256sum < "$BUILD_REQUIREMENTS"
  } | sha256sum | cut -d' ' -f1
}

KEY=$(stamp_key)
if [ "${FORCE:-0}" != 1 ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$KEY" ]; then
  log "up to date ($OUT)"
  exit 0
fi

t0=$SECONDS
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
  # Debian's python3 without pip (download and wheel work despite PEP 668).
  log "installing python3-pip with apt-get"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3-pip python3-venv >/dev/null
fi
PIP=("$PYTHON" -m pip --disable-pip-version-check --no-input)
mkdir -p "$POOL" "$OUT"
rm -f "$OUT/.stamp"

# One requirement set with everything, deduplicated (the files pin the same versions).
ALL="$OUT/.all-requirements.txt"
for s in "${SERVICES[@]}"; do cat "$ROOT/services/$s/requirements.txt"; done |
  cat - "$BUILD_REQUIREMENTS" |
  sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' | sort -u > "$ALL"

# 1. Fetch wheels for the target into the pool. A requirement without a usable wheel
#    (an sdist-only package) makes pip stop with "No matching distribution found for X":
#    build X into a wheel on the host (pure-Python sdists only make sense here) and retry.
for attempt in $(seq 1 10); do
  if "${PIP[@]}" download --quiet --no-deps "${TARGET[@]}" \
       --find-links "$POOL" -d "$POOL" -r "$ALL" 2>"$OUT/.pip.err"; then
    break
  fi
  missing=$(sed -n 's/.*No matching distribution found for \([^ ]*\).*/\1/p' "$OUT/.pip.err" | head -1)
  if [ -z "$missing" ] || [ "$attempt" = 10 ]; then cat "$OUT/.pip.err" >&2; exit 1; fi
  log "no wheel on the index for $missing: building one from the sdist (may take a while)"
  "${PIP[@]}" wheel --quiet --no-deps --find-links "$POOL" -w "$POOL" "$missing"
  whl=$(ls -t "$POOL"/*.whl | head -1)
  case "$whl" in
    *-none-any.whl) ;;
    *) log "WARNING: $whl is platform-specific, built for this host's Python";;
  esac
done

# 2. Per-service directories: the exact set for each requirements file (and the build
#    backend), checked for completeness (with dependencies) against the target.
for s in "${SERVICES[@]}"; do
  new="$OUT/.$s.new"
  rm -rf "$new"; mkdir -p "$new"
  "${PIP[@]}" download --quiet --no-index --find-links "$POOL" "${TARGET[@]}" \
    -d "$new" -r "$ROOT/services/$s/requirements.txt" -r "$BUILD_REQUIREMENTS"
  rm -rf "$OUT/$s"; mv "$new" "$OUT/$s"
  log "$s: $(ls "$OUT/$s" | wc -l) wheels, $(du -sh "$OUT/$s" | cut -f1)"
done

# 3. Drop pool files no service needs any more (old pins).
declare -A keep=()
for s in "${SERVICES[@]}"; do for f in "$OUT/$s"/*; do keep[$(basename "$f")]=1; done; done
for f in "$POOL"/*; do [ -n "${keep[$(basename "$f")]:-}" ] || { log "removing stale $(basename "$f")"; rm -f "$f"; }; done

rm -f "$OUT/.pip.err"
echo "$KEY" > "$OUT/.stamp"
rm -rf "$OUT/_pool"   # layout of older versions of this script
log "done in $((SECONDS - t0))s: $(du -sh "$OUT" | cut -f1) in $OUT"
