"""The cache volume's layout: DIR/target and DIR/draft (plain model directories), DIR/manifest.json written last
and atomically (its presence means the pair is complete and verified), partial files under DIR/.partial, a claim
file marking which pair a partial cache belongs to, and the lock one writer holds."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dflash_cache.fetch.transport import FetchError, RemoteFile, RepoRef
from dflash_cache.pairing import PairInputError, Problem, check_pair, draft_block_size, read_config

ROLES = ("target", "draft")
MANIFEST = "manifest.json"
CLAIM = ".fetch-pair.json"  # written first: marks a partial cache as belonging to one pair
PARTIAL = ".partial"


def write_atomic(path: Path, data: bytes) -> None:
    """tmp + fsync + rename + fsync(dir): after a crash the file is either the old one or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pair_identity(refs: dict[str, RepoRef], commits: dict[str, str]) -> dict[str, dict[str, str]]:
    return {role: {"repo": refs[role].repo, "commit": commits[role]} for role in ROLES}


def describe_pair(identity: dict[str, Any]) -> str:
    return " + ".join(f"{identity[r]['repo']}@{identity[r]['commit']}" for r in ROLES)


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise FetchError(f"{path} is unreadable ({error}); remove it to start this cache over") from None
    if not isinstance(data, dict):
        raise FetchError(f"{path} is not a JSON object; remove it to start this cache over")
    return data


def same_pair(recorded: dict, identity: dict) -> bool:
    return all(isinstance(recorded.get(r), dict) and recorded[r].get("repo") == identity[r]["repo"]
               and recorded[r].get("commit") == identity[r]["commit"] for r in ROLES)


def manifest_files(manifest: dict, role: str) -> list[RemoteFile]:
    files = []
    for item in manifest[role]["files"]:
        algorithm, _, digest = item["hash"].partition(":")
        files.append(RemoteFile(item["path"], int(item["size"]), algorithm, digest))
    return files


def pair_problems(dest: Path) -> list[Problem]:
    # num_speculative_tokens is each sharer's own choice, checked by the operator against draftBlockSize.
    try:
        return check_pair(dest / "target", dest / "draft")
    except PairInputError as error:
        raise FetchError(f"cannot check the pair: {error}") from None


def build_manifest(refs: dict[str, RepoRef], commits: dict[str, str], files: dict[str, list[RemoteFile]],
              problems: list[Problem]) -> dict[str, Any]:
    return {
        "version": 1,
        **{role: {"repo": refs[role].repo, "revision": refs[role].revision, "commit": commits[role],
                  "files": [f.to_dict() for f in files[role]]} for role in ROLES},
        "compatible": not problems,
        "problems": [p.to_dict() for p in problems],
        "completedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def remove_strays(root: Path, keep: set[str]) -> list[str]:
    """Files in a model directory that are not in the pinned revision (vLLM would load a stray *.safetensors)."""
    removed = []
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in keep:
                path.unlink()
                removed.append(rel)
    return removed


def cleanup_partials(dest: Path) -> None:
    root = dest / PARTIAL
    if root.is_dir():
        for path in sorted(root.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        root.rmdir()


def json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def take_lock(dest: Path, emit: Callable[[str], None]) -> int:
    """One fetch per cache directory: a retried Job can overlap its predecessor's terminating pod."""
    import fcntl

    fd = os.open(dest / ".fetch.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        emit(json.dumps({"event": "waiting", "reason": f"another fetch holds {dest / '.fetch.lock'}"}))
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd  # closed (and so released) when the process exits


def cached_block_size(dest: Path) -> int | None:
    try:
        return draft_block_size(read_config(dest / "draft"))
    except PairInputError:  # nothing cached yet (e.g. the revision did not resolve)
        return None
