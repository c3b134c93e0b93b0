#!/usr/bin/env bash
# The GPU lane's command on the device machine, run from the repository root (the device tool's copy of the tree).
#
#   bash scripts/gpu/device.sh receive              copy every carried .gpu-lane/VERSION/part-N (checked against that
#                                                   release's SHA256SUMS) to $LANE/VERSION/parts, and a carried
#                                                   .gpu-lane/zstandard-*.whl to $LANE; one `run` per part (or two
#                                                   smaller parts), while the machine stays warm
#   bash scripts/gpu/device.sh proof VERSION...     unpack each release; run proof.py on all of them at once (each
#                                                   release in its own venv, so they share the GPU); with
#                                                   CHECKPAIR=1 also check_pair_nogpu.py on each, alongside
#   bash scripts/gpu/device.sh checkpair VERSION... the cache Job's check step (dflash-check-pair) on each GPU build,
#                                                   with the GPU and its driver visible and hidden
#   bash scripts/gpu/device.sh bench VERSION        bench.py start + measure (the bounds' engines) on that release
#   bash scripts/gpu/device.sh diag VERSION         diag_random.py: where the random pair departs from no speculation
#   bash scripts/gpu/device.sh info                 what the machine has (driver, GPU, torch, zstd/xz binaries)
#
# Files outside the tree ($LANE, default /root/gpu-lane) survive between calls while the machine is warm.
# Results go to $OUT/VERSION/ (the device tool's folder that comes back; 8 files at most), else $LANE/out.
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

# Runs a python script of scripts/gpu for one release: its interpreter, its lane folder, its output folder.
for_release() {  # VERSION SCRIPT [ARGS...]
  local release=$1 script=$2
  shift 2
  mkdir -p "$OUT/$release"
  LANE=$LANE/$release OUT=$OUT/$release VLLM_RELEASE=$release "$(vpy "$release")" "$ROOT/scripts/gpu/$script" "$@"
}

info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "zstd: $(command -v zstd || echo none); xz: $(command -v xz || echo none)"
  nproc; free -g | head -2; df -h /root | tail -1
}

cmd=${1:-}
shift || true
case $cmd in
  receive) receive ;;
  unpack) for r in "$@"; do unpack "$r"; done ;;
  info) info ;;
  proof|checkpair)
    [ $# -gt 0 ] || { echo "usage: $0 $cmd VERSION..." >&2; exit 2; }
    for r in "$@"; do unpack "$r"; done
    pids=()
    for r in "$@"; do
      if [ "$cmd" = proof ]; then
        for_release "$r" proof.py > "$OUT/$r/proof-stdout.txt" 2>&1 &
        pids+=("$!")
      fi
      if [ "$cmd" = checkpair ] || [ "${CHECKPAIR:-0}" = 1 ]; then
        for_release "$r" check_pair_nogpu.py > "$OUT/$r/checkpair-stdout.txt" 2>&1 &
        pids+=("$!")
      fi
    done
    rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    for r in "$@"; do
      for f in "$OUT/$r"/*-stdout.txt; do echo "===== $r $(basename "$f")"; tail -n 30 "$f"; done
    done
    exit $rc
    ;;
  bench)
    unpack "$1"
    mkdir -p "$LANE/$1/bench"
    for_release "$1" models.py mid "$LANE/$1/models/mid"
    for_release "$1" bench.py start
    for_release "$1" bench.py measure
    ;;
  diag) unpack "$1"; for_release "$1" diag_random.py ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
