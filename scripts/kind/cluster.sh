#!/usr/bin/env bash
# The kind path end to end (issue 25, docs/kind.md):
#   bash scripts/kind/cluster.sh up     # dockerd, images (docker build), kind cluster, pod network, operator by helm
#   bash scripts/kind/cluster.sh env    # the export lines for docker/kubectl/helm against it
#   bash scripts/kind/cluster.sh down   # deletes the cluster and stops dockerd (host as it was)
# Everything lives under <cache> (~/.cache/dflash-operator): dockerd's store, kind, the kubeconfig (<cache>/kind/kubeconfig,
# never ~/.kube/config) and kubectl's discovery cache. Idempotent: `up` on a running cluster reloads the operator image
# and upgrades the release. The operator image is the one `docker build -f images/operator/Dockerfile .` makes
# (images/build.sh), put on the nodes with `kind load docker-image`.
# Test-environment adaptations (each explained in docs/kind.md): the runc wrapper of scripts/kind/dockerd.sh, the
# stand-in and node images built here without a registry, restrict_oom_score_adj and failCgroupV1 in kind-config.yaml,
# and scripts/kind/cni.sh in place of kindnetd.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
NAME=${DFLASH_KIND_NAME:-dflash}
NODE_IMAGE=dflash/kind-node:v1.37.2
NETWORK=dflash-kind SUBNET=172.31.250.0/24
KIND_VERSION=v0.33.0
# The hub: nothing may leave this machine, so the chart's hub.endpoint is a hub mirror on the host's address on the
# cluster's own bridge (the network's gateway), which the demo and the kind tier start there (olah, with the tiny
# models: dflash_testkit.kindpath); while none runs, a fetch is refused at that address and nothing is looked up
# anywhere. Pods reach it through the host routes scripts/kind/cni.sh adds (no masquerade).
HUB_ENDPOINT=${DFLASH_KIND_HUB:-http://172.31.250.1:18080}
# The images images/build.sh makes (the operator's, and images/vllm/Dockerfile FROM the CPU stand-in of vllm/vllm-openai).
image_names=$(bash "$repo/images/build.sh" --names)
OPERATOR_IMAGE=$(awk '$1 == "operator" {print $2}' <<<"$image_names")
VLLM_IMAGE=$(awk '$1 == "vllm" {print $2}' <<<"$image_names")
kind=$cache/kind/bin/kind
export DOCKER_HOST=unix://$cache/docker/docker.sock
export KUBECONFIG=$cache/kind/kubeconfig KUBECACHEDIR=$cache/kind/kubecache
# Debian's docker 20.10 CLI first: it has BuildKit built in (a newer CLI without buildx cannot `docker build` here).
# Always, not only when /usr/bin/docker exists: on a cold machine dockerd.sh installs docker.io after this line, and
# the kind tier of a cold CI (2026-12-05) then built with /usr/local/bin/docker 28 and failed ("BuildKit is enabled
# but the buildx component is missing or broken").
export PATH=/usr/bin:$PATH
helm() { "$(ls -d "$cache"/bin/k8s-*/ | head -1)helm" "$@"; }
say() { echo "[$((SECONDS))s] $*" >&2; }

envlines() {
  echo "export DOCKER_HOST=$DOCKER_HOST KUBECONFIG=$KUBECONFIG KUBECACHEDIR=$KUBECACHEDIR"
  echo "export DFLASH_KIND_HUB=$HUB_ENDPOINT DFLASH_KIND_VLLM_IMAGE=$VLLM_IMAGE"
  echo "export PATH=/usr/bin:\$PATH"
  return 0
}

# load_streamed IMAGE NODE: what `kind load docker-image IMAGE --nodes NODE` does (docker save, then on the node
# `ctr --namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -`), streamed, with the
# node's copy of the layers dropped once unpacked (--discard-unpacked-layers), and skipped when the node has that image
# ID. A TEST-ENVIRONMENT ADAPTATION for the 6 GB vLLM image only: kind load writes the whole archive to /tmp first and
# keeps the layers beside their unpacked snapshot, 12 GB more than this machine's disk has to spare (it filled the disk
# here: "no space left on device"). With disk to spare, `kind load docker-image` does the same job (docs/kind.md).
# Only onto the worker: the control plane's taint keeps serving pods off it.
load_streamed() {
  local id; id=$(docker image inspect -f '{{.Id}}' "$1")
  # (ctr's warning that cgroup v1 is deprecated, on every call, is dropped.)
  ctr_on() { docker exec -i "$node" ctr --namespace=k8s.io "$@" 2> >(grep -v 'DEPRECATION: The support for cgroup v1' >&2); }
  local node=$2
  if ctr_on images ls -q | grep -qx "$id"; then say "$1 already on $2"; return; fi
  docker save "$1" | ctr_on images import --all-platforms --digests --snapshotter=overlayfs --local \
    --discard-unpacked-layers - >/dev/null
  # The reference named by the image ID is what the check above finds next time. A CI run on 2026-12-05 failed here
  # reading the list once, right after the import (its output did not say why); the node's containerd may add that
  # reference only after ctr returns, so the list is read until it shows it, for up to 120 s, and the wait is logged.
  local waited=0
  until ctr_on images ls -q | grep -qx "$id"; do
    if [ "$waited" -ge 120 ]; then
      echo "$1 did not reach $2 in 120 s after its import; the node's images:" >&2; ctr_on images ls -q >&2; return 1
    fi
    sleep 2; waited=$((waited + 2))
  done
  say "$1 loaded onto $2 (streamed; its ID reference after ${waited} s)"
}

up() {
  bash "$repo/scripts/kind/dockerd.sh" start >/dev/null; say "dockerd up"
  hash -r   # a docker.io installed just now: look `docker` up again
  if [ ! -x "$kind" ]; then GOBIN=$cache/kind/bin go install "sigs.k8s.io/kind@$KIND_VERSION"; say "kind built"; fi
  bash "$repo/images/build.sh" >/dev/null; say "images built: $OPERATOR_IMAGE, $VLLM_IMAGE"
  bash "$repo/images/kind/node-image.sh" >/dev/null   # keyed: nothing to do on a warm machine
  say "node image $NODE_IMAGE"
  docker network inspect "$NETWORK" >/dev/null 2>&1 || docker network create -d bridge --subnet "$SUBNET" \
    -o com.docker.network.bridge.enable_ip_masquerade=false -o com.docker.network.bridge.name=dflashkind0 "$NETWORK" >/dev/null
  mkdir -p "$(dirname "$KUBECONFIG")"
  if ! "$kind" get clusters 2>/dev/null | grep -qx "$NAME"; then
    KIND_EXPERIMENTAL_DOCKER_NETWORK=$NETWORK "$kind" create cluster --name "$NAME" --image "$NODE_IMAGE" \
      --config "$repo/scripts/kind/kind-config.yaml"
    say "kind cluster $NAME created"
  fi
  bash "$repo/scripts/kind/cni.sh" "$NAME" >/dev/null
  kubectl wait --for=condition=Ready node --all --timeout=180s >/dev/null; say "nodes Ready"
  "$kind" load docker-image "$OPERATOR_IMAGE" --name "$NAME" >/dev/null; say "operator image loaded"
  load_streamed "$VLLM_IMAGE" "$NAME-worker"
  local upgrade=false
  helm status dflash -n dflash-system >/dev/null 2>&1 && upgrade=true
  helm upgrade --install dflash "$repo/charts/dflash-operator" -n dflash-system --create-namespace \
    --set image.repository="${OPERATOR_IMAGE%:*}" --set image.tag="${OPERATOR_IMAGE#*:}" --set image.pullPolicy=Never \
    --set hub.endpoint="$HUB_ENDPOINT" \
    --wait --timeout 300s >/dev/null
  # On an existing release, a new image under the same tag: restart so the pods run it (helm sees no change in the
  # rendered chart). A release installed just now already runs the image loaded above.
  if $upgrade; then
    kubectl -n dflash-system rollout restart deploy/dflash-dflash-operator >/dev/null
    kubectl -n dflash-system rollout status deploy/dflash-dflash-operator --timeout=180s >/dev/null
  fi
  say "operator running (helm release dflash in dflash-system)"
  envlines
}

down() {
  if bash "$repo/scripts/kind/dockerd.sh" env >/dev/null && docker info >/dev/null 2>&1 && [ -x "$kind" ]; then
    "$kind" delete cluster --name "$NAME" >/dev/null 2>&1 || true
  fi
  bash "$repo/scripts/kind/dockerd.sh" stop
  rm -f "$KUBECONFIG"; rm -rf "$KUBECACHEDIR"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  env) envlines ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
