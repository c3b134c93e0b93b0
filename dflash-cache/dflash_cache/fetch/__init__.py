"""The cache Job's program: fetch a target and its DFlash draft, pinned and verified, then check the pair.

    python -m dflash_cache.fetch --target ORG/REPO@REV --draft ORG/REPO@REV --dest DIR

Modules: transport (hub metadata, resumable verified transfers), layout (what the volume holds and when it is
complete), progress (the JSON lines the operator reads), program (the run itself and its exit codes).
"""

from dflash_cache.fetch.layout import write_atomic
from dflash_cache.fetch.program import main
from dflash_cache.fetch.progress import progress_line, redactor
from dflash_cache.fetch.transport import (
    FetchError,
    RemoteFile,
    content_range_start,
    expected_hash,
    hash_file,
    parse_ref,
    verify_local,
)

__all__ = ["FetchError", "RemoteFile", "content_range_start", "expected_hash", "hash_file", "main", "parse_ref",
           "progress_line", "redactor", "verify_local", "write_atomic"]
