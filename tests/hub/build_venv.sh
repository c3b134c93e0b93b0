#!/usr/bin/env bash
# Builds a virtual environment holding `olah` (a self-hosted Hugging Face hub mirror from PyPI) for the hub test tier,
# in a cache folder outside the repository, and does nothing when it is already complete. Prints the venv's python on
# the last line.
#
# Why a separate venv: olah pins its own fastapi/httpx/pydantic stack, which must not leak into the project's venv; the
# tests only talk to it over 127.0.0.1.
set -euo pipefail

olah_version=${OLAH_VERSION:-0.5.4}
cache=${DFLASH_CACHE:-$HOME/.cache/dflash-operator}
key=$(sha256sum "$0" | cut -c1-8)
venv=$cache/venv/olah-$olah_version-$key
if [ -f "$venv/.complete" ]; then echo "$venv/bin/python"; exit 0; fi
for old in "$cache"/venv/olah-*; do [ "$old" = "$venv" ] || rm -rf "$old"; done   # earlier keys

command -v uv >/dev/null || python3 -m pip install --quiet uv >&2
rm -rf "$venv"
start=$SECONDS
uv venv --quiet --python python3.11 "$venv" >&2
# Compiled bytecode: each hub test starts olah, and PYTHONDONTWRITEBYTECODE (set here) would have it compile every
# module again each time.
uv pip install --quiet --compile-bytecode --python "$venv/bin/python" "olah==$olah_version" >&2
"$venv/bin/python" -c "import olah, importlib.metadata as m; print('olah', m.version('olah'))" >&2
echo "installed in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
touch "$venv/.complete"
echo "$venv/bin/python"
