#!/usr/bin/env bash
# Writes the bearer tokens the Kubernetes manifests load (kustomize's secretGenerator reads
# base/tokens.env into the Secret fleetmind-tokens): one random token per scope, 64 hex characters
# each. The service refuses placeholder or short tokens, so the manifests ship none.
#   deploy/kubernetes/make-tokens.sh [DIR]      (default: the base folder next to this script)
# An existing tokens.env is kept (rotate by deleting it). The file is git-ignored; keep it secret.
set -euo pipefail
dir=${1:-$(cd "$(dirname "$0")" && pwd)/base}
out="$dir/tokens.env"
if [ -e "$out" ]; then
  echo "kept $out" >&2
  exit 0
fi
umask 077
{
  for scope in INGEST READ SCHEDULE ADMIN; do
    echo "FLEETMIND_${scope}_TOKEN=$(openssl rand -hex 32)"
  done
} > "$out"
echo "wrote $out" >&2
