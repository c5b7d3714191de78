#!/usr/bin/env bash
# A Python 3.11 base image built from Debian's packages, for a machine that cannot pull
# python:3.11-slim (no Docker Hub): debootstrap, then `docker import`. It has python3.11 and pip
# on PATH as `python` and `pip`, as python:3.11-slim does, so env/gaia/Dockerfile builds on it:
#   env/gaia/base-image.sh [TAG]        then GAIA_BASE_IMAGE=TAG env/gaia/run-local.sh
# Needs root, debootstrap (apt-get install debootstrap) and Debian's mirror (DEBIAN_MIRROR).
set -euo pipefail
TAG=${1:-aworld-train/python:3.11-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG is there already"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "needs debootstrap: apt-get install debootstrap" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; exit 1; }

ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates bookworm "$ROOTFS" "$MIRROR"
ln -sf python3 "$ROOTFS/usr/bin/python"
ln -sf pip3 "$ROOTFS/usr/bin/pip"
# an image's pip installs into its system Python (PEP 668's marker is for shared machines)
rm -f "$ROOTFS"/usr/lib/python3*/EXTERNALLY-MANAGED
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin
tar -C "$ROOTFS" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
  --change 'CMD ["python"]' - "$TAG"
echo "built $TAG"
