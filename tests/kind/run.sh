#!/usr/bin/env bash
# The kind tier (issue 25, docs/kind.md): brings the kind cluster up the way a user would (scripts/kind/cluster.sh:
# docker build, kind create cluster, kind load, helm install; every build cached under <cache>), runs tests/kind
# against it, and always takes it down again (cluster deleted, dockerd stopped: the host as it was). Fails, never
# skips, when the cluster cannot come up; pytest's exit 5 (no tests collected) counts as a failure.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
start=$SECONDS
trap 'bash scripts/kind/cluster.sh down >/dev/null 2>&1 || echo "kind tier: cluster.sh down failed: host state may be left"' EXIT
if ! bash scripts/kind/cluster.sh up >/dev/null; then
  echo "kind tier: scripts/kind/cluster.sh up failed after $((SECONDS - start)) s"
  exit 1
fi
echo "kind tier: cluster up after $((SECONDS - start)) s"
eval "$(bash scripts/kind/cluster.sh env)"
rc=0
.venv/bin/python -m pytest -p no:cacheprovider -q tests/kind "$@" || rc=$?
if [ "$rc" -eq 5 ]; then echo "kind tier collected no tests: counted as a failure"; exit 1; fi
echo "kind tier: exit $rc after $((SECONDS - start)) s"
exit "$rc"
