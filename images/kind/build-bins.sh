#!/usr/bin/env bash
# Builds what kind's node image needs beyond the cluster tier's binaries: kubeadm, kube-proxy and CoreDNS, from the
# module that pins the cluster tier's (tests/cluster/tools: the same k8s.io/kubernetes release, and the dependencies
# they share already compiled there). Into a folder keyed by its inputs under the cache, so a warm machine does
# nothing. Prints the folder on its last line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
K8S_VERSION=v1.37.2
tools=$repo/tests/cluster/tools

key=$( (cat "$tools/go.mod" "$tools/go.sum" "${BASH_SOURCE[0]}") | sha256sum | cut -c1-12)
out=$cache/kind/bin/node-$K8S_VERSION-$key
mkdir -p "$out" "$cache/logs"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1
 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

for spec in kubeadm=k8s.io/kubernetes/cmd/kubeadm kube-proxy=k8s.io/kubernetes/cmd/kube-proxy \
    coredns=github.com/coredns/coredns; do
  cmd=${spec%%=*} pkg=${spec#*=}
  if [ ! -x "$out/$cmd" ]; then
    start=$SECONDS
    flags=$ldflags; [ "$cmd" = coredns ] && flags="-s -w"
    (cd "$tools" && go build -trimpath -ldflags "$flags" -o "$out/$cmd.tmp" "$pkg")
    mv "$out/$cmd.tmp" "$out/$cmd"
    echo "built $cmd in $((SECONDS - start)) s" | tee -a "$cache/logs/build-times.log" >&2
  fi
done
# Earlier pins' builds (and the scratch module copies an older version of this script made) go.
for d in "$cache"/kind/bin/node-*/ "$cache"/kind/work/kube-*/; do [ "${d%/}" = "$out" ] || rm -rf "${d%/}"; done
echo "$out"
