#!/usr/bin/env bash
# The main job: sets everything up, then runs the whole product on this machine (scripts/demo.py), from kubectl apply
# to a speculative completion. Root, no GPU.   bash scripts/demo.sh [--keep] [--kind]
#   --keep: leave the work folder
#   --kind: the same path the way a user takes it on kind (docs/kind.md): docker build of both images, kind create
#           cluster, kind load, helm install, kubectl apply, the speculative probe, a completion through port-forward,
#           helm uninstall, kind delete cluster, the host put back (scripts/kind/with-cluster.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
started=$(date +%s)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
mkdir -p "$cache/logs"

# Disk: a full first run keeps about 20 GB in the cache (binaries, images, the vLLM CPU stand-in) and about 4 GB of
# Go modules and build cache (measured on this machine); ask for 30 GB free less what the cache already holds.
have_kb=$(df -Pk "$cache" | awk 'NR == 2 {print $4}')
held_kb=$(du -sk "$cache" 2>/dev/null | cut -f1)
need_kb=$(( 30 * 1024 * 1024 - held_kb ))
if [ "$need_kb" -gt 0 ] && [ "$have_kb" -lt "$need_kb" ]; then
  echo "demo: $(( have_kb / 1024 / 1024 )) GB free under $cache, the first run needs about $(( need_kb / 1024 / 1024 )) GB more" >&2
  exit 1
fi

log=$cache/logs/setup-$(date +%Y%m%d-%H%M%S).log
echo "[$(date +%H:%M:%S)] setting up (the first run builds the Kubernetes binaries and images: about 25 minutes on 2 cores; full log: $log)"
# One line per binary or image built; the rest (go: downloading ..., pip) goes to the log only.
# (grep finds nothing on a warm machine: only setup's own status counts, through pipefail.)
if ! bash scripts/setup.sh 2>&1 | tee "$log" | { grep --line-buffered -E '^(building|built) ' || true; }; then
  echo "demo: setup failed; the last lines of $log:" >&2
  tail -20 "$log" >&2
  exit 1
fi
echo "[$(date +%H:%M:%S)] set up in $(( $(date +%s) - started )) s"
export DFLASH_DEMO_STARTED=$started
for arg in "$@"; do
  if [ "$arg" = --kind ]; then exec bash scripts/kind/with-cluster.sh .venv/bin/python scripts/demo.py "$@"; fi
done
exec .venv/bin/python scripts/demo.py "$@"
