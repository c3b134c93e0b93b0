"""The cache Job's program: fetch a target and its DFlash draft, pinned and verified, then check the pair.

    python -m dflash_operator.fetch --target ORG/REPO@REV --draft ORG/REPO@REV --dest DIR

Layout: DIR/target and DIR/draft are plain model directories (`vllm serve DIR/target`), DIR/manifest.json is written
last and atomically, so its presence means the whole pair is there and verified. Partial files live under
DIR/.partial, outside the model directories, where vLLM never looks.

Why not `hf_hub_download`: huggingface_hub 2.x downloads into a per-process `<name>.<uuid>.incomplete` file, so after
a SIGKILL (preemption, OOM, node loss) the next run starts that file from zero and the orphan stays on the volume.
Here the hub client resolves revisions and reads file metadata; the transfer itself resumes its own partial file with
a Range request, and starts over when the server ignores Range (answers 200).

Exit codes: 0 cached and compatible, 3 cached but incompatible, 1 download/verification error, 2 bad arguments,
4 no such repository or revision. With --pair-verdict-by-image the pair's problems are reported but the exit is 0
once both models are cached: the serving image's `dflash-check-pair`, which runs next in the same pod, decides.
HF_TOKEN is sent to the hub only; it is redacted from every line this program writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dflash_operator.cache_result import (
    EXIT_ERROR,
    EXIT_OK,
    INCOMPATIBLE_EXIT_CODE,
    NOT_FOUND_EXIT_CODE,
    CacheResult,
    problem_dicts,
)
from dflash_operator.pairing import PairInputError, Problem, check_pair, draft_block_size, read_config

ROLES = ("target", "draft")
MANIFEST = "manifest.json"
CLAIM = ".fetch-pair.json"  # written first: marks a partial cache as belonging to one pair
PARTIAL = ".partial"
CHUNK = 1024 * 1024
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


class FetchError(Exception):
    """A one-line reason the cache could not be made; becomes the termination message's `error`."""


class NotFoundError(FetchError):
    """The hub answered that the repository or revision does not exist for us: retrying cannot change that."""


class _Retryable(Exception):
    """A server answer worth another try (5xx, 429)."""


# --- pure helpers -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RepoRef:
    repo: str
    revision: str

    def __str__(self) -> str:
        return f"{self.repo}@{self.revision}"


def parse_ref(text: str) -> RepoRef:
    """'org/name@rev' (rev defaults to main). Raises ValueError on anything else."""
    repo, _, revision = text.partition("@")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise ValueError(f"{text!r} is not ORG/REPO[@REVISION]")
    return RepoRef(repo, revision or "main")


@dataclass(frozen=True)
class RemoteFile:
    """One file of a pinned revision, with what the hub says it must be."""

    path: str
    size: int
    algorithm: str  # "sha256" (LFS: etag is the content sha256) or "gitsha1" (plain git blob: etag is the blob id)
    digest: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "hash": f"{self.algorithm}:{self.digest}"}


def expected_hash(etag: str | None) -> tuple[str, str]:
    """The algorithm and hex digest a hub etag stands for. The hub quotes etags and may mark them weak."""
    value = (etag or "").strip()
    value = value[2:] if value.startswith("W/") else value
    value = value.strip('"').lower()
    if re.fullmatch(r"[0-9a-f]{64}", value):
        return "sha256", value
    if re.fullmatch(r"[0-9a-f]{40}", value):
        return "gitsha1", value
    raise FetchError(f"etag {etag!r} is neither a sha256 nor a git blob id; the file cannot be verified")


def new_hasher(algorithm: str, size: int) -> Any:
    """A hashlib object that yields the hub's digest once fed the file content.

    A git blob id is sha1 over 'blob <size>\\0' followed by the content, so the size goes in first.
    """
    if algorithm == "sha256":
        return hashlib.sha256()
    hasher = hashlib.sha1()
    hasher.update(b"blob %d\0" % size)
    return hasher


def hash_file(path: Path, algorithm: str, size: int, hasher: Any | None = None) -> str:
    hasher = hasher or new_hasher(algorithm, size)
    with path.open("rb") as stream:
        while block := stream.read(CHUNK):
            hasher.update(block)
    return hasher.hexdigest()


def verify_local(path: Path, remote: RemoteFile, *, hashes: bool) -> str | None:
    """None when path holds exactly the remote file, else why not (size first: it costs nothing)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    if size != remote.size:
        return f"size {size} != {remote.size}"
    if hashes:
        got = hash_file(path, remote.algorithm, remote.size)
        if got != remote.digest:
            return f"{remote.algorithm} {got} != {remote.digest}"
    return None


def content_range_start(header: str | None) -> int | None:
    """First byte of 'bytes START-END/TOTAL', or None when absent or unparsable."""
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", (header or "").strip())
    return int(match.group(1)) if match else None


def progress_line(snapshot: dict[str, dict[str, int]], event: str = "progress", **extra: Any) -> str:
    """The JSON line the operator reads from the end of the pod log."""
    done = sum(s["bytesDone"] for s in snapshot.values())
    total = sum(s["bytesTotal"] for s in snapshot.values())
    percent = 100.0 if total == 0 else round(100.0 * done / total, 1)
    return json.dumps({"event": event, **snapshot, "percent": percent, **extra}, separators=(",", ":"))


def redactor(secret: str | None) -> Callable[[str], str]:
    if not secret:
        return lambda text: text
    return lambda text: text.replace(secret, "<redacted>")


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


# --- progress -----------------------------------------------------------------------------------------------------

@dataclass
class Progress:
    """Byte and file counters per role; `fetched` counts bytes received from the network by this run."""

    totals: dict[str, int]
    files_total: dict[str, int]
    done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROLES, 0))
    files_done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROLES, 0))
    fetched: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, role: str, count: int, *, network: bool = True) -> None:
        with self.lock:
            self.done[role] += count
            if network:
                self.fetched += count

    def discard(self, role: str, count: int) -> None:
        """Bytes counted as done that turned out unusable (server ignored Range, bad hash): done again later."""
        with self.lock:
            self.done[role] -= count

    def file_done(self, role: str) -> None:
        with self.lock:
            self.files_done[role] += 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self.lock:
            return {r: {"bytesDone": self.done[r], "bytesTotal": self.totals[r],
                        "filesDone": self.files_done[r], "filesTotal": self.files_total[r]} for r in ROLES}


class ProgressPrinter(threading.Thread):
    """Prints a progress line at most every `interval` seconds, or sooner when the percentage crosses a 5% step."""

    def __init__(self, progress: Progress, emit: Callable[[str], None], interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.progress, self.emit, self.interval = progress, emit, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        last_time, last_step = 0.0, -1
        while not self.stopped.wait(0.1):
            snap = self.progress.snapshot()
            done = sum(s["bytesDone"] for s in snap.values())
            total = sum(s["bytesTotal"] for s in snap.values()) or 1
            step = int(20 * done / total)
            now = time.monotonic()
            if step != last_step or now - last_time >= self.interval:
                self.emit(progress_line(snap))
                last_time, last_step = now, step

    def stop(self) -> None:
        self.stopped.set()
        self.join()


# --- hub ----------------------------------------------------------------------------------------------------------

class Hub:
    """The few hub calls this program makes, through huggingface_hub (which honours HF_ENDPOINT and HF_TOKEN)."""

    def __init__(self, token: str | None) -> None:
        from huggingface_hub import HfApi, constants
        from huggingface_hub.utils import build_hf_headers, get_session

        self.token = token
        self.endpoint = constants.ENDPOINT
        self.api = HfApi(token=token)
        self.session = get_session()
        self.headers = build_hf_headers(token=token)
        self.timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT

    def resolve(self, ref: RepoRef) -> tuple[str, list[str]]:
        """The commit a branch, tag or commit names, and the files in it.

        Only the /revision/<rev> route is used: mirrors like olah answer 401 for /api/models/<repo> without it.
        """
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

        try:
            info = self.api.model_info(ref.repo, revision=ref.revision, token=self.token)
        except RevisionNotFoundError:
            raise NotFoundError(f"revision {ref.revision!r} of {ref.repo} not found on the hub") from None
        except RepositoryNotFoundError:
            # A missing revision can look like a missing repo (olah answers 401 RepoNotFound for both):
            # if the default branch exists, it is the revision that is missing.
            if ref.revision != "main" and self._exists(ref.repo):
                raise NotFoundError(f"revision {ref.revision!r} of {ref.repo} not found on the hub") from None
            hidden = f"repository {ref.repo} not found on the hub (or not visible with this token)"
            raise NotFoundError(hidden) from None
        except HfHubHTTPError as error:
            raise FetchError(f"hub error resolving {ref}: {_first_line(error)}") from None
        except _transport_errors() as error:
            raise FetchError(f"cannot reach the hub at {self.endpoint} resolving {ref}: {_first_line(error)}") from None
        if not info.sha or not COMMIT_RE.match(info.sha):
            raise FetchError(f"the hub gave no commit for {ref}")
        files = sorted(s.rfilename for s in info.siblings or [])
        if not files:
            raise FetchError(f"{ref.repo}@{info.sha} lists no files")
        return info.sha, files

    def _exists(self, repo: str) -> bool:
        try:
            self.api.model_info(repo, revision="main", token=self.token)
            return True
        except Exception:  # noqa: BLE001 - any failure means "cannot tell", and the caller reports the repo
            return False

    def url(self, repo: str, commit: str, path: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(repo, path, revision=commit, endpoint=self.endpoint)

    def metadata(self, repo: str, commit: str, path: str) -> RemoteFile:
        """Size and hash from a HEAD on the resolve URL (olah's files_metadata listing carries neither)."""
        from huggingface_hub import get_hf_file_metadata
        from huggingface_hub.errors import HfHubHTTPError

        try:
            meta = get_hf_file_metadata(self.url(repo, commit, path), token=self.token, timeout=self.timeout,
                                        retry_on_errors=True)
        except HfHubHTTPError as error:
            raise FetchError(f"hub error on {repo}@{commit} {path}: {_first_line(error)}") from None
        except _transport_errors() as error:
            reason = _first_line(error)
            raise FetchError(f"cannot reach the hub at {self.endpoint} for {repo} {path}: {reason}") from None
        if meta.commit_hash and meta.commit_hash != commit:
            raise FetchError(f"{repo} {path}: hub served commit {meta.commit_hash}, expected {commit}")
        if meta.size is None:
            raise FetchError(f"{repo}@{commit} {path}: the hub gave no size")
        algorithm, digest = expected_hash(meta.etag)
        return RemoteFile(path, int(meta.size), algorithm, digest)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's network errors (huggingface_hub's session is an httpx-compatible client)."""
    from huggingface_hub.utils import get_session

    module = sys.modules.get(type(get_session()).__module__.split(".")[0])
    error = getattr(module, "TransportError", None)
    return (OSError,) + ((error,) if isinstance(error, type) else ())


# --- transfer -----------------------------------------------------------------------------------------------------

def download(hub: Hub, repo: str, commit: str, remote: RemoteFile, dest: Path, partial: Path,
             on_bytes: Callable[[int], None], on_discard: Callable[[int], None], attempts: int = 3) -> None:
    """Fetch one file to `dest` through `partial`, resuming it, verifying size and hash before it appears at dest.

    on_bytes(n) is told of every n bytes received; on_discard(n) of n bytes already reported that were thrown away.
    """
    transport = _transport_errors() + (_Retryable,)
    partial.parent.mkdir(parents=True, exist_ok=True)
    url = hub.url(repo, commit, remote.path)
    mismatches = 0
    for attempt in range(1, attempts + 1):
        try:
            _transfer(hub, url, remote, partial, on_bytes, on_discard)
        except transport as error:
            if attempt == attempts:
                raise FetchError(f"{repo}@{commit} {remote.path}: download failed: {_first_line(error)}") from None
            time.sleep(min(2 ** attempt, 10))
            continue
        problem = verify_local(partial, remote, hashes=True)
        if problem is None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, dest)
            return
        # The bytes are wrong, not short: resuming would keep them. Start this file over, once.
        on_discard(partial.stat().st_size if partial.exists() else 0)
        partial.unlink(missing_ok=True)
        mismatches += 1
        if mismatches > 1 or attempt == attempts:
            raise FetchError(f"{repo}@{commit} {remote.path}: downloaded file does not verify ({problem})")
    raise FetchError(f"{repo}@{commit} {remote.path}: download failed")


def _transfer(hub: Hub, url: str, remote: RemoteFile, partial: Path, on_bytes: Callable[[int], None],
              on_discard: Callable[[int], None]) -> None:
    offset = partial.stat().st_size if partial.exists() else 0
    if offset > remote.size:
        partial.unlink()
        on_discard(offset)
        offset = 0
    if offset == remote.size:
        return
    headers = dict(hub.headers)
    if offset:
        headers["Range"] = f"bytes={offset}-"
    with hub.session.stream("GET", url, headers=headers, follow_redirects=True, timeout=hub.timeout) as response:
        if response.status_code == 416:  # our partial is not a prefix the server recognises: retry from zero
            partial.unlink()
            on_discard(offset)
            raise _Retryable(f"{url}: HTTP 416 for bytes={offset}-")
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retryable(f"{url}: HTTP {response.status_code}")
        if response.status_code not in (200, 206):
            raise FetchError(f"{url}: HTTP {response.status_code}")
        ranged = content_range_start(response.headers.get("content-range"))
        if offset and (response.status_code == 200 or ranged != offset):
            # The server ignored Range (olah's local mirrors do) or answered another range: start from zero.
            on_discard(offset)
            offset = 0
        with partial.open("r+b" if offset else "wb") as stream:
            stream.seek(offset)
            stream.truncate()
            for block in response.iter_bytes(CHUNK):
                stream.write(block)
                on_bytes(len(block))
            stream.flush()
            os.fsync(stream.fileno())
    return None


# --- the program --------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    code: int
    commits: dict[str, str | None]
    problems: list[Problem]
    error: str | None


def _emit(line: str, redact: Callable[[str], str]) -> None:
    sys.stdout.write(redact(line) + "\n")
    sys.stdout.flush()


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise FetchError(f"{path} is unreadable ({error}); remove it to start this cache over") from None
    if not isinstance(data, dict):
        raise FetchError(f"{path} is not a JSON object; remove it to start this cache over")
    return data


def _same_pair(recorded: dict, identity: dict) -> bool:
    return all(isinstance(recorded.get(r), dict) and recorded[r].get("repo") == identity[r]["repo"]
               and recorded[r].get("commit") == identity[r]["commit"] for r in ROLES)


def _manifest_files(manifest: dict, role: str) -> list[RemoteFile]:
    files = []
    for item in manifest[role]["files"]:
        algorithm, _, digest = item["hash"].partition(":")
        files.append(RemoteFile(item["path"], int(item["size"]), algorithm, digest))
    return files


def _pairing(dest: Path) -> list[Problem]:
    # num_speculative_tokens is each sharer's own choice, checked by the operator against draftBlockSize.
    try:
        return check_pair(dest / "target", dest / "draft")
    except PairInputError as error:
        raise FetchError(f"cannot check the pair: {error}") from None


def _manifest(refs: dict[str, RepoRef], commits: dict[str, str], files: dict[str, list[RemoteFile]],
              problems: list[Problem]) -> dict[str, Any]:
    return {
        "version": 1,
        **{role: {"repo": refs[role].repo, "revision": refs[role].revision, "commit": commits[role],
                  "files": [f.to_dict() for f in files[role]]} for role in ROLES},
        "compatible": not problems,
        "problems": [p.to_dict() for p in problems],
        "completedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _remove_strays(root: Path, keep: set[str]) -> list[str]:
    """Files in a model directory that are not in the pinned revision (vLLM would load a stray *.safetensors)."""
    removed = []
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in keep:
                path.unlink()
                removed.append(rel)
    return removed


def run(args: argparse.Namespace, emit: Callable[[str], None], commits: dict[str, str | None]) -> Outcome:
    """Make DIR a complete, verified cache of the pair; fills `commits` as soon as they are known."""
    refs = {"target": args.target, "draft": args.draft}
    dest: Path = args.dest
    started = time.monotonic()
    dest.mkdir(parents=True, exist_ok=True)
    _lock(dest, emit)
    manifest = _read_json(dest / MANIFEST)

    # A pod restarted on a complete cache pinned by commit need not reach the hub at all.
    hub: Hub | None = None
    if manifest and all(COMMIT_RE.match(refs[r].revision) for r in ROLES) and _same_pair(
            manifest, {r: {"repo": refs[r].repo, "commit": refs[r].revision} for r in ROLES}):
        resolved = {r: refs[r].revision for r in ROLES}
        listing: dict[str, list[str]] | None = None
    else:
        hub = Hub(args.token)
        resolved, listing = {}, {}
        for role in ROLES:
            resolved[role], listing[role] = hub.resolve(refs[role])
            commits[role] = resolved[role]
    commits.update(resolved)
    identity = pair_identity(refs, resolved)
    emit(json.dumps({"event": "resolved", **{r: {"repo": refs[r].repo, "revision": refs[r].revision,
                                                  "commit": resolved[r]} for r in ROLES}}, separators=(",", ":")))

    if manifest is not None and not _same_pair(manifest, identity):
        raise FetchError(f"{dest} holds the cache of {describe_pair(manifest)}, not {describe_pair(identity)}; "
                         "refusing to overwrite it")
    claim = _read_json(dest / CLAIM)
    if claim is not None and not _same_pair(claim, identity):
        raise FetchError(f"{dest} holds a partial cache of {describe_pair(claim)}, not {describe_pair(identity)}; "
                         "refusing to overwrite it")

    if manifest is not None:
        files = {r: _manifest_files(manifest, r) for r in ROLES}
        bad = [(r, f.path, why) for r in ROLES for f in files[r]
               if (why := verify_local(dest / r / f.path, f, hashes=args.full_verify))]
        if not bad:
            problems = _pairing(dest)
            if [p.to_dict() for p in problems] != manifest.get("problems"):
                write_atomic(dest / MANIFEST, _json_bytes({**manifest, "compatible": not problems,
                                                           "problems": [p.to_dict() for p in problems]}))
            sizes = {r: sum(f.size for f in files[r]) for r in ROLES}
            snap = {r: {"bytesDone": sizes[r], "bytesTotal": sizes[r], "filesDone": len(files[r]),
                        "filesTotal": len(files[r])} for r in ROLES}
            emit(progress_line(snap, "complete", bytesFetched=0, cached=True, compatible=not problems,
                               seconds=round(time.monotonic() - started, 2)))
            return Outcome(INCOMPATIBLE_EXIT_CODE if problems else EXIT_OK, commits, problems, None)
        # The manifest no longer tells the truth: drop it first, so a kill from here on leaves no false "complete".
        (dest / MANIFEST).unlink()
        for role, path, why in bad:
            emit(json.dumps({"event": "corrupt", "role": role, "path": path, "reason": why}, separators=(",", ":")))
            (dest / role / path).unlink(missing_ok=True)
        if hub is None or listing is None:
            hub = Hub(args.token)
            listing = {r: hub.resolve(RepoRef(refs[r].repo, resolved[r]))[1] for r in ROLES}

    assert hub is not None and listing is not None
    write_atomic(dest / CLAIM, _json_bytes(identity))
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        metas = {r: list(pool.map(lambda p, r=r: hub.metadata(refs[r].repo, resolved[r], p), listing[r]))
                 for r in ROLES}

    progress = Progress(totals={r: sum(f.size for f in metas[r]) for r in ROLES},
                        files_total={r: len(metas[r]) for r in ROLES})
    for role in ROLES:
        for rel in _remove_strays(dest / role, {f.path for f in metas[role]}):
            emit(json.dumps({"event": "stray", "role": role, "path": rel}, separators=(",", ":")))

    todo: list[tuple[str, RemoteFile]] = []
    for role in ROLES:
        for remote in metas[role]:
            why = verify_local(dest / role / remote.path, remote, hashes=True)
            if why is None:
                progress.add(role, remote.size, network=False)
                progress.file_done(role)
                continue
            if why != "missing":
                emit(json.dumps({"event": "corrupt", "role": role, "path": remote.path, "reason": why},
                                separators=(",", ":")))
                (dest / role / remote.path).unlink()
            todo.append((role, remote))
    # Interleave the two models so both advance together; biggest first keeps the pool busy to the end.
    todo.sort(key=lambda item: -item[1].size)
    todo = _interleave(todo)

    printer = ProgressPrinter(progress, emit, interval=args.progress_interval)
    printer.start()
    try:
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            futures = [pool.submit(_fetch_one, hub, refs[role].repo, resolved[role], remote, dest, role, progress)
                       for role, remote in todo]
            for future in futures:
                future.result()
    finally:
        printer.stop()

    problems = _pairing(dest)
    write_atomic(dest / MANIFEST, _json_bytes(_manifest(refs, resolved, metas, problems)))
    _cleanup_partials(dest)
    emit(progress_line(progress.snapshot(), "complete", bytesFetched=progress.fetched, cached=False,
                       compatible=not problems, seconds=round(time.monotonic() - started, 2)))
    return Outcome(INCOMPATIBLE_EXIT_CODE if problems else EXIT_OK, commits, problems, None)


def _interleave(items: list[tuple[str, RemoteFile]]) -> list[tuple[str, RemoteFile]]:
    queues = {r: [i for i in items if i[0] == r] for r in ROLES}
    out: list[tuple[str, RemoteFile]] = []
    while any(queues.values()):
        for role in ROLES:
            if queues[role]:
                out.append(queues[role].pop(0))
    return out


def _fetch_one(hub: Hub, repo: str, commit: str, remote: RemoteFile, dest: Path, role: str,
               progress: Progress) -> None:
    partial = dest / PARTIAL / role / (remote.path + ".incomplete")
    if partial.exists():  # bytes a killed run left: they count as done, not as fetched by this run
        progress.add(role, min(partial.stat().st_size, remote.size), network=False)
    download(hub, repo, commit, remote, dest / role / remote.path, partial,
             lambda n: progress.add(role, n), lambda n: progress.discard(role, n))
    progress.file_done(role)


def _cleanup_partials(dest: Path) -> None:
    root = dest / PARTIAL
    if root.is_dir():
        for path in sorted(root.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        root.rmdir()


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def _ref_arg(text: str) -> RepoRef:
    try:
        return parse_ref(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _lock(dest: Path, emit: Callable[[str], None]) -> int:
    """One fetch per cache directory: a retried Job can overlap its predecessor's terminating pod."""
    import fcntl

    fd = os.open(dest / ".fetch.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        emit(json.dumps({"event": "waiting", "reason": f"another fetch holds {dest / '.fetch.lock'}"}))
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd  # closed (and so released) when the process exits


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dflash_operator.fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, type=_ref_arg, help="ORG/REPO@REVISION of the target model")
    parser.add_argument("--draft", required=True, type=_ref_arg, help="ORG/REPO@REVISION of the DFlash draft")
    parser.add_argument("--dest", required=True, type=Path, help="cache directory (the volume's mount)")
    parser.add_argument("--termination-log", type=Path, default=Path("/dev/termination-log"))
    parser.add_argument("--workers", type=int, default=4, help="parallel file downloads across both models")
    parser.add_argument("--full-verify", action="store_true",
                        help="hash every file even when a manifest exists (default there: sizes only)")
    parser.add_argument("--progress-interval", type=float, default=1.0, help="seconds between progress lines")
    parser.add_argument("--pair-verdict-by-image", action="store_true",
                        help="exit 0 on a cached pair even when the operator's rules find problems: the serving "
                             "image's vLLM judges the pair next (its reading wins where the two disagree)")
    return parser


def _cached_block_size(dest: Path) -> int | None:
    try:
        return draft_block_size(read_config(dest / "draft"))
    except PairInputError:  # nothing cached yet (e.g. the revision did not resolve)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Read once, here: the token goes to the hub client and to the redactor, nowhere else.
    args.token = os.environ.get("HF_TOKEN") or None
    redact = redactor(args.token)

    def emit(line: str) -> None:
        _emit(line, redact)

    commits: dict[str, str | None] = dict.fromkeys(ROLES)
    try:
        outcome = run(args, emit, commits)
        if args.pair_verdict_by_image and outcome.code == INCOMPATIBLE_EXIT_CODE:
            outcome.code = EXIT_OK
    except NotFoundError as error:
        outcome = Outcome(NOT_FOUND_EXIT_CODE, commits, [], redact(str(error)))
    except FetchError as error:
        outcome = Outcome(EXIT_ERROR, commits, [], redact(str(error)))
    except Exception as error:  # noqa: BLE001 - the Job must always leave a reason behind
        outcome = Outcome(EXIT_ERROR, commits, [], redact(f"{type(error).__name__}: {_first_line(error)}"))
    if outcome.error:
        emit(json.dumps({"event": "error", "error": outcome.error}, separators=(",", ":")))
        print(f"fetch failed: {outcome.error}", file=sys.stderr)
    message = CacheResult(ok=outcome.code == EXIT_OK, target_commit=outcome.commits.get("target"),
                          draft_commit=outcome.commits.get("draft"), draft_block_size=_cached_block_size(args.dest),
                          problems=problem_dicts(outcome.problems), error=outcome.error).to_message()
    try:
        args.termination_log.write_text(redact(message))
    except OSError as error:
        print(f"cannot write {args.termination_log}: {error}", file=sys.stderr)
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
