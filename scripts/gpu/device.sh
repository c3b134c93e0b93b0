#!/usr/bin/env bash
# The GPU lane's command on the device machine, run from the repository root (the device tool's copy of the tree).
#
#   bash scripts/gpu/device.sh receive   copy the carried .gpu-lane/part-N (checked against .gpu-lane/SHA256SUMS) to
#                                        $LANE/parts; one `run` per part, while the machine stays warm
#   bash scripts/gpu/device.sh proof     unpack once every part is there; start the bounds' engines detached (they
#                                        outlive this call: models.py mid, then bench.py start); run proof.py
#   bash scripts/gpu/device.sh bench     bench.py measure (starts the engines itself on a machine that has none)
#   bash scripts/gpu/device.sh diag      diag_random.py: where the random pair's output departs from no speculation
#   bash scripts/gpu/device.sh checkpair the cache Job's check step (dflash-check-pair) on the GPU build, with the
#                                        GPU and its driver visible and hidden (check_pair_nogpu.py)
#   bash scripts/gpu/device.sh info      what the machine has (driver, GPU, torch)
#
# Files outside the tree ($LANE, default /root/gpu-lane) survive between calls while the machine is warm.
# Results go to $OUT (the device tool's folder that comes back), else $LANE/out.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LANE=${LANE:-/root/gpu-lane}
export OUT=${OUT:-$LANE/out}
PY=${PYTHON:-python3}
mkdir -p "$LANE/parts" "$OUT"

# No flashinfer in the bundle (see leave-out.txt); nothing may reach out; logs unbuffered.
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 VLLM_HOST_IP=127.0.0.1

receive() {
  local sums=$ROOT/.gpu-lane/SHA256SUMS n=0
  [ -f "$sums" ] || { echo "no .gpu-lane/SHA256SUMS carried" >&2; exit 1; }
  cp "$sums" "$LANE/parts/SHA256SUMS"
  for part in "$ROOT"/.gpu-lane/part-* "$ROOT"/.gpu-lane/zstandard-*.whl; do
    [ -f "$part" ] || continue
    grep " $(basename "$part")\$" "$sums" | (cd "$(dirname "$part")" && sha256sum --check --quiet)
    cp "$part" "$LANE/parts/" && n=$((n + 1))
  done
  echo "received $n file(s); on the machine: $(cd "$LANE/parts" && ls | tr '\n' ' ')"
}

unpack() {
  if [ -f "$LANE/site/.unpacked" ]; then return; fi
  (cd "$LANE/parts" && sha256sum --check --quiet SHA256SUMS)
  local start=$SECONDS
  rm -rf "$LANE/site" "$LANE/plugin"
  local parts
  parts=$(awk '$2 ~ /^part-/ {print "'"$LANE"'/parts/" $2}' "$LANE/parts/SHA256SUMS" | sort)
  if command -v zstd >/dev/null; then
    cat $parts | zstd -d -q --long=27 | tar -x -C "$LANE"
  else  # no zstd binary in the image: the carried zstandard wheel decodes it
    "$PY" -m pip install --quiet --no-deps --no-index --target "$LANE/zstd" "$LANE"/parts/zstandard-*.whl
    cat $parts | PYTHONPATH=$LANE/zstd "$PY" -c 'import sys, zstandard
zstandard.ZstdDecompressor(max_window_size=1 << 27).copy_stream(sys.stdin.buffer, sys.stdout.buffer)' \
      | tar -x -C "$LANE"
  fi
  # The site folder goes on python3's path through a .pth (after the machine's own site-packages, so the machine's
  # torch, transformers, ... win); the plugin stays apart and is on PYTHONPATH only for the runs that want it.
  local purelib
  purelib=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$LANE/site" > "$purelib/zz-dflash-gpu-lane.pth"
  # The console script was written for the preparing machine's python; point it at this one.
  sed -i "1s|.*|#!$(command -v "$PY")|" "$LANE/plugin/bin/dflash-probe"
  touch "$LANE/site/.unpacked"
  echo "unpacked in $((SECONDS - start)) s: $(du -sh "$LANE/site" | cut -f1) site, vllm $("$PY" -c \
    'import importlib.metadata as m; print(m.version("vllm"))')"
}

info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  nproc; free -g | head -2; df -h /root | tail -1
}

case ${1:-} in
  receive) receive ;;
  unpack) unpack ;;
  info) info ;;
  proof)
    unpack
    # The bounds' engines take minutes to build (torch.compile, CUDA graphs): start them now, detached, so they are
    # built while the proof runs. bench.py measure, in the next call, waits for them and measures each alone.
    mkdir -p "$LANE/bench"
    # Niced, with fewer inductor workers, so the proof's engines are not starved of CPU meanwhile.
    TORCHINDUCTOR_COMPILE_THREADS=4 setsid nohup nice -n 10 bash -c "'$PY' '$ROOT/scripts/gpu/models.py' mid \
      '$LANE/models/mid' && '$PY' '$ROOT/scripts/gpu/bench.py' start" > "$LANE/bench/launcher.log" 2>&1 < /dev/null &
    "$PY" "$ROOT/scripts/gpu/proof.py"
    ;;
  bench) unpack; "$PY" "$ROOT/scripts/gpu/bench.py" measure ;;
  diag) unpack; "$PY" "$ROOT/scripts/gpu/diag_random.py" ;;
  checkpair) unpack; "$PY" "$ROOT/scripts/gpu/check_pair_nogpu.py" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
