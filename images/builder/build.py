"""Builds the node tier's images here, without Docker or a registry, as OCI tarballs for `ctr images import`.

    python images/builder/build.py pause|base|operator [--json]

- pause: a static Go binary (images/builder/pause), the sandbox image of every pod on the real node.
- base: Debian bookworm minbase (debootstrap) with python3 (3.11) and pip: the stand-in for `python:3.11-slim`.
- operator: images/operator/Dockerfile itself, run by a small interpreter: each stage starts from the stand-in of
  its FROM image, RUN lines run in a chroot over an overlay mount (the upper folder becomes the image's layer),
  COPY, ENV, USER, WORKDIR, ENTRYPOINT and CMD do what Docker does. So the Dockerfile stays the source of truth;
  tests/node/test_images.py checks what the build installed against it.

Every result is cached under ~/.cache/dflash-operator/images by a hash of its inputs (this builder's code, the
Dockerfile, the files it copies); the image name's tag is that hash. Prints the tar path and image name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
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
# Only in the build chroot, never in a layer: Debian marks its python "externally managed" (PEP 668); the
# Dockerfiles' `pip install` lines are written for python:3.11-slim, which is not.
BUILD_ENV = {"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_ROOT_USER_ACTION": "ignore", "DEBIAN_FRONTEND": "noninteractive",
             "HOME": "/root"}


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


# The images a Dockerfile may start FROM, and what stands in for each here.
FROM_STAND_INS = {"python:3.11-slim": "base"}


# --- Dockerfile interpreter -------------------------------------------------------------------------------------
def parse_dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


@dataclass
class Stage:
    name: str
    lower: Path
    upper: Path
    merged: Path
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = ""
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None


@contextmanager
def _overlay(lower: Path, work: Path):
    upper, ovl_work, merged = work / "upper", work / "work", work / "merged"
    for d in (upper, ovl_work, merged):
        d.mkdir(parents=True)
    _run(["mount", "-t", "overlay", "overlay", "-o",
          f"lowerdir={lower},upperdir={upper},workdir={ovl_work}", str(merged)])
    try:
        yield upper, merged
    finally:
        subprocess.run(["umount", str(merged)], check=False)


@contextmanager
def _chroot_mounts(merged: Path):
    """/proc, /dev, the host's resolver and CA bundle inside the chroot for one RUN; none of them reaches the layer.

    The CA bundle matters where HTTPS goes through an intercepting proxy whose CA only the host trusts."""
    mounted: list[Path] = []
    try:
        for src, rel, extra in (("proc", "proc", ["-t", "proc"]), ("/dev", "dev", ["--bind"]),
                                ("/etc/resolv.conf", "etc/resolv.conf", ["--bind"]),
                                ("/etc/ssl/certs/ca-certificates.crt", "etc/ssl/certs/ca-certificates.crt", ["--bind"])):
            target = merged / rel
            if not target.exists():
                continue
            _run(["mount", *extra, src, str(target)])
            mounted.append(target)
        yield
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", str(target)], check=False)


def run_dockerfile(dockerfile: Path, context: Path, name: str, tar: Path, log: list[str]) -> None:
    """Builds the Dockerfile's last stage into `tar`; `log` gets one line per instruction carried out."""
    instructions = parse_dockerfile(dockerfile)
    base_built = base()
    lower = base_rootfs()
    with ExitStack() as stack:
        work = Path(tempfile.mkdtemp(dir=_mkdir(CACHE / "tmp")))
        stack.callback(shutil.rmtree, work, True)
        stages: dict[str, Stage] = {}
        stage: Stage | None = None
        for index, (op, args) in enumerate(instructions):
            if op == "FROM":
                parts = args.split()
                image = parts[0]
                if FROM_STAND_INS.get(image) != "base":
                    raise SystemExit(f"{dockerfile}: no local stand-in for FROM {image}")
                upper, merged = stack.enter_context(_overlay(lower, work / f"stage{index}"))
                alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
                stage = Stage(alias, lower, upper, merged,
                              env=dict(e.split("=", 1) for e in BASE_ENV), cmd=["python3"])
                stages[alias] = stage
            elif stage is None:
                raise SystemExit(f"{dockerfile}: {op} before FROM")
            elif op == "WORKDIR":
                stage.workdir = args
                (stage.merged / args.lstrip("/")).mkdir(parents=True, exist_ok=True)
            elif op == "COPY":
                _copy(stage, args, context, stages)
            elif op == "RUN":
                env = {**stage.env, **BUILD_ENV}
                argv = ["chroot", str(stage.merged), "/usr/bin/env", "-i",
                        *[f"{k}={v}" for k, v in env.items()], "/bin/sh", "-c", f"cd {shlex.quote(stage.workdir)} && {args}"]
                with _chroot_mounts(stage.merged):
                    _run(argv, stdout=sys.stderr)
            elif op == "ENV":
                stage.env.update(_parse_env(args))
            elif op == "USER":
                stage.user = args
            elif op == "ENTRYPOINT":
                stage.entrypoint = json.loads(args)
                stage.cmd = None   # as in Docker: a new ENTRYPOINT resets an inherited CMD
            elif op == "CMD":
                stage.cmd = json.loads(args)
            else:
                raise SystemExit(f"{dockerfile}: instruction {op} is not supported by this builder")
            log.append(f"{op} {args}")
        assert stage is not None
        # The squashed layer: the final stage's overlay upper folder (whiteouts included).
        base_layer_ = base_layer()
        app = oci.layer_from_dir(stage.upper, work / "app.tar")
        layers = [base_layer_, app]
        config = oci.image_config(layers, env=[f"{k}={v}" for k, v in stage.env.items()],
                                  entrypoint=stage.entrypoint, cmd=stage.cmd, user=stage.user,
                                  workdir=stage.workdir if stage.workdir != "/" else "",
                                  labels={"dev.dflash.base": base_built.name,
                                          "dev.dflash.dockerfile": str(dockerfile.relative_to(REPO))})
        oci.write_image(name, layers, config, tar)


def _copy(stage: Stage, args: str, context: Path, stages: dict[str, Stage]) -> None:
    parts = args.split()
    source_root = context
    if parts[0].startswith("--from="):
        source_root = stages[parts[0].split("=", 1)[1]].merged
        parts = parts[1:]
    *sources, dest = parts
    dest_abs = dest if dest.startswith("/") else os.path.join(stage.workdir, dest)
    target = stage.merged / dest_abs.lstrip("/")
    for src in sources:
        path = source_root / src.lstrip("/")
        if path.is_dir():
            # Docker copies a folder's contents into dest (dest/ is the folder itself when it ends in a name).
            shutil.copytree(path, target, dirs_exist_ok=True, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
        else:
            into = target / path.name if dest.endswith("/") or len(sources) > 1 else target
            into.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, into)


def _parse_env(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:   # legacy form: ENV KEY value
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


def operator() -> Built:
    dockerfile = REPO / "images/operator/Dockerfile"
    key = _hash(BUILDER_KEY, BASE_KEY, dockerfile, REPO / "pyproject.toml", REPO / "README.md", REPO / "operator")
    name = f"localhost/dflash/operator:{key}"
    tar = CACHE / f"operator-{key}.tar"
    if tar.exists():
        return Built(name, tar, key, info=json.loads(tar.with_suffix(".json").read_text()))
    started = time.monotonic()
    log: list[str] = []
    # The build context is what the Dockerfile copies, from a clean copy (no venvs, caches or egg-info).
    with tempfile.TemporaryDirectory(dir=_mkdir(CACHE / "tmp")) as ctx:
        for rel in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / rel, Path(ctx) / rel)
        shutil.copytree(REPO / "operator", Path(ctx) / "operator",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        run_dockerfile(dockerfile, Path(ctx), name, tar, log)
    info = {"instructions": log}
    tar.with_suffix(".json").write_text(json.dumps(info, indent=1))
    return Built(name, tar, key, time.monotonic() - started, cached=False, info=info)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


RECIPES = {"pause": pause, "base": base, "operator": operator}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", nargs="+", choices=sorted(RECIPES))
    parser.add_argument("--json", action="store_true", help="one JSON object per image on stdout")
    args = parser.parse_args(argv)
    for image in args.images:
        built = RECIPES[image]()
        if args.json:
            print(json.dumps(built.as_json()))
        else:
            print(f"{built.name} {built.tar} ({built.tar.stat().st_size >> 20} MB, "
                  f"{'cached' if built.cached else f'built in {built.seconds:.0f} s'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
