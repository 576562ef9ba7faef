#!/usr/bin/env bash
# Build one sdist into a wheel, reproducibly: the same sdist gives the same bytes in
# every clone and on every machine with the same compiler and Python (deploy/wheelhouse.sh
# uses it for the packages PyPI ships only as sdists: pyspark, gunicorn-h1c).
#
#   deploy/build-wheel.sh SDIST OUT_DIR
#
# What would differ from one build to the next, and what holds it still:
#   file times in the zip      SOURCE_DATE_EPOCH (1980-01-01)
#   the build directory        a C extension's debug information names it: the sdist is
#                              unpacked here and -ffile-prefix-map maps it to
#                              /usr/src/<name>-<version>
#   the build backend          not whatever PyPI has today (pip's isolated builds): the
#                              pins of deploy/wheel-build-requirements.txt, in a venv kept
#                              in ZOSCII_WHEEL_CACHE (default ~/.cache/zoscii/wheels)
# Env: PYTHON (default python3; its version decides a C extension's tag)
set -euo pipefail

[ "$#" = 2 ] || { echo "usage: $0 SDIST OUT_DIR" >&2; exit 2; }
SDIST=$(realpath "$1")
OUT=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
PINS="$ROOT/deploy/wheel-build-requirements.txt"
CACHE=${ZOSCII_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zoscii/wheels}

backend="$CACHE/backend-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-$(sha256sum < "$PINS" | cut -c1-12)"
mkdir -p "$CACHE"
(
  flock 9  # builds may run at once (wheelhouse.sh): one makes the backend
  if [ ! -f "$backend/.complete" ]; then  # a venv cannot move: made where it stays
    rm -rf "$backend"
    "$PYTHON" -m venv "$backend"
    "$backend/bin/pip" install --quiet --disable-pip-version-check -r "$PINS"
    touch "$backend/.complete"
  fi
) 9>"$backend.lock"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xf "$SDIST" -C "$work"
src=$(echo "$work"/*/)
src=${src%/}
mkdir -p "$OUT"
SOURCE_DATE_EPOCH=315532800 \
CFLAGS="${CFLAGS:-} -ffile-prefix-map=$src=/usr/src/$(basename "$src")" \
  "$backend/bin/pip" wheel --quiet --disable-pip-version-check --no-deps \
  --no-build-isolation -w "$OUT" "$src"
