#!/usr/bin/env bash
# Download (or build) every wheel the service images need into build/wheels/, so
# `docker build` installs with `pip install --no-index` and needs no network.
#
#   build/wheel-cache/    every wheel, once (not part of any image's build context)
#   build/wheels/<svc>/   exactly the wheels of services/<svc>/requirements.txt, as plain
#                         copies (hard links would change the build cache keys of a build
#                         from the repository root), and that requirements.txt; each
#                         image build copies only its own
#   build/wheels/common/  the wheels every service needs (the requirements all of them
#                         pin): the layer under every image (deploy/Dockerfile, "runtime")
#   build/wheels/build/   the build backend of the project's own packages
#                         (deploy/build-requirements.txt): the image build installs them
#                         from the sources with no index; it never reaches an image
#
# Wheels are fetched for the images' interpreter and platform (CPython 3.11, glibc
# manylinux, this machine's CPU), whatever Python runs this script. Packages that
# PyPI ships only as an sdist (pyspark, gunicorn-h1c) are built into a wheel here, on the
# host, reproducibly (deploy/build-wheel.sh: the same sdist gives the same bytes in every
# clone and on every machine with the same compiler), so an image built from them is a
# cache hit in a second clone. Built wheels are also kept in ZOSCII_WHEEL_CACHE (default
# ~/.cache/zoscii/wheels) by the sdist's sha256: a second clone copies them.
#
# Idempotent: a stamp keyed on the requirements files, this script and the target makes
# a second run return at once. FORCE=1 redoes it.
# Env: PYTHON (default python3), WHEEL_PYTHON_VERSION (3.11), WHEEL_ARCH (uname -m),
#      FORCE=1, ZOSCII_WHEEL_CACHE, PIP_INDEX_URL etc. as usual for pip.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/build/wheels"
POOL="$ROOT/build/wheel-cache"
SERVICES=(api replikate claireup statissa phpmq zmq live)
BUILD_REQUIREMENTS="$ROOT/deploy/build-requirements.txt"
WHEEL_BUILD_REQUIREMENTS="$ROOT/deploy/wheel-build-requirements.txt"  # build-wheel.sh's
WHEEL_CACHE=${ZOSCII_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zoscii/wheels}
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
    sha256sum < "$WHEEL_BUILD_REQUIREMENTS"
    sha256sum < "$ROOT/deploy/build-wheel.sh"
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

# An sdist built into a wheel on the host, reproducibly (deploy/build-wheel.sh): from the
# cache when this sdist (by sha256) was built before, on this machine, by any clone.
build_sdist() {  # sdist file
  local sdist=$1 t=$SECONDS sum out name
  name=$(basename "$sdist")
  sum=$(sha256sum "$sdist" | cut -d' ' -f1)
  out="$WHEEL_CACHE/$sum"
  mkdir -p "$WHEEL_CACHE"
  (
    flock 9
    if ls "$out"/*.whl >/dev/null 2>&1; then
      log "$name: the wheel this sdist gave before ($out)"
    else
      log "building a wheel of $name ($(du -sh "$sdist" | cut -f1))"
      rm -rf "$out.new"
      ZOSCII_WHEEL_CACHE=$WHEEL_CACHE PYTHON=$PYTHON "$ROOT/deploy/build-wheel.sh" "$sdist" "$out.new"
      mv "$out.new" "$out"
      log "built $name in $((SECONDS - t))s (kept in $out)"
    fi
  ) 9>"$WHEEL_CACHE/$sum.lock"  # this sdist's: another clone may be building it now
  cp "$out"/*.whl "$POOL/"
  case "$(ls "$out"/*.whl)" in
    *-none-any.whl) ;;
    *) log "$name: a platform wheel, built for this host's Python ($("$PYTHON" -V 2>&1))";;
  esac
}

# 1. Fetch wheels for the target into the pool, in one pass that takes an sdist where
#    PyPI has no usable wheel (pip allows that with --no-deps); each sdist is then built
#    into a wheel on the host (build_sdist), all at once. Then one pass over everything,
#    from the pool only, checks that nothing is missing.
t1=$SECONDS
log "downloading wheels for CPython $PYVER on $ARCH ($(wc -l < "$ALL") requirements)"
fetched="$OUT/.fetched"
rm -rf "$fetched"; mkdir -p "$fetched"
or_sdist=()
for arg in "${TARGET[@]}"; do [ "$arg" = --only-binary=:all: ] || or_sdist+=("$arg"); done
"${PIP[@]}" download --quiet --no-deps --prefer-binary "${or_sdist[@]}" \
  --find-links "$POOL" -d "$fetched" -r "$ALL"
builds=()
for f in "$fetched"/*; do
  case "$f" in
    *.whl) mv "$f" "$POOL/" ;;
    *) log "no wheel on the index for $(basename "$f")"; build_sdist "$f" & builds+=($!) ;;
  esac
done
for pid in "${builds[@]}"; do wait "$pid" || { log "FAILED: a wheel from an sdist"; exit 1; }; done
rm -rf "$fetched"
if ! "${PIP[@]}" download --quiet --no-deps "${TARGET[@]}" --no-index --find-links "$POOL" \
     -d "$POOL" -r "$ALL" 2>"$OUT/.pip.err"; then
  cat "$OUT/.pip.err" >&2; exit 1
fi
log "wheels downloaded or built in $((SECONDS - t1))s"

# 2. Per-service directories: the exact set for each requirements file (and the build
#    backend), checked for completeness (with dependencies) against the target, with the
#    requirements file itself; and the one every service shares.
for s in "${SERVICES[@]}"; do
  new="$OUT/.$s.new"
  rm -rf "$new"; mkdir -p "$new"
  "${PIP[@]}" download --quiet --no-index --find-links "$POOL" "${TARGET[@]}" \
    -d "$new" -r "$ROOT/services/$s/requirements.txt"
  cp "$ROOT/services/$s/requirements.txt" "$new/requirements.txt"
  rm -rf "$OUT/$s"; mv "$new" "$OUT/$s"
  log "$s: $(ls "$OUT/$s" | wc -l) wheels, $(du -sh "$OUT/$s" | cut -f1)"
done
new="$OUT/.common.new"
rm -rf "$new"; mkdir -p "$new"
for s in "${SERVICES[@]}"; do
  sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$ROOT/services/$s/requirements.txt" | sort -u
done | sort | uniq -c | awk -v n="${#SERVICES[@]}" '$1 == n { print $2 }' > "$new/requirements.txt"
if [ -s "$new/requirements.txt" ]; then
  "${PIP[@]}" download --quiet --no-index --find-links "$POOL" "${TARGET[@]}" --no-deps \
    -d "$new" -r "$new/requirements.txt"
fi
rm -rf "$OUT/common"; mv "$new" "$OUT/common"
log "common (under every image): $(tr '\n' ' ' < "$OUT/common/requirements.txt")"
new="$OUT/.build.new"
rm -rf "$new"; mkdir -p "$new"
"${PIP[@]}" download --quiet --no-index --find-links "$POOL" "${TARGET[@]}" \
  -d "$new" -r "$BUILD_REQUIREMENTS"
cp "$BUILD_REQUIREMENTS" "$new/requirements.txt"
rm -rf "$OUT/build"; mv "$new" "$OUT/build"

# 3. Drop pool files no service needs any more (old pins).
declare -A keep=()
for s in "${SERVICES[@]}" common build; do for f in "$OUT/$s"/*; do keep[$(basename "$f")]=1; done; done
for f in "$POOL"/*; do [ -n "${keep[$(basename "$f")]:-}" ] || { log "removing stale $(basename "$f")"; rm -f "$f"; }; done

rm -f "$OUT/.pip.err"
echo "$KEY" > "$OUT/.stamp"
rm -rf "$OUT/_pool"   # layout of older versions of this script
log "done in $((SECONDS - t0))s: $(du -sh "$OUT" | cut -f1) in $OUT"
