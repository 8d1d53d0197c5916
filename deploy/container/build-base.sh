#!/usr/bin/env bash
# Builds the container base image `localhost/fleetmind-base:bookworm` from Debian's packages, for
# machines that reach Debian's archive but no container registry: mmdebstrap makes a minimal
# Debian 12 root file system with Python 3.11, and `podman import` turns it into an image.
# Reuses the image when it exists (pass --force to rebuild). Needs root, mmdebstrap and podman.
set -euo pipefail
IMAGE=${FLEETMIND_BASE_IMAGE:-localhost/fleetmind-base:bookworm}
if [ "${1:-}" != "--force" ] && podman image exists "$IMAGE"; then
  echo "$IMAGE exists"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mmdebstrap --quiet --variant=minbase \
  --include=python3,python3-venv,ca-certificates,libgomp1 \
  --aptopt='Acquire::Retries "3"' \
  --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
  bookworm "$tmp/rootfs.tar"
podman import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  "$tmp/rootfs.tar" "$IMAGE"
echo "built $IMAGE"
