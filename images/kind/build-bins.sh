#!/usr/bin/env bash
# Builds what kind's node image needs beyond the cluster tier's binaries: kubeadm and kube-proxy (from the same
# k8s.io/kubernetes pin as tests/cluster/tools/kube, read from there, never edited) and CoreDNS. Each into a folder keyed
# by its inputs under the cache, so a warm machine does nothing. Prints the folder on its last line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
K8S_VERSION=v1.37.2
COREDNS_VERSION=v1.12.4
kube_tools=$repo/tests/cluster/tools/kube

key=$( (cat "$kube_tools/go.mod" "$kube_tools/go.sum" "${BASH_SOURCE[0]}") | sha256sum | cut -c1-12)
out=$cache/kind/bin/node-$K8S_VERSION-$key
mkdir -p "$out" "$cache/logs"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1
 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

# A scratch copy of the cluster tier's pin module: go may add requirements for kubeadm's packages to its go.mod.
work=$cache/kind/work/kube-$key
if [ ! -f "$work/go.mod" ]; then
  mkdir -p "$work" && cp "$kube_tools/go.mod" "$kube_tools/go.sum" "$work/"
  printf 'package main\n' > "$work/doc.go"
fi
for cmd in kubeadm kube-proxy; do
  if [ ! -x "$out/$cmd" ]; then
    start=$SECONDS
    (cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
    mv "$out/$cmd.tmp" "$out/$cmd"
    echo "built $cmd in $((SECONDS - start)) s" | tee -a "$cache/logs/build-times.log" >&2
  fi
done
if [ ! -x "$out/coredns" ]; then
  start=$SECONDS
  GOBIN=$out/.coredns go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  mv "$out/.coredns/coredns" "$out/coredns" && rmdir "$out/.coredns"
  echo "built coredns in $((SECONDS - start)) s" | tee -a "$cache/logs/build-times.log" >&2
fi
echo "$out"
