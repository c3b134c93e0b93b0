"""Writes OCI image-layout tarballs with the standard library only, no Docker daemon and no registry.

An image here is a list of uncompressed layer tarballs plus a config; `write_image` lays them out as
`oci-layout`, `index.json` (the image name in `io.containerd.image.name`, which `ctr images import` reads) and
`blobs/sha256/...`, all inside one tar that `ctr -n k8s.io images import` takes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
# Layer entries get one fixed time, so the same files give the same layer digest on every build.
EPOCH = 0


@dataclass(frozen=True)
class Layer:
    path: Path      # an uncompressed tar
    digest: str     # sha256:..., which is also the diff_id since the layer is not compressed
    size: int


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def layer_from_dir(root: Path, out: Path, exclude: tuple[str, ...] = ()) -> Layer:
    """Tars everything under root (paths relative to it, owners and modes kept, times fixed).

    Overlayfs whiteouts (0/0 character devices) become `.wh.<name>` files and opaque directories get a
    `.wh..wh..opq` entry, so the upper directory of an overlay mount turns into a proper OCI diff layer.
    `exclude` holds relative paths whose contents are left out (the folder itself stays).
    """
    tmp = out.with_suffix(".tmp")
    inodes: dict[tuple[int, int], str] = {}
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir in exclude:   # the folder itself was added by its parent's pass
                dirnames[:] = []
                continue
            if rel_dir != "." and _opaque(dirpath):
                tar.addfile(_plain(os.path.join(rel_dir, ".wh..wh..opq")))
            for name in sorted(dirnames + filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.normpath(os.path.join(rel_dir, name))
                st = os.lstat(full)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:   # overlayfs whiteout
                    tar.addfile(_plain(os.path.join(rel_dir, ".wh." + name)))
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    continue
                info = tar.gettarinfo(full, arcname=rel)
                info.mtime = EPOCH
                info.uname = info.gname = ""
                if info.isreg() and st.st_nlink > 1:
                    key = (st.st_dev, st.st_ino)
                    if key in inodes:
                        info.type, info.linkname, info.size = tarfile.LNKTYPE, inodes[key], 0
                        tar.addfile(info)
                        continue
                    inodes[key] = rel
                if info.isreg():
                    with open(full, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    tmp.replace(out)
    return Layer(out, _sha256_file(out), out.stat().st_size)


def layer_from_files(files: dict[str, tuple[bytes, int]], out: Path) -> Layer:
    """A layer of a few files given as {path: (content, mode)}, owned by root; parent folders are added."""
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for path in sorted(files):
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
                    tar.addfile(info)
            content, mode = files[path]
            info = tarfile.TarInfo(path.strip("/"))
            info.size, info.mode, info.mtime = len(content), mode, EPOCH
            tar.addfile(info, io.BytesIO(content))
    tmp.replace(out)
    return Layer(out, _sha256_file(out), out.stat().st_size)


def _plain(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(os.path.normpath(name))
    info.mtime = EPOCH
    return info


def _opaque(path: str) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


def image_config(layers: list[Layer], *, env: list[str], entrypoint: list[str] | None = None,
                 cmd: list[str] | None = None, user: str = "", workdir: str = "",
                 labels: dict[str, str] | None = None) -> dict:
    config: dict = {"Env": env}
    if entrypoint is not None:
        config["Entrypoint"] = entrypoint
    if cmd is not None:
        config["Cmd"] = cmd
    if user:
        config["User"] = user
    if workdir:
        config["WorkingDir"] = workdir
    if labels:
        config["Labels"] = labels
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": f"dflash images/builder: {layer.path.name}"}
                    for layer in layers],
    }


def write_image(name: str, layers: list[Layer], config: dict, out: Path) -> Path:
    """Writes one OCI image-layout tar holding the image `name` (e.g. localhost/dflash/pause:abc)."""
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": OCI_LAYER, "digest": layer.digest, "size": layer.size} for layer in layers],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{
            "mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": len(manifest_bytes),
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]},
        }],
    }
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        def add_bytes(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size, info.mode, info.mtime = len(data), 0o644, EPOCH
            tar.addfile(info, io.BytesIO(data))

        add_bytes("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes("index.json", json.dumps(index).encode())
        add_bytes(f"blobs/sha256/{config_digest[7:]}", config_bytes)
        add_bytes(f"blobs/sha256/{manifest_digest[7:]}", manifest_bytes)
        seen = set()
        for layer in layers:
            if layer.digest in seen:
                continue
            seen.add(layer.digest)
            tar.add(layer.path, arcname=f"blobs/sha256/{layer.digest[7:]}")
    tmp.replace(out)
    return out
