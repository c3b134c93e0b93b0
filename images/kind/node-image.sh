#!/usr/bin/env bash
# Assembles a kind node image (dflash/kind-node:v1.37.2) the way kind's buildImage does, offline: run the base image
# (images/kind/base.Dockerfile), copy kubeadm/kubelet/kubectl and /kind/version in, `ctr images import` locally built
# images under the names kubeadm v1.37.2 asks for, `docker commit` with kind's entrypoint. The images: the control plane,
# etcd and CoreDNS as FROM-scratch images of the binaries built here; kube-proxy on the base's Debian (it needs iptables);
# pause from images/builder/build.py; kind's default storage (local-path-provisioner, the cluster tier's build, FROM
# scratch; its helper on the base's Debian, which has the sh/mkdir/rm its setup and teardown scripts run) under kind's
# image names, with kind's own manifest from its module (/kind/manifests/default-storage.yaml). kindnetd is not built
# (docs/kind.md): use disableDefaultCNI and scripts/kind/cni.sh.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
: "${DOCKER_HOST:?run scripts/kind/dockerd.sh start first}"
K8S=v1.37.2
# Keyed by the scripts that make it and the binaries' folder (its name carries their pins' hash): a warm machine whose
# image carries the same key does nothing.
bin=$(bash "$repo/tests/cluster/build.sh" | tail -1)
key=$( (cat "$repo"/images/kind/{node-image.sh,base.Dockerfile,base-rootfs.sh}; echo "$bin") | sha256sum | cut -c1-12)
if [ "$(docker image inspect -f '{{index .Config.Labels "dflash.kind.key"}}' dflash/kind-node:$K8S 2>/dev/null)" = "$key" ]; then
  echo dflash/kind-node:$K8S; exit 0
fi
rootfs=$(bash "$repo/images/kind/base-rootfs.sh" | tail -1)
kindsrc=$(cd /tmp && go mod download -json sigs.k8s.io/kind@v0.33.0 | jq -r .Dir)
ctx=$(mktemp -d); trap 'rm -rf "$ctx"; docker rm -f dflash-kind-build >/dev/null 2>&1 || true' EXIT
b() { DOCKER_BUILDKIT=1 docker build --network none -q "$@" >/dev/null; }

docker image inspect dflash/kind-debian:bookworm >/dev/null 2>&1 || docker import "$rootfs" dflash/kind-debian:bookworm >/dev/null
mkdir "$ctx/base" "$ctx/base/bin"; cp -r "$kindsrc/images/base/files" "$ctx/base/"; chmod -R u+w "$ctx/base"
for x in containerd containerd-shim-runc-v2 ctr; do cp -L "$bin/$x" "$ctx/base/bin/"; done
b -t dflash/kind-base:local -f "$repo/images/kind/base.Dockerfile" "$ctx/base"

mkdir "$ctx/img"
for x in kube-apiserver kube-controller-manager kube-scheduler etcd local-path-provisioner; do cp -L "$bin/$x" "$ctx/img/"; done
cp -L "$bin/coredns" "$bin/kube-proxy" "$ctx/img/"
scratch() { printf 'FROM scratch\nCOPY %s /usr/local/bin/%s\nENTRYPOINT ["/usr/local/bin/%s"]\n' "$2" "$2" "$2" \
  | b -t "$1" -f - "$ctx/img"; }
for x in kube-apiserver kube-controller-manager kube-scheduler; do scratch "registry.k8s.io/$x:$K8S" "$x"; done
scratch registry.k8s.io/etcd:3.7.0-0 etcd
printf 'FROM scratch\nCOPY coredns /coredns\nENTRYPOINT ["/coredns"]\n' | b -t registry.k8s.io/coredns/coredns:v1.14.6 -f - "$ctx/img"
# kind's storage manifest and image names, read from its module (pkg/build/nodeimage/const_storage.go).
python3 - "$kindsrc/pkg/build/nodeimage/const_storage.go" "$ctx/default-storage.yaml" "$ctx/storage-images" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
consts = dict(re.findall(r'^const (\w+) = "([^"]+)"', src, re.M))
body = re.search(r'^const defaultStorageManifest = `(.*?)^`', src, re.M | re.S).group(1)
body = re.sub(r'` \+ (\w+) \+ `', lambda m: consts[m.group(1)], body)
open(sys.argv[2], "w").write(body)
open(sys.argv[3], "w").write(f"{consts['storageProvisionerImage']} {consts['storageHelperImage']}\n")
PY
read -r lpp_image lph_image < "$ctx/storage-images"
printf 'FROM scratch\nENV PATH=/usr/local/bin\nCOPY local-path-provisioner /usr/local/bin/\n' | b -t "$lpp_image" -f - "$ctx/img"
printf 'FROM dflash/kind-debian:bookworm\n' | b -t "$lph_image" -f - "$ctx/img"
printf 'FROM dflash/kind-debian:bookworm\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' | b -t "registry.k8s.io/kube-proxy:$K8S" -f - "$ctx/img"
docker save -o "$ctx/images.tar" registry.k8s.io/kube-apiserver:$K8S registry.k8s.io/kube-controller-manager:$K8S \
  registry.k8s.io/kube-scheduler:$K8S registry.k8s.io/kube-proxy:$K8S registry.k8s.io/etcd:3.7.0-0 \
  registry.k8s.io/coredns/coredns:v1.14.6 "$lpp_image" "$lph_image"
pause=$(python3 "$repo/images/builder/build.py" pause | head -1 | awk '{print $2}')

# No volume on /var: containerd keeps the imported images there, and docker commit leaves volumes out.
docker run -d --name dflash-kind-build --privileged --network none --tmpfs /tmp --tmpfs /run \
  --entrypoint /usr/local/bin/entrypoint dflash/kind-base:local /sbin/init >/dev/null
for _ in $(seq 30); do docker exec dflash-kind-build ctr version >/dev/null 2>&1 && break; sleep 1; done
for x in kubeadm kubelet kubectl; do docker cp -L "$bin/$x" dflash-kind-build:/usr/bin/$x; done
docker cp "$ctx/images.tar" dflash-kind-build:/root/images.tar
docker cp "$pause" dflash-kind-build:/root/pause.tar
docker exec dflash-kind-build mkdir -p /kind/manifests
docker cp "$ctx/default-storage.yaml" dflash-kind-build:/kind/manifests/default-storage.yaml
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
docker commit --change "LABEL dflash.kind.key=$key" --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' dflash-kind-build dflash/kind-node:$K8S >/dev/null
echo dflash/kind-node:$K8S
