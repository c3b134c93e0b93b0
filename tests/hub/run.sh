#!/usr/bin/env bash
# Runs the hub tier: builds (or reuses) the olah venv, then the real huggingface_hub client (in the project venv)
# against olah on 127.0.0.1. Exits non-zero if pytest fails or collects nothing (pytest exit 5 counts as a failure).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
start=$SECONDS
OLAH_PYTHON=$(bash "$here/build_venv.sh" | tail -1)
export OLAH_PYTHON
echo "olah venv ready after $((SECONDS - start)) s: $OLAH_PYTHON"
rc=0
"$repo/.venv/bin/python" -m pytest -p no:cacheprovider -q "$here" "$@" || rc=$?
if [ "$rc" -eq 5 ]; then echo "hub tier collected no tests: counted as a failure"; exit 1; fi
echo "hub tier: exit $rc after $((SECONDS - start)) s"
exit "$rc"
