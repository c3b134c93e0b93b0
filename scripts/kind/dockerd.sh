#!/usr/bin/env bash
# Starts or stops a private dockerd for the kind path, leaving the host as it found it:
#   bash scripts/kind/dockerd.sh start   # prints `export DOCKER_HOST=...` on its last line
#   bash scripts/kind/dockerd.sh stop
#   bash scripts/kind/dockerd.sh env     # the export line only
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

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

start() {
  if running && docker info >/dev/null 2>&1; then echo "export DOCKER_HOST=$DOCKER_HOST"; return; fi
  if ! command -v dockerd >/dev/null; then
    # Debian's policy-rc.d keeps the package from starting a system dockerd; we run our own below.
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io >/dev/null
  fi
  mkdir -p "$dir/data" "$dir/run"
  # containerd-shim sockets go under /run/containerd/s whatever the exec-root: note whether we made it.
  [ -e /run/containerd ] || touch "$dir/made-run-containerd"
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
  if [ -f "$dir/made-run-containerd" ]; then rm -rf /run/containerd; rm -f "$dir/made-run-containerd"; fi
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
