#!/usr/bin/env bash
# The cluster tier: tests/cluster in one pytest process and, beside it in a second one with a control plane of its own,
# the watch-liveness test. That test is ~230 s of waiting (it waits out the watch protocol's 90 s silence twice, with
# the chart's smallest watchSilenceSeconds), so next to the CPU-bound rest it costs little; run in turn it was a third
# of the tier (CI on 2026-12-07: 232 of 653 s). Only that test goes beside: the whole tier under pytest-xdist
# (-n 2) made the fuzz test flaky, its API reads timing out under two CPU-bound workers (docs/development.md).
# Each process counts pytest's exit 5 (no tests collected) as a failure; the side process's output follows the main's.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
python=.venv/bin/python
beside=tests/cluster/test_watch_liveness.py
bash tests/cluster/build.sh >/dev/null || exit 1   # once, before two sessions ask for the binaries at once
side_dir=$(mktemp -d "${TMPDIR:-/tmp}/cluster-beside.XXXXXX")
"$python" -m pytest -p no:cacheprovider -q --basetemp "$side_dir/tmp" "$beside" >"$side_dir/out" 2>&1 &
side=$!
# SIGINT, not TERM, if the main session ends early: pytest then tears down its control plane instead of leaving it.
trap 'kill -INT "$side" 2>/dev/null; wait "$side" 2>/dev/null; rm -rf "$side_dir"' EXIT
"$python" -m pytest -q --ignore "$beside" tests/cluster "$@"
main_rc=$?
wait "$side"
side_rc=$?
echo "=== beside: $beside (exit $side_rc)"
cat "$side_dir/out"
rc=0
for part in "main:$main_rc" "beside:$side_rc"; do
  code=${part#*:}
  [ "$code" -eq 5 ] && echo "cluster tier ($part): no tests collected, counted as a failure"
  [ "$code" -ne 0 ] && rc=1
done
exit "$rc"
