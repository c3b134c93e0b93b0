"""The operator and vLLM images the real node runs: built by `docker build` from their Dockerfiles (images/build.sh,
in the private dockerd of scripts/kind/dockerd.sh, the same builds the kind path loads), then streamed into the node's
containerd (`docker save | ctr images import --local --discard-unpacked-layers`), as `kind load` does for a kind node.

Each image is tagged for the node by its docker image ID (`localhost/dflash/operator:<12 hex>`), so a rebuilt image is
a new name the node imports once, and an unchanged one is found in the node's store and never streamed again.
dockerd runs only while an image is built and streamed: started here when it was not running, stopped again after
(scripts/kind/dockerd.sh puts the host back)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dflash_testkit import REPO

BUILD_SH = REPO / "images" / "build.sh"
DOCKERD_SH = REPO / "scripts" / "kind" / "dockerd.sh"
# The node's repository for each image images/build.sh makes; the tag is the docker image ID's first 12 hex digits.
NODE_REPOSITORIES = {"operator": "localhost/dflash/operator", "vllm": "localhost/dflash/vllm-cpu"}


def _docker_env() -> dict[str, str]:
    line = subprocess.run(["bash", str(DOCKERD_SH), "env"], capture_output=True, text=True, check=True).stdout
    host = line.strip().removeprefix("export DOCKER_HOST=")
    # Debian's docker 20.10 CLI first: it has BuildKit built in (images/build.sh says why).
    return {**os.environ, "DOCKER_HOST": host, "PATH": f"/usr/bin:{os.environ.get('PATH', '')}"}


def _docker(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True, env=env).stdout


@contextmanager
def private_dockerd() -> Iterator[dict[str, str]]:
    """The environment of a running private dockerd; one this started is stopped again on leaving."""
    env = _docker_env()
    # No docker CLI yet (a machine before scripts/setup.sh) reads as not running: dockerd.sh start installs docker.io.
    running = subprocess.run(["bash", str(DOCKERD_SH), "running"], capture_output=True).returncode == 0
    if not running:
        subprocess.run(["bash", str(DOCKERD_SH), "start"], capture_output=True, text=True, check=True)
    try:
        yield env
    finally:
        if not running:
            subprocess.run(["bash", str(DOCKERD_SH), "stop"], capture_output=True, text=True, check=True)


def build_and_stream(recipe: str, held: Callable[[], list[str]], import_argv: list[str]) -> dict:
    """Builds images/build.sh's images and streams `recipe`'s into the node unless `held()` (the node's image names)
    already has it. Returns its node name, docker image ID, config, and the seconds spent."""
    with private_dockerd() as env:
        started = time.monotonic()
        built = dict(line.split() for line in subprocess.run(
            ["bash", str(BUILD_SH)], capture_output=True, text=True, check=True, env=env).stdout.splitlines())
        build_seconds = time.monotonic() - started
        inspect = json.loads(_docker(env, "image", "inspect", built[recipe]))[0]
        image_id = inspect["Id"].removeprefix("sha256:")
        name = f"{NODE_REPOSITORIES[recipe]}:{image_id[:12]}"
        started = time.monotonic()
        in_store = name in held()
        if not in_store:
            _docker(env, "tag", built[recipe], name)
            save = subprocess.Popen(["docker", "save", name], stdout=subprocess.PIPE, env=env)
            result = subprocess.run([*import_argv, "-"], stdin=save.stdout, capture_output=True, text=True)
            assert save.stdout is not None
            save.stdout.close()
            saved = save.wait()
            _docker(env, "rmi", name)   # only the node's tag: the image stays under images/build.sh's
            if saved != 0 or result.returncode != 0:
                raise RuntimeError(f"streaming {name} into the node failed:\n{result.stderr}")
    return {"name": name, "id": image_id, "config": inspect["Config"], "bytes": inspect["Size"],
            "built_as": built[recipe], "seconds": round(build_seconds, 1), "cached": None,
            "import_seconds": round(time.monotonic() - started, 1), "already_in_store": in_store}


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """A Dockerfile's instructions as (OP, arguments), continuation lines joined and comments dropped: what a test
    holds a built image's config to."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        op, _, args = (pending + line).partition(" ")
        instructions.append((op.upper(), args.strip()))
        pending = ""
    return instructions
