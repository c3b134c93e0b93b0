#!/usr/bin/env bash
# Runs one command against a kind cluster that exists only for it, and leaves the host as it was:
#   bash scripts/kind/with-cluster.sh COMMAND [ARG...]
# saves the host's state, brings the cluster up (cluster.sh up: docker builds, kind create cluster, kind load, helm
# install; every build cached under <cache>), runs COMMAND with cluster.sh env's settings exported, then always
# takes the cluster down (cluster deleted, dockerd stopped, and started again if it ran before) and puts the host
# back: kind's nodes are privileged, so their kubelets set the host's vm.overcommit_memory, kernel.panic_on_oops and
# the other kernel settings a kubelet sets (seen here: 0 -> 1 for those two); they are written back, and the run
# fails if the host's kernel settings, iptables chains, links, netns or node folders are not as they were. Exits
# with COMMAND's status (1 if the cluster never came up or the host was not put back). Used by tests/kind/run.sh
# and `scripts/demo.sh --kind`.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
start=$SECONDS
state=$(mktemp)
# The private dockerd already running (started by hand to build images, say) is stopped before the host's state is
# saved and started again at the end: its containers' first start makes /run/containerd on the host, so a state
# saved with it running was not the one `down` puts back (a demo run on 2026-12-07 failed its host check on that).
restart_dockerd=false
if bash scripts/kind/dockerd.sh running; then
  restart_dockerd=true
  bash scripts/kind/dockerd.sh stop >/dev/null || exit 1
fi
.venv/bin/python -m dflash_testkit.hoststate save "$state" || exit 1
rc=0
finish() {
  bash scripts/kind/cluster.sh down >/dev/null 2>&1 || { echo "kind: cluster.sh down failed"; rc=1; }
  .venv/bin/python -m dflash_testkit.hoststate restore "$state" || rc=1
  rm -f "$state"
  if $restart_dockerd; then bash scripts/kind/dockerd.sh start >/dev/null || rc=1; fi
  echo "kind: cluster down, host put back; exit $rc after $((SECONDS - start)) s"
  exit "$rc"
}
trap finish EXIT
if ! bash scripts/kind/cluster.sh up >/dev/null; then
  echo "kind: scripts/kind/cluster.sh up failed after $((SECONDS - start)) s"
  rc=1
  exit
fi
echo "kind: cluster up after $((SECONDS - start)) s"
eval "$(bash scripts/kind/cluster.sh env)"
"$@" || rc=$?
