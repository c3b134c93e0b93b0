#!/usr/bin/env bash
# Everything a fresh machine of this kind needs, idempotent: the project's venv (.venv, by uv) and the control-plane
# binaries (built from Go modules into ~/.cache/dflash-operator, skipped when present).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v uv >/dev/null || python3 -m pip install --quiet "uv>=0.5"
if [ ! -x .venv/bin/python ]; then uv venv --quiet --python python3.11 .venv; fi
uv pip install --quiet --python .venv/bin/python -e '.[test]' -e tests/support
bash tests/cluster/build.sh >/dev/null
