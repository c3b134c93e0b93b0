#!/usr/bin/env bash
# The GPU lane's command on the device machine, run from the repository root (the device tool's copy of the tree).
#
#   bash scripts/gpu/device.sh receive              copy every carried .gpu-lane/VERSION/part-N (checked against that
#                                                   release's SHA256SUMS) to $LANE/VERSION/parts, and a carried
#                                                   .gpu-lane/zstandard-*.whl to $LANE; one `run` per part, while the
#                                                   machine stays warm
#   bash scripts/gpu/device.sh unpack VERSION...    unpack each release into its own venv (also done by proof/start)
#   bash scripts/gpu/device.sh start VERSION...     run each release's proof.py detached (setsid): it outlives the
#                                                   call, so the next release's parts can be received meanwhile;
#                                                   with CHECKPAIR=1 also check_pair_nogpu.py, alongside
#   bash scripts/gpu/device.sh collect VERSION...   wait for those runs, pack each into $OUT/VERSION.tgz
#   bash scripts/gpu/device.sh proof VERSION...     start + collect in one call, in the foreground
#   bash scripts/gpu/device.sh checkpair VERSION... only the cache Job's check step (dflash-check-pair) on each GPU
#                                                   build, with the GPU and its driver visible and hidden
#   bash scripts/gpu/device.sh bench VERSION        bench.py start + measure (the bounds' engines) on that release
#   bash scripts/gpu/device.sh tune-start VERSION [SET]  issue 26's cost grid, first wave: models + `bench.py start
#                                                   SET` (default cost-random; cost-partial also makes the partial
#                                                   target); detached engines compile while the call returns
#   bash scripts/gpu/device.sh tune-measure VERSION SET [NEXT]  `bench.py measure SET`, then start NEXT's engines;
#                                                   $OUT/bench-SET.json and its logs come back
#   bash scripts/gpu/device.sh diag VERSION         diag_random.py: where the random pair departs from no speculation
#   bash scripts/gpu/device.sh py VERSION SCRIPT    any script here (diag_partial.py: where the partial pair departs)
#   bash scripts/gpu/device.sh info                 what the machine has (driver, GPU, torch, glibc, zstd/xz)
#
# Files outside the tree ($LANE, default /root/gpu-lane) survive between calls while the machine is warm.
# Results: $LANE/VERSION/out, packed as $OUT/VERSION.tgz (the device tool's folder brings back 8 files at most).
# Each release gets a venv made from the machine's python3 (--without-pip) whose site-packages holds two .pth files:
# the machine's own site folders first (torch, transformers, ... as the image has them), then the release's bundle.
# The engines the proof starts inherit that interpreter (sys.executable), so releases never see each other.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LANE=${LANE:-/root/gpu-lane}
export OUT=${OUT:-$LANE/out}
PY=${PYTHON:-python3}
mkdir -p "$LANE" "$OUT"

# No flashinfer in the bundle (see leave-out.txt); nothing may reach out; logs unbuffered.
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 VLLM_HOST_IP=127.0.0.1

receive() {
  local n=0 sums release part
  for sums in "$ROOT"/.gpu-lane/*/SHA256SUMS; do
    [ -f "$sums" ] || continue
    release=$(basename "$(dirname "$sums")")
    mkdir -p "$LANE/$release/parts"
    cp "$sums" "$LANE/$release/parts/SHA256SUMS"
    for part in "$(dirname "$sums")"/part-*; do
      [ -f "$part" ] || continue
      grep " $(basename "$part")\$" "$sums" | (cd "$(dirname "$part")" && sha256sum --check --quiet)
      cp "$part" "$LANE/$release/parts/" && n=$((n + 1))
    done
  done
  for part in "$ROOT"/.gpu-lane/zstandard-*.whl; do
    [ -f "$part" ] && cp "$part" "$LANE/" && n=$((n + 1))
  done
  echo "received $n file(s); on the machine:"
  (cd "$LANE" && for d in */parts; do echo "  $(dirname "$d"): $(ls "$d" | grep -c '^part-') of" \
    "$(grep -c ' part-' "$d/SHA256SUMS") parts"; done; ls zstandard-*.whl 2>/dev/null || true)
}

vpy() { echo "$LANE/$1/venv/bin/python3"; }

unpack() {  # VERSION
  local release=$1 dir=$LANE/$1
  if [ -f "$dir/site/.unpacked" ]; then return; fi
  (cd "$dir/parts" && sha256sum --check --quiet SHA256SUMS)
  local start=$SECONDS
  rm -rf "$dir/site" "$dir/plugin" "$dir/venv"
  local parts
  parts=$(awk '$2 ~ /^part-/ {print "'"$dir"'/parts/" $2}' "$dir/parts/SHA256SUMS" | sort)
  if command -v zstd >/dev/null; then
    cat $parts | zstd -d -q --long=27 | tar -x -C "$dir"
  else  # no zstd binary in the image: the carried zstandard wheel decodes it
    [ -d "$LANE/zstd" ] || "$PY" -m pip install --quiet --no-deps --no-index --target "$LANE/zstd" "$LANE"/zstandard-*.whl
    cat $parts | PYTHONPATH=$LANE/zstd "$PY" -c 'import sys, zstandard
zstandard.ZstdDecompressor(max_window_size=1 << 27).copy_stream(sys.stdin.buffer, sys.stdout.buffer)' \
      | tar -x -C "$dir"
  fi
  # The release's interpreter: a venv of the machine's python3 that sees the machine's site folders, then the bundle.
  "$PY" -m venv --without-pip "$dir/venv"
  local purelib machine
  purelib=$("$(vpy "$release")" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  machine=$("$PY" -c 'import site, sysconfig
print(repr(list(dict.fromkeys(p for p in [sysconfig.get_paths()["purelib"], *site.getsitepackages()] if p))))')
  # (a .pth line is exec'd in site's own function: no comprehension there, it could not see the name `site`)
  echo "import site as _s; list(map(_s.addsitedir, $machine))" > "$purelib/00-machine.pth"
  echo "$dir/site" > "$purelib/zz-dflash-gpu-lane.pth"
  # The console scripts were written for the preparing machine's python; point them at this release's.
  sed -i "1s|.*|#!$(vpy "$release")|" "$dir/plugin/bin/"*
  touch "$dir/site/.unpacked"
  echo "$release unpacked in $((SECONDS - start)) s: $(du -sh "$dir/site" | cut -f1) site; $("$(vpy "$release")" -c \
    'import importlib.metadata as m, torch; print("vllm", m.version("vllm"), "torch", torch.__version__)')"
}

# Runs a python script of scripts/gpu for one release: its interpreter, its lane folder, its output folder
# ($LANE/VERSION/out, packed into $OUT/VERSION.tgz by `collect`).
for_release() {  # VERSION SCRIPT [ARGS...]
  local release=$1 script=$2
  shift 2
  local dir=$LANE/$release  # (not in the prefix below: there $LANE is already the release's when OUT is expanded)
  mkdir -p "$dir/out"
  LANE=$dir OUT=$dir/out VLLM_RELEASE=$release "$(vpy "$release")" "$ROOT/scripts/gpu/$script" "$@"
}

# One release's proof (and with CHECKPAIR=1 its check-pair runs, alongside); writes $LANE/VERSION/done (the exit code).
run_release() {  # VERSION
  local release=$1 pids=() rc=0
  rm -f "$LANE/$release/done"
  mkdir -p "$LANE/$release/out"
  for_release "$release" proof.py > "$LANE/$release/out/proof-stdout.txt" 2>&1 &
  pids+=("$!")
  if [ "${CHECKPAIR:-0}" = 1 ]; then
    for_release "$release" check_pair_nogpu.py > "$LANE/$release/out/checkpair-stdout.txt" 2>&1 &
    pids+=("$!")
  fi
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  echo "$rc" > "$LANE/$release/done"
}

# Waits for each release's done file (COLLECT_TIMEOUT seconds in all), packs its out/ into $OUT/VERSION.tgz and prints
# the ends of its stdout files.
collect() {  # VERSION...
  local release f until=$((SECONDS + ${COLLECT_TIMEOUT:-540})) rc=0
  for release in "$@"; do
    while [ ! -f "$LANE/$release/done" ] && [ $SECONDS -lt $until ]; do sleep 2; done
    [ -f "$LANE/$release/done" ] || { echo "===== $release: not done after the wait"; rc=1; }
    [ "$(cat "$LANE/$release/done" 2>/dev/null)" = 0 ] || rc=1
    tar -czf "$OUT/$release.tgz" -C "$LANE/$release" out $(cd "$LANE/$release" && ls run.log 2>/dev/null)
    for f in "$LANE/$release"/out/*-stdout.txt; do
      [ -f "$f" ] && { echo "===== $release $(basename "$f")"; tail -n 25 "$f"; }
    done
  done
  return $rc
}

info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "zstd: $(command -v zstd || echo none); xz: $(command -v xz || echo none); $(ldd --version | head -1)"
  nproc; free -g | head -2; df -h /root | tail -1
}

cmd=${1:-}
shift || true
case $cmd in
  receive) receive ;;
  unpack) for r in "$@"; do unpack "$r"; done ;;
  info) info ;;
  proof)  # VERSION...: in the foreground, all at once; results in $OUT/VERSION.tgz
    [ $# -gt 0 ] || { echo "usage: $0 proof VERSION..." >&2; exit 2; }
    for r in "$@"; do unpack "$r"; done
    for r in "$@"; do run_release "$r" & done
    wait
    collect "$@"
    ;;
  start)  # VERSION...: detached (the proof outlives this call while the machine stays warm); then `collect`
    [ $# -gt 0 ] || { echo "usage: $0 start VERSION..." >&2; exit 2; }
    for r in "$@"; do unpack "$r"; done
    for r in "$@"; do
      rm -f "$LANE/$r/done"
      setsid nohup bash "$0" _run "$r" > "$LANE/$r/run.log" 2>&1 < /dev/null &
      echo "started the proof of $r (CHECKPAIR=${CHECKPAIR:-0})"
    done
    ;;
  _run) run_release "$1" ;;
  collect) collect "$@" ;;
  checkpair)
    for r in "$@"; do unpack "$r"; done
    for r in "$@"; do for_release "$r" check_pair_nogpu.py > "$LANE/$r/out/checkpair-stdout.txt" 2>&1 & done
    wait
    for r in "$@"; do echo 0 > "$LANE/$r/done"; done
    collect "$@"
    ;;
  bench)
    unpack "$1"
    mkdir -p "$LANE/$1/bench"
    for_release "$1" models.py mid "$LANE/$1/models/mid"
    for_release "$1" bench.py start
    for_release "$1" bench.py measure
    ;;
  tune-start)  # VERSION [SET]
    unpack "$1"
    [ -f "$LANE/$1/models/mid/made.json" ] || for_release "$1" models.py mid "$LANE/$1/models/mid"
    for_release "$1" bench.py start "${2:-cost-random}"
    ;;
  tune-measure)  # VERSION SET [NEXT]
    rc=0
    THEN=${3:-} for_release "$1" bench.py measure "$2" || rc=$?
    cp "$LANE/$1/out/bench-$2".json "$LANE/$1/out/bench-$2"-logs.txt "$OUT/" || rc=1
    exit $rc
    ;;
  diag) unpack "$1"; for_release "$1" diag_random.py ;;
  py)  # VERSION SCRIPT [ARGS...]: any script of scripts/gpu with that release's interpreter; results in $OUT/VERSION.tgz
    unpack "$1"
    for_release "$@" || true
    echo 0 > "$LANE/$1/done"
    collect "$1"
    ;;
  *) sed -n '2,29p' "$0"; exit 2 ;;
esac
