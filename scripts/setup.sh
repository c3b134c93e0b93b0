#!/usr/bin/env bash
# Everything a fresh machine of this kind needs, idempotent: the project's venv (.venv, by uv), the real node's Debian
# packages, and the cluster binaries (built from Go modules into ~/.cache/dflash-operator, skipped when present).
#   bash scripts/setup.sh          everything
#   bash scripts/setup.sh --venv   only the venv (what the unit tier needs: no root, no Go builds)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv_only=false
[ "${1:-}" = "--venv" ] && venv_only=true

command -v uv >/dev/null || python3 -m pip install --quiet "uv>=0.5"
if [ ! -x .venv/bin/python ]; then uv venv --quiet --python python3.11 .venv; fi
# Exactly the versions in uv.lock (the operator, dflash-cache and the testkit editable); --locked fails when the
# lock no longer matches pyproject.toml (run `uv lock`). --compile-bytecode: the tests start the operator and its CLI
# many times, and where PYTHONDONTWRITEBYTECODE is set (this machine's environment) every start would compile kopf and
# the kubernetes client from source again (`import kopf, kubernetes` 1.7 s that way, 0.9 s compiled). uv compiles only
# after it installed something, so a warm sync stays at ~0.5 s.
uv sync --quiet --locked --extra test --compile-bytecode
$venv_only && exit 0
# The real node's Debian pieces: runc, the CNI plugins (bridge, host-local), iptables, and debootstrap for the image
# builder's base. Installed only when missing; without root the node tier says why it cannot run.
node_packages=(runc containernetworking-plugins iptables debootstrap)
if ! dpkg -s "${node_packages[@]}" >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${node_packages[@]}") >/dev/null
  else
    echo "setup: not root, not installing ${node_packages[*]} (the node tier needs them)" >&2
  fi
fi
# The vLLM and hub tiers' venvs (several GB from PyPI when cold) download while Go compiles the cluster binaries.
venv_log=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}/logs/setup-venvs.log
mkdir -p "$(dirname "$venv_log")"
(bash tests/vllm/run.sh --venvs && bash tests/hub/build_venv.sh) >"$venv_log" 2>&1 &
venvs=$!
bash tests/cluster/build.sh >/dev/null
# The node tier's and the demo's images, built here rather than inside the first test that needs them, so a cold build
# is not counted against that test's timeout: pause and base (images/builder, cached by input hash), then the operator
# and vLLM images by `docker build` in the private dockerd (images/build.sh; docker's cache keys them), stopped again.
if [ "$(id -u)" -eq 0 ]; then
  .venv/bin/python images/builder/build.py pause base >/dev/null
  # Outputs of the builder's retired operator/vllm recipes (its Dockerfile interpreter and the vllm-cpu rootfs, ~12 GB)
  # on a machine that ran an older checkout: nothing reads them any more.
  cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}/images
  rm -rf "$cache"/rootfs/vllm-cpu-* "$cache"/rootfs/cpu-libs-* "$cache"/layers/vllm-cpu-* "$cache"/layers/cpu-libs-* \
    "$cache"/vllm-*.tar "$cache"/vllm-*.json "$cache"/operator-*.tar "$cache"/operator-*.json
  bash scripts/kind/dockerd.sh with bash images/build.sh >/dev/null
fi
if ! wait "$venvs"; then
  echo "setup: the vLLM or hub tier's venvs failed to build; the end of $venv_log:" >&2; tail -n 20 "$venv_log" >&2
  exit 1
fi
