#!/usr/bin/env bash
# The kind tier (issue 25, docs/kind.md): tests/kind against a kind cluster brought up the way a user would
# (scripts/kind/with-cluster.sh: docker build, kind create cluster, kind load, helm install), taken down after, the
# host put back and checked. Fails, never skips, when the cluster cannot come up; pytest's exit 5 (no tests
# collected) counts as a failure.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
exec bash scripts/kind/with-cluster.sh bash -c '
  .venv/bin/python -m pytest -p no:cacheprovider -q tests/kind "$@"; rc=$?
  if [ "$rc" -eq 5 ]; then echo "kind tier collected no tests: counted as a failure"; rc=1; fi
  exit "$rc"' kind-tier "$@"
