"""Builds the two images the real node needs before docker is involved, without Docker or a registry, as OCI tarballs
for `ctr images import`:

    python images/builder/build.py pause|base [--json]

- pause: a static Go binary (images/builder/pause), the sandbox image of every pod on the real node (containerd's
  sandbox image is set before any image is streamed from docker).
- base: Debian bookworm minbase (debootstrap) with python3 (3.11) and pip: the layer images/kind/stand-ins.sh tags as
  the `python:3.11-slim` stand-in in docker, and a plain image for the node tier's own pods.

The operator and vLLM images are `docker build`s of their Dockerfiles (images/build.sh); this builder's Dockerfile
interpreter, which made them before a container engine was known to run here, is retired.

Every result is cached under ~/.cache/dflash-operator/images by a hash of its inputs; the image name's tag is that
hash. Prints the tar path and image name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oci  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = Path(os.environ.get("DFLASH_CACHE", Path.home() / ".cache" / "dflash-operator")) / "images"
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip")   # bookworm's python3 is 3.11, the version python:3.11-slim has
BASE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]
# Left out of the base layer, as slim images leave them out: package caches and what the runtime mounts anyway.
BASE_EXCLUDE = ("dev", "proc", "sys", "run", "tmp", "var/cache/apt/archives", "var/lib/apt/lists")


@dataclass
class Built:
    name: str
    tar: Path
    key: str
    seconds: float = 0.0
    cached: bool = True
    info: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"name": self.name, "tar": str(self.tar), "key": self.key, "seconds": round(self.seconds, 1),
                "cached": self.cached, "bytes": self.tar.stat().st_size, **self.info}


def _hash(*items: object) -> str:
    h = hashlib.sha256()
    for item in items:
        if isinstance(item, Path):
            paths = sorted(p for p in item.rglob("*") if p.is_file() and "__pycache__" not in p.parts) \
                if item.is_dir() else [item]
            for p in paths:
                h.update(str(p.relative_to(REPO) if p.is_relative_to(REPO) else p).encode())
                h.update(p.read_bytes())
        else:
            h.update(json.dumps(item, sort_keys=True).encode())
    return h.hexdigest()[:12]


BUILDER_KEY = _hash(HERE / "build.py", HERE / "oci.py")


def _run(argv: list[str], **kw) -> None:
    subprocess.run(argv, check=True, **kw)


# --- pause ------------------------------------------------------------------------------------------------------
def pause() -> Built:
    src = HERE / "pause"
    key = _hash(BUILDER_KEY, src)
    name = f"localhost/dflash/pause:{key}"
    tar = CACHE / f"pause-{key}.tar"
    if tar.exists():
        return Built(name, tar, key)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(dir=_mkdir(CACHE / "tmp")))
    try:
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(work / "pause"), "."], cwd=src, env=env)
        layer = oci.layer_from_files({"pause": ((work / "pause").read_bytes(), 0o755)}, work / "layer.tar")
        config = oci.image_config([layer], env=BASE_ENV[:1], entrypoint=["/pause"], user="65535:65535")
        oci.write_image(name, [layer], config, tar)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Built(name, tar, key, time.monotonic() - started, cached=False)


# --- base -------------------------------------------------------------------------------------------------------
# Not keyed by the builder's code: a new debootstrap takes minutes and only these inputs change what it makes.
BASE_KEY = _hash(SUITE, MIRROR, BASE_PACKAGES, BASE_EXCLUDE, 1)


def base_rootfs() -> Path:
    """Debian minbase + python3, by debootstrap, kept unpacked (overlay lower folder for every later build)."""
    root = CACHE / "rootfs" / f"debian-{SUITE}-{BASE_KEY}"
    if (root / ".complete").exists():
        return root
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(tmp), MIRROR],
         stdout=subprocess.DEVNULL)
    _run(["chroot", str(tmp), "apt-get", "clean"])
    for rel in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for p in (tmp / rel).glob("*"):
            if p.is_file():
                p.unlink()
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    (root / ".complete").touch()
    return root


def base_layer() -> oci.Layer:
    root = base_rootfs()
    out = _mkdir(CACHE / "layers") / f"base-{BASE_KEY}.tar"
    if not out.exists():
        layer = oci.layer_from_dir(root, out, exclude=BASE_EXCLUDE)
        (out.with_suffix(".digest")).write_text(layer.digest)
    return oci.Layer(out, out.with_suffix(".digest").read_text(), out.stat().st_size)


def base() -> Built:
    name = f"localhost/dflash/base:{BASE_KEY}"
    tar = CACHE / f"base-{BASE_KEY}.tar"
    if tar.exists():
        return Built(name, tar, BASE_KEY)
    started = time.monotonic()
    layer = base_layer()
    oci.write_image(name, [layer], oci.image_config([layer], env=BASE_ENV, cmd=["python3"]), tar)
    return Built(name, tar, BASE_KEY, time.monotonic() - started, cached=False)


def prune(recipe: str, keep: Path) -> None:
    """Older builds of one recipe go once a new one is made: the cache holds one tar per recipe."""
    for old in CACHE.glob(f"{recipe}-*.tar"):
        if old != keep:
            old.unlink(missing_ok=True)
            old.with_suffix(".json").unlink(missing_ok=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


RECIPES = {"pause": pause, "base": base}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", nargs="*", metavar="|".join(sorted(RECIPES)))
    parser.add_argument("--json", action="store_true", help="one JSON object per image on stdout")
    args = parser.parse_args(argv)
    if not args.images or set(args.images) - set(RECIPES):
        parser.error(f"name one or more of {sorted(RECIPES)}")
    for image in args.images:
        built = RECIPES[image]()
        if not built.cached:
            prune(image, built.tar)
        if args.json:
            print(json.dumps(built.as_json()))
        else:
            print(f"{built.name} {built.tar} ({built.tar.stat().st_size >> 20} MB, "
                  f"{'cached' if built.cached else f'built in {built.seconds:.0f} s'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
