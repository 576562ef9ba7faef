#!/usr/bin/env bash
# Build the local base images from Debian packages, without any container registry:
#
#   zoscii/base:bookworm       minbase + python3, python3-venv, ca-certificates, tini, tzdata
#   zoscii/base-java:bookworm  the same + openjdk-17-jre-headless, procps (for statissa/PySpark)
#
# mmdebstrap builds a root filesystem tarball from the host's apt sources, and
# `docker import` turns it into a one-layer image. Used by deploy/images.sh when
# python:3.11-slim-bookworm cannot be pulled; also usable on its own.
#
# Usage: deploy/base/build-base.sh [base|java|all]      (default: all)
# Env:   FORCE=1          rebuild even if the image already exists
#        SUITE=bookworm   Debian suite
#        BASE_REPO=zoscii/base  JAVA_REPO=zoscii/base-java   image names (tag = SUITE)
#        DEBIAN_SOURCES=<file>  apt sources to build from (default: the host's Debian
#                               entries; if none, mmdebstrap's default deb.debian.org mirrors)
set -euo pipefail

WHAT=${1:-all}
SUITE=${SUITE:-bookworm}
BASE_REPO=${BASE_REPO:-zoscii/base}
JAVA_REPO=${JAVA_REPO:-zoscii/base-java}
FORCE=${FORCE:-0}

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK="$ROOT/build/base"

log() { printf '[build-base] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root for: $*"; exit 1; fi
}

ensure_mmdebstrap() {
  command -v mmdebstrap >/dev/null 2>&1 && return 0
  log "installing mmdebstrap with apt-get"
  as_root apt-get -o DPkg::Lock::Timeout=300 update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends \
    mmdebstrap >/dev/null
}

# The host's Debian apt sources (deb822 .sources or one-line .list), so the image is
# built from the same mirror/snapshot the host uses. Third-party repositories are left out.
host_sources() {
  local f out="$WORK/sources"
  if [ -n "${DEBIAN_SOURCES:-}" ]; then echo "$DEBIAN_SOURCES"; return; fi
  mkdir -p "$out"; rm -f "$out"/*
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] || continue
    grep -Eq '(debian\.org|debian-security|/debian/?( |$))' "$f" || continue
    grep -Eq "(^deb |^Suites:).*\\b$SUITE\\b" "$f" || continue
    cp "$f" "$out/$(basename "$f")"
  done
  ls "$out"/* 2>/dev/null || true
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# build_one IMAGE "pkg,pkg" [extra docker import --change args...]
build_one() {
  local image=$1 include=$2; shift 2
  if [ "$FORCE" != 1 ] && image_exists "$image"; then
    log "$image already exists (FORCE=1 to rebuild)"; return 0
  fi
  ensure_mmdebstrap
  mkdir -p "$WORK"
  local tar="$WORK/$(echo "$image" | tr '/:' '__').tar"
  local -a mirrors
  mapfile -t mirrors < <(host_sources)
  log "building $image from Debian $SUITE (${mirrors[*]:-default mirrors}): $include"
  local t0=$SECONDS
  # Docs, man pages, locales and apt lists are left out; the dpkg excludes also stay
  # in the image (/etc/dpkg/dpkg.cfg.d/99mmdebstrap) for any later apt-get install.
  mmdebstrap --variant=minbase --format=tar --quiet \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include="$include" \
    --aptopt='APT::Install-Recommends "false"' \
    --aptopt='APT::Install-Suggests "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/share/linda/*' \
    --essential-hook='mkdir -p "$1/usr/share/man/man1"' \
    --customize-hook='rm -rf "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/log/alternatives.log "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old' \
    --customize-hook='rm -f "$1"/etc/machine-id "$1"/var/lib/dbus/machine-id; : > "$1"/etc/hostname' \
    "$SUITE" "$tar" "${mirrors[@]}" >"$tar.log" 2>&1 || {
      tail -n 40 "$tar.log" >&2; log "mmdebstrap failed (full log: $tar.log)"; rm -f "$tar"; exit 1; }
  docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL org.opencontainers.image.description=\"ZOSCII MQ local base: Debian $SUITE minbase ($include)\"" \
    --change 'CMD ["/bin/bash"]' \
    "$@" "$tar" "$image" >/dev/null
  rm -f "$tar" "$tar.log"
  log "$image built in $((SECONDS - t0))s, $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"
}

BASE_PKGS=python3,python3-venv,ca-certificates,tini,tzdata
JAVA_PKGS=$BASE_PKGS,openjdk-17-jre-headless,procps
ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)

case "$WHAT" in
  base|all|java) ;;
  *) echo "usage: $0 [base|java|all]" >&2; exit 2 ;;
esac
if [ "$WHAT" = base ] || [ "$WHAT" = all ]; then
  build_one "$BASE_REPO:$SUITE" "$BASE_PKGS"
fi
if [ "$WHAT" = java ] || [ "$WHAT" = all ]; then
  build_one "$JAVA_REPO:$SUITE" "$JAVA_PKGS" --change "ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-$ARCH"
fi
