"""The hub side of the cache Job: revisions, file metadata and resumable, verified transfers.

Why not `hf_hub_download`: huggingface_hub 2.x downloads into a per-process `<name>.<uuid>.incomplete` file, so after
a SIGKILL (preemption, OOM, node loss) the next run starts that file from zero and the orphan stays on the volume.
Here the hub client resolves revisions and reads file metadata; the transfer itself resumes its own partial file with
a Range request, and starts over when the server ignores Range (answers 200)."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK = 1024 * 1024
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


class FetchError(Exception):
    """A one-line reason the cache could not be made; becomes the termination message's `error`."""


class NotFoundError(FetchError):
    """The hub answered that the repository or revision does not exist for us: retrying cannot change that."""


class _Retryable(Exception):
    """A server answer worth another try (5xx, 429)."""


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
            raise FetchError(f"hub error resolving {ref}: {first_line(error)}") from None
        except _transport_errors() as error:
            raise FetchError(f"cannot reach the hub at {self.endpoint} resolving {ref}: {first_line(error)}") from None
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
            raise FetchError(f"hub error on {repo}@{commit} {path}: {first_line(error)}") from None
        except _transport_errors() as error:
            reason = first_line(error)
            raise FetchError(f"cannot reach the hub at {self.endpoint} for {repo} {path}: {reason}") from None
        if meta.commit_hash and meta.commit_hash != commit:
            raise FetchError(f"{repo} {path}: hub served commit {meta.commit_hash}, expected {commit}")
        if meta.size is None:
            raise FetchError(f"{repo}@{commit} {path}: the hub gave no size")
        algorithm, digest = expected_hash(meta.etag)
        return RemoteFile(path, int(meta.size), algorithm, digest)


def first_line(error: BaseException) -> str:
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
                raise FetchError(f"{repo}@{commit} {remote.path}: download failed: {first_line(error)}") from None
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
