#!/usr/bin/env bash
# Builds the FleetMind service image with podman (or docker: CONTAINER=docker):
#   deploy/container/build.sh [IMAGE]        (default localhost/fleetmind:<version>)
# Steps: the base image (build-base.sh, reused when present), a build context with this checkout's
# files (tracked and untracked, not ignored), the dependency list, constraints.txt and local wheels (PIP_FIND_LINKS
# folders, e.g. PyTorch's CPU wheel), then a multi-stage build with the host network and the host's
# CA bundle (pip inside the build reaches the same package index as the host).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
engine=${CONTAINER:-podman}
python=${PYTHON:-python3}
version=$("$python" -c "import tomllib,sys; print(tomllib.load(open(sys.argv[1],'rb'))['project']['version'])" "$repo/pyproject.toml")
image=${1:-localhost/fleetmind:$version}
[ "$engine" = podman ] && bash "$here/build-base.sh"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/src" "$ctx/wheels"
(cd "$repo" && git ls-files -co --exclude-standard -z -- . ':!benchmarks/results' ':!docs/img' \
  | xargs -0 -I{} sh -c 'test -e "{}" && echo "{}"' | tar -cf - -T -) | tar -xf - -C "$ctx/src"
"$python" - "$repo/pyproject.toml" "$ctx/requirements.txt" <<'PY'
import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
open(sys.argv[2], "w").write("\n".join(deps) + "\n")
PY
for d in ${PIP_FIND_LINKS:-}; do
  [ -d "$d" ] && find "$d" -maxdepth 1 -name 'torch-*.whl' -exec cp -l {} "$ctx/wheels/" \; 2>/dev/null \
    || find "$d" -maxdepth 1 -name 'torch-*.whl' -exec cp {} "$ctx/wheels/" \; 2>/dev/null || true
done
cp "$repo/constraints.txt" "$ctx/constraints.txt"  # the same pins as a source install
cp "$here/Dockerfile" "$ctx/Dockerfile"
ca=/etc/ssl/certs/ca-certificates.crt
mounts=()
[ -f "$ca" ] && [ "$engine" = podman ] && mounts=(-v "$ca:$ca:ro")
fmt=()
[ "$engine" = podman ] && fmt=(--format docker)  # OCI images drop HEALTHCHECK
"$engine" build --network host "${fmt[@]}" "${mounts[@]}" -t "$image" "$ctx"
echo "$image"
