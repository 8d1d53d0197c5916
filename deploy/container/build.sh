#!/usr/bin/env bash
# Builds the FleetMind service image with podman (or docker: CONTAINER=docker):
#   deploy/container/build.sh [IMAGE]        (default localhost/fleetmind:<version>)
# Steps: the base image, a build context with this checkout's files (tracked and untracked, not
# ignored; tracked files deleted from the working tree are left out), the dependency list,
# constraints.txt and local wheels (PIP_FIND_LINKS folders, e.g. PyTorch's CPU wheel), then a
# multi-stage build with the host network and the host's CA bundle (pip inside the build reaches the
# same package index as the host).
# The base image (the Dockerfile's BASE) is FLEETMIND_BASE_IMAGE, any image with Python 3.11 and
# python3-venv. Unset: podman builds localhost/fleetmind-base:bookworm from Debian's packages
# (build-base.sh, reused when present; so does any other localhost/ name), and docker, which cannot
# run build-base.sh and would look for `localhost` as a registry, uses
# docker.io/library/python:3.11-slim-bookworm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
engine=${CONTAINER:-podman}
kind=${engine##*/}  # podman or docker, also when CONTAINER is a path (/usr/bin/podman)
python=${PYTHON:-python3}
version=$("$python" -c "import tomllib,sys; print(tomllib.load(open(sys.argv[1],'rb'))['project']['version'])" "$repo/pyproject.toml")
image=${1:-localhost/fleetmind:$version}
if [ "$kind" = podman ]; then
  base=${FLEETMIND_BASE_IMAGE:-localhost/fleetmind-base:bookworm}
  case $base in localhost/*) FLEETMIND_BASE_IMAGE=$base bash "$here/build-base.sh" ;; esac
else
  base=${FLEETMIND_BASE_IMAGE:-docker.io/library/python:3.11-slim-bookworm}
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/src" "$ctx/wheels"
# NUL-separated names from git to tar; a name is data, never shell code
(cd "$repo" && git ls-files -co --exclude-standard -z -- . ':!benchmarks/results' ':!docs/img' \
  | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
  | tar --null --verbatim-files-from -cf - -T -) | tar -xf - -C "$ctx/src"
"$python" - "$repo/pyproject.toml" "$ctx/requirements.txt" <<'PY'
import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
open(sys.argv[2], "w").write("\n".join(deps) + "\n")
PY
# pip splits PIP_FIND_LINKS on any whitespace, newlines included
read -r -d '' -a links <<<"${PIP_FIND_LINKS:-}" || true
for d in ${links[@]+"${links[@]}"}; do
  [ -d "$d" ] || continue  # an index URL, or a missing folder
  for w in "$d"/torch-*.whl; do
    [ -f "$w" ] || continue
    # the first folder's wheel wins, as for pip; a second copy would write through the hard link
    # into the first folder's file
    [ -e "$ctx/wheels/${w##*/}" ] && continue
    # a hard link where it can (the same file system), else a copy keeping its time stamp
    cp -l "$w" "$ctx/wheels/" 2>/dev/null || cp -p "$w" "$ctx/wheels/" 2>/dev/null \
      || { echo "build.sh: cannot copy $w into the build context ($ctx)" >&2; exit 1; }
  done
done
touch -d @0 "$ctx/wheels"  # a fresh mktemp folder each run: a fixed time for builders that key on it
# the wheels are bind-mounted, not copied, into the build: their checksums are the dependency
# layer's cache key
(cd "$ctx/wheels" && find . -maxdepth 1 -type f -name '*.whl' -print0 | LC_ALL=C sort -z \
  | xargs -0 -r sha256sum) >"$ctx/wheels.sha256"
cp "$repo/constraints.txt" "$ctx/constraints.txt"  # the same pins as a source install
cp "$here/Dockerfile" "$ctx/Dockerfile"
ca=/etc/ssl/certs/ca-certificates.crt
mounts=()
[ -f "$ca" ] && [ "$kind" = podman ] && mounts=(-v "$ca:$ca:ro")
fmt=()
[ "$kind" = podman ] && fmt=(--format docker)  # OCI images drop HEALTHCHECK
"$engine" build --network host "${fmt[@]}" "${mounts[@]}" --build-arg "BASE=$base" -t "$image" "$ctx"
echo "$image"
