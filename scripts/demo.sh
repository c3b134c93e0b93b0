#!/usr/bin/env bash
# Sets everything up, then runs the main job on its embedded default: a real control plane on 127.0.0.1 with fake
# GPU nodes, the operator, and examples/qwen3-coder-next.yaml applied; shows what kubectl shows, then stops.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
