#!/usr/bin/env bash
# Pod network for a kind cluster made with scripts/kind/kind-config.yaml (disableDefaultCNI: kindnetd is not built
# here). Does by hand what kindnetd does: on every node a CNI config (ptp + host-local over the node's spec.podCIDR,
# no masquerade, plus portmap) and a route to every other node's pod CIDR via that node's address on the docker
# network. On the host, one route per node's pod CIDR via that node on the cluster's bridge, so pods reach a server
# the host runs on the bridge's address (the hub mirror of the demo and the kind tier) and the answers find their
# way back without any masquerade; the routes go with the bridge when the network is removed (cluster.sh down).
# Debian's containernetworking-plugins in the node image (/opt/cni/bin) provide ptp, host-local, portmap, loopback.
#   bash scripts/kind/cni.sh [cluster-name]     (default dflash; DOCKER_HOST from scripts/kind/dockerd.sh)
# Idempotent: rewrites the config and replaces the routes.
set -euo pipefail
cluster=${1:-dflash}
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
: "${DOCKER_HOST:?run scripts/kind/dockerd.sh start first}"
kind=${KIND:-$cache/kind/bin/kind}
nodes=$("$kind" get nodes --name "$cluster")
cp_node=$(echo "$nodes" | grep -- -control-plane | head -1)
k() { docker exec "$cp_node" kubectl --kubeconfig=/etc/kubernetes/admin.conf "$@"; }
declare -A cidr ip
for n in $nodes; do
  for _ in $(seq 60); do   # the worker's podCIDR appears once the node controller has seen it
    cidr[$n]=$(k get node "$n" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)
    [ -n "${cidr[$n]}" ] && break; sleep 1
  done
  [ -n "${cidr[$n]}" ] || { echo "node $n has no podCIDR" >&2; exit 1; }
  ip[$n]=$(k get node "$n" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
done
for n in $nodes; do
  docker exec -i "$n" sh -c 'mkdir -p /etc/cni/net.d && cat > /etc/cni/net.d/10-dflash.conflist.tmp && mv /etc/cni/net.d/10-dflash.conflist.tmp /etc/cni/net.d/10-dflash.conflist' <<JSON
{
  "cniVersion": "1.0.0",
  "name": "dflash",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
              "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "${cidr[$n]}"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  # The node's own network namespace (ptp turns it on with its first pod anyway); the host's stays as it is.
  docker exec "$n" sysctl -qw net.ipv4.ip_forward=1
  for m in $nodes; do
    [ "$m" = "$n" ] || docker exec "$n" ip route replace "${cidr[$m]}" via "${ip[$m]}"
  done
  # The node must be on a link of the host (the bridge), never behind a gateway: no route may lead anywhere else.
  via=$(ip -o route get "${ip[$n]}")
  case $via in *" via "*) echo "node $n (${ip[$n]}) is not on a host bridge: $via" >&2; exit 1 ;; esac
  ip route replace "${cidr[$n]}" via "${ip[$n]}" dev "$(sed -n 's/.* dev \([^ ]*\).*/\1/p' <<<"$via")"
  echo "$n: pods ${cidr[$n]}, address ${ip[$n]}"
done
