#!/usr/bin/env bash
# Starts or stops a private dockerd for the kind path, leaving the host as it found it:
#   bash scripts/kind/dockerd.sh start   # prints `export DOCKER_HOST=...` on its last line
#   bash scripts/kind/dockerd.sh stop
#   bash scripts/kind/dockerd.sh env     # the export line only
#   bash scripts/kind/dockerd.sh running # exit 0 when this private dockerd runs and answers
#   bash scripts/kind/dockerd.sh with COMMAND [ARG...]   # COMMAND against this dockerd (DOCKER_HOST exported); a
#                                        # dockerd it had to start is stopped after, whatever COMMAND's exit status
# Everything dockerd keeps (images, containers, its containerd, pid file, socket) lives under <cache>/docker. It never
# touches host networking: --iptables=false --ip-masq=false --ip-forward=false --bridge=none (no docker0, no NAT, no
# sysctl); published ports go through docker-proxy on loopback. Its default runtime is runc-no-sys-resource, a
# test-environment adaptation (see that file and docs/kind.md) that lets `--privileged` work in this sandbox.
# Both commands are idempotent. Installs Debian's docker.io when no dockerd is present (the docker CLI may exist already).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
dir=$cache/docker
sock=$dir/docker.sock pidfile=$dir/dockerd.pid
export DOCKER_HOST=unix://$sock

# What dockerd and its containerd create on the host outside their roots when absent, each removed at stop only
# when this script's start found it absent (the flag file says so): the shims' sockets under /run/containerd/s,
# runc's state root /run/runc, and /opt/containerd (containerd's "opt" plugin; dockerd 20.10 cannot move it).
# Fresh-clone CIs on machines that never ran docker found /run/runc (2026-12-05) and /opt/containerd (2026-12-06) added.
MADE_ON_HOST=(/run/containerd /run/runc /opt/containerd)
made_flag() { echo "$dir/made$(tr / - <<<"$1")"; }   # /run/runc -> <dir>/made-run-runc

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
answering() { running && docker info >/dev/null 2>&1; }

start() {
  if answering; then echo "export DOCKER_HOST=$DOCKER_HOST"; return; fi
  if ! command -v dockerd >/dev/null; then
    # Debian's policy-rc.d keeps the package from starting a system dockerd; we run our own below.
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io >/dev/null
  fi
  mkdir -p "$dir/data" "$dir/run"
  # Host paths dockerd makes whatever its roots: note which are absent, to remove them at stop.
  for path in "${MADE_ON_HOST[@]}"; do [ -e "$path" ] || touch "$(made_flag "$path")"; done
  nohup dockerd --data-root "$dir/data" --exec-root "$dir/run" --pidfile "$pidfile" -H "$DOCKER_HOST" \
    --iptables=false --ip-masq=false --ip-forward=false --bridge=none --ip6tables=false \
    --add-runtime "dflash-runc=$here/runc-no-sys-resource" --default-runtime dflash-runc \
    --storage-driver overlay2 --log-level warn >"$dir/dockerd.log" 2>&1 &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && { echo "export DOCKER_HOST=$DOCKER_HOST"; return; }
    sleep 1
  done
  echo "dockerd did not start; see $dir/dockerd.log" >&2; tail -20 "$dir/dockerd.log" >&2; exit 1
}

stop() {
  if running; then
    # Containers first (kind nodes), then networks this dockerd holds, so no bridge or mount is left on the host.
    local ids; ids=$(docker ps -aq 2>/dev/null || true)
    [ -n "$ids" ] && docker rm -f -v $ids >/dev/null 2>&1 || true
    docker volume prune -f >/dev/null 2>&1 || true   # kind nodes' anonymous /var volumes
    docker network prune -f >/dev/null 2>&1 || true
    local pid; pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { echo "dockerd $pid still running" >&2; exit 1; }
  fi
  rm -f "$pidfile"
  # What dockerd may leave: its exec-root mounts (netns), its cgroups (cgroupfs driver, parent /docker), /run/containerd.
  { grep -o " $dir/[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  for c in /sys/fs/cgroup/*/docker; do [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true; done
  for path in "${MADE_ON_HOST[@]}"; do
    if [ -f "$(made_flag "$path")" ]; then rm -rf "$path"; rm -f "$(made_flag "$path")"; fi
  done
}

with_dockerd() {
  if answering; then "$@"; return; fi
  start >/dev/null
  trap stop EXIT   # also when COMMAND fails (set -e exits with its status) or this script is interrupted
  "$@"
}

case ${1:-} in
  start) start ;;
  with) shift; with_dockerd "$@" ;;
  stop) stop ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  running) answering ;;
  *) echo "usage: $0 start|stop|env|running|with COMMAND..." >&2; exit 2 ;;
esac
