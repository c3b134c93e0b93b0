#!/usr/bin/env bash
# The kind tier (issue 25, docs/kind.md): brings the kind cluster up the way a user would (scripts/kind/cluster.sh:
# docker build, kind create cluster, kind load, helm install; every build cached under <cache>), runs tests/kind
# against it, and always takes it down again (cluster deleted, dockerd stopped) and puts the host back: kind's nodes
# are privileged, so their kubelets set the host's vm.overcommit_memory, kernel.panic_on_oops and the other kernel
# settings a kubelet sets (seen here: 0 -> 1 for those two); they are saved before and written back after, and the
# tier fails if the host's kernel settings, iptables chains, links, netns or node folders are not as they were.
# Fails, never skips, when the cluster cannot come up; pytest's exit 5 (no tests collected) counts as a failure.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
start=$SECONDS
state=$(mktemp)
.venv/bin/python -m dflash_testkit.hoststate save "$state" || exit 1
rc=0
finish() {
  bash scripts/kind/cluster.sh down >/dev/null 2>&1 || { echo "kind tier: cluster.sh down failed"; rc=1; }
  .venv/bin/python -m dflash_testkit.hoststate restore "$state" || rc=1
  rm -f "$state"
  echo "kind tier: exit $rc after $((SECONDS - start)) s"
  exit "$rc"
}
trap finish EXIT
if ! bash scripts/kind/cluster.sh up >/dev/null; then
  echo "kind tier: scripts/kind/cluster.sh up failed after $((SECONDS - start)) s"
  rc=1
  exit
fi
echo "kind tier: cluster up after $((SECONDS - start)) s"
eval "$(bash scripts/kind/cluster.sh env)"
.venv/bin/python -m pytest -p no:cacheprovider -q tests/kind "$@" || rc=$?
if [ "$rc" -eq 5 ]; then echo "kind tier collected no tests: counted as a failure"; rc=1; fi
