#!/usr/bin/env bash
# Everything a fresh machine of this kind needs, idempotent: the project's venv (.venv, by uv), the real node's Debian
# packages, and the cluster binaries (built from Go modules into ~/.cache/dflash-operator, skipped when present).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v uv >/dev/null || python3 -m pip install --quiet "uv>=0.5"
if [ ! -x .venv/bin/python ]; then uv venv --quiet --python python3.11 .venv; fi
uv pip install --quiet --python .venv/bin/python -e ./dflash-cache -e '.[test]' -e tests/support
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
