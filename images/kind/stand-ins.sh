#!/usr/bin/env bash
# Tags local stand-ins for the base images that cannot be pulled here, under their upstream names, in the private
# dockerd (scripts/kind/dockerd.sh), so images/*/Dockerfile build unchanged with `docker build`:
#   python:3.11-slim  <- Debian bookworm minbase + python3 (3.11) + pip: images/builder/build.py's "base" layer
#                        (debootstrap, cached), imported, minus Debian's EXTERNALLY-MANAGED marker (python:3.11-slim
#                        has none, and the operator Dockerfile's `pip install` is written for it), plus the host's CA
#                        bundle: a TEST-ENVIRONMENT ADAPTATION, because this sandbox reaches PyPI through an egress
#                        proxy whose CA only the host trusts (a user's python:3.11-slim talks to PyPI directly).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
: "${DOCKER_HOST:?run scripts/kind/dockerd.sh start first}"
if ! docker image inspect python:3.11-slim >/dev/null 2>&1; then
  python3 "$repo/images/builder/build.py" base >/dev/null   # cached: a debootstrap only on a cold machine
  layer=$(ls "$cache"/images/layers/base-*.tar | head -n1)
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$layer" dflash/python-stand-in:import >/dev/null
  ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
  printf 'FROM dflash/python-stand-in:import\nRUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED\n%s\n' \
    'COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt' > "$ctx/Dockerfile"
  DOCKER_BUILDKIT=1 docker build --network none -q -t python:3.11-slim "$ctx" >/dev/null
  docker rmi dflash/python-stand-in:import >/dev/null
fi
echo python:3.11-slim
