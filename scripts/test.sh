#!/usr/bin/env bash
# The whole test suite, every tier, as CI runs it. Exits non-zero if any tier fails or collects no tests.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh || exit 1

failed=()
tier() {  # tier <name> <command...>: runs one tier; pytest's exit 5 (no tests collected) counts as a failure
  local name=$1; shift
  local start=$SECONDS
  echo "=== tier $name: $*"
  "$@"
  local rc=$?
  echo "=== tier $name: exit $rc in $((SECONDS - start)) s"
  [ $rc -eq 0 ] || failed+=("$name(exit $rc)")
}

# The unit tier's gates: ruff on every Python file, mypy on the operator package, then the tests.
tier unit bash -c '.venv/bin/ruff check . && .venv/bin/mypy && .venv/bin/python -m pytest tests/unit -q'
tier cluster .venv/bin/python -m pytest tests/cluster -q
# The real node (containerd + kubelet, root only) and the whole flow on it; it fails, never skips, when it cannot run.
tier node .venv/bin/python -m pytest tests/node -q
tier hub bash tests/hub/run.sh
tier vllm bash tests/vllm/run.sh

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED tiers: ${failed[*]}"
  exit 1
fi
echo "all tiers passed"
