#!/usr/bin/env bash
# The test suite. Exits non-zero if any tier it ran fails or collects no tests.
#   bash scripts/test.sh          every tier, as CI runs it (root; the first run builds the cluster binaries)
#   bash scripts/test.sh unit     lint, types and the unit tests only: no root, no Go builds, about a minute
# Each tier prints its 15 slowest tests, and one hung test fails its tier (pytest-timeout) instead of eating CI.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
only=${1:-all}
case $only in
  unit) bash scripts/setup.sh --venv || exit 1 ;;
  all) bash scripts/setup.sh || exit 1 ;;
  *) echo "usage: bash scripts/test.sh [unit|all]" >&2; exit 2 ;;
esac

failed=()
tier() {  # tier <name> <per-test timeout s> <command...>: pytest's exit 5 (no tests collected) counts as a failure
  local name=$1 per_test=$2; shift 2
  local start=$SECONDS
  echo "=== tier $name: $*"
  PYTEST_ADDOPTS="--timeout=$per_test --durations=15 ${PYTEST_ADDOPTS:-}" "$@"
  local rc=$?
  echo "=== tier $name: exit $rc in $((SECONDS - start)) s"
  [ $rc -eq 0 ] || failed+=("$name(exit $rc)")
}

# The unit tier's gates: ruff on every Python file, mypy on the packages and the testkit, then the tests.
tier unit 60 bash -c '.venv/bin/ruff check . && .venv/bin/mypy && .venv/bin/python -m pytest tests/unit -q'
if [ "$only" = all ]; then
  tier cluster 900 bash tests/cluster/run.sh
  # The real node (containerd + kubelet, root only) and the whole flow on it; it fails, never skips, when it cannot run.
  tier node 1500 .venv/bin/python -m pytest tests/node -q
  tier hub 300 bash tests/hub/run.sh
  tier vllm 900 bash tests/vllm/run.sh
  # kind and docker as users run them (docker build, kind create cluster, kind load, helm install); last, since it
  # starts its own dockerd and cluster and takes both down again.
  tier kind 600 bash tests/kind/run.sh
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED tiers: ${failed[*]}"
  exit 1
fi
echo "all tiers passed ($only)"
