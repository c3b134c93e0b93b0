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
# lock no longer matches pyproject.toml (run `uv lock`).
uv sync --quiet --locked --extra test
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
bash tests/cluster/build.sh >/dev/null
# The node tier's and the demo's images (images/builder, cached by input hash): built here rather than inside the
# first test that needs them, so a cold build is not counted against that test's timeout.
if [ "$(id -u)" -eq 0 ]; then
  .venv/bin/python images/builder/build.py pause base operator vllm >/dev/null
fi
