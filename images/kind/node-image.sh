#!/usr/bin/env bash
# Assembles a kind node image (dflash/kind-node:v1.37.2) the way kind's buildImage does, offline: run the base image
# (images/kind/base.Dockerfile), copy kubeadm/kubelet/kubectl and /kind/version in, `ctr images import` locally built
# images under the names kubeadm v1.37.2 asks for, `docker commit` with kind's entrypoint. The images: the control plane,
# etcd and CoreDNS as FROM-scratch images of the binaries built here; kube-proxy on the base's Debian (it needs iptables);
# pause from images/builder/build.py. kindnetd and local-path are not built yet (docs/kind.md): use disableDefaultCNI.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
: "${DOCKER_HOST:?run scripts/kind/dockerd.sh start first}"
K8S=v1.37.2
node=$(bash "$repo/images/kind/build-bins.sh" | tail -1)
bin=$(bash "$repo/tests/cluster/build.sh" | tail -1)
rootfs=$(bash "$repo/images/kind/base-rootfs.sh" | tail -1)
kindsrc=$(cd /tmp && go mod download -json sigs.k8s.io/kind@v0.33.0 | jq -r .Dir)
ctx=$(mktemp -d); trap 'rm -rf "$ctx"; docker rm -f dflash-kind-build >/dev/null 2>&1 || true' EXIT
b() { DOCKER_BUILDKIT=1 docker build --network none -q "$@" >/dev/null; }

docker image inspect dflash/kind-debian:bookworm >/dev/null 2>&1 || docker import "$rootfs" dflash/kind-debian:bookworm >/dev/null
mkdir "$ctx/base" "$ctx/base/bin"; cp -r "$kindsrc/images/base/files" "$ctx/base/"; chmod -R u+w "$ctx/base"
for x in containerd containerd-shim-runc-v2 ctr; do cp -L "$bin/$x" "$ctx/base/bin/"; done
b -t dflash/kind-base:local -f "$repo/images/kind/base.Dockerfile" "$ctx/base"

mkdir "$ctx/img"
for x in kube-apiserver kube-controller-manager kube-scheduler etcd; do cp -L "$bin/$x" "$ctx/img/"; done
cp "$node/coredns" "$node/kube-proxy" "$ctx/img/"
scratch() { printf 'FROM scratch\nCOPY %s /usr/local/bin/%s\nENTRYPOINT ["/usr/local/bin/%s"]\n' "$2" "$2" "$2" \
  | b -t "$1" -f - "$ctx/img"; }
for x in kube-apiserver kube-controller-manager kube-scheduler; do scratch "registry.k8s.io/$x:$K8S" "$x"; done
scratch registry.k8s.io/etcd:3.7.0-0 etcd
printf 'FROM scratch\nCOPY coredns /coredns\nENTRYPOINT ["/coredns"]\n' | b -t registry.k8s.io/coredns/coredns:v1.14.6 -f - "$ctx/img"
printf 'FROM dflash/kind-debian:bookworm\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' | b -t "registry.k8s.io/kube-proxy:$K8S" -f - "$ctx/img"
docker save -o "$ctx/images.tar" registry.k8s.io/kube-apiserver:$K8S registry.k8s.io/kube-controller-manager:$K8S \
  registry.k8s.io/kube-scheduler:$K8S registry.k8s.io/kube-proxy:$K8S registry.k8s.io/etcd:3.7.0-0 \
  registry.k8s.io/coredns/coredns:v1.14.6
pause=$(python3 "$repo/images/builder/build.py" pause | head -1 | awk '{print $2}')

# No volume on /var: containerd keeps the imported images there, and docker commit leaves volumes out.
docker run -d --name dflash-kind-build --privileged --network none --tmpfs /tmp --tmpfs /run \
  --entrypoint /usr/local/bin/entrypoint dflash/kind-base:local /sbin/init >/dev/null
for _ in $(seq 30); do docker exec dflash-kind-build ctr version >/dev/null 2>&1 && break; sleep 1; done
for x in kubeadm kubelet kubectl; do docker cp -L "$([ $x = kubeadm ] && echo "$node" || echo "$bin")/$x" dflash-kind-build:/usr/bin/$x; done
docker cp "$ctx/images.tar" dflash-kind-build:/root/images.tar
docker cp "$pause" dflash-kind-build:/root/pause.tar
# kind's containerd config names pause:3.10 as the sandbox image; kubeadm v1.37.2 wants 3.10.2 (kind's buildImage
# rewrites it the same way).
docker exec dflash-kind-build sed -i 's#registry.k8s.io/pause:3.10"#registry.k8s.io/pause:3.10.2"#' /etc/containerd/config.toml
docker exec dflash-kind-build sh -c "echo $K8S > /kind/version && systemctl enable kubelet.service \
  && ctr -n k8s.io images import --all-platforms --no-unpack /root/images.tar \
  && ctr -n k8s.io images import --all-platforms --no-unpack /root/pause.tar && rm -f /root/*.tar"
src=$(docker exec dflash-kind-build ctr -n k8s.io images ls -q | grep pause | head -1)
docker exec dflash-kind-build ctr -n k8s.io images tag "$src" registry.k8s.io/pause:3.10.2
docker exec dflash-kind-build ctr -n k8s.io images ls -q
docker exec dflash-kind-build systemctl stop containerd
docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' dflash-kind-build dflash/kind-node:$K8S >/dev/null
echo dflash/kind-node:$K8S
