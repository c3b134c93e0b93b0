#!/usr/bin/env bash
# Sets everything up, then runs the main job on its embedded default: a real control plane on 127.0.0.1 with
# fake GPU nodes, shown with kubectl, then stopped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python tests/cluster/controlplane.py demo "$@"
