"""What the cache Job says, reduced to what status needs. Pure: dicts in, dataclasses out.

The Job's program (dflash_operator.fetch) prints JSON progress lines to its log and leaves a JSON result in its
termination message: commits it resolved, and every draft/target incompatibility it found on the cached files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dflash_operator.cache_result import CacheResult

DOWNLOADING, FAILED, COMPLETE = "Downloading", "Failed", "Complete"


@dataclass(frozen=True)
class CacheOutcome:
    phase: str
    message: str = ""
    target_commit: str | None = None
    draft_commit: str | None = None
    problems: list[dict[str, str]] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    draft_block_size: int | None = None


DOWNLOADING_MESSAGE = "downloading target and draft"


def _condition(job: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in job.get("status", {}).get("conditions", []))


def _result(pod: dict[str, Any]) -> CacheResult | None:
    for status in pod.get("status", {}).get("containerStatuses", []) or []:
        message = ((status.get("state") or {}).get("terminated") or {}).get("message")
        if message:
            return CacheResult.from_message(message)
    return None


def parse_progress_line(line: str) -> dict[str, Any]:
    """The status.cache progress figures from the program's last log line; {} when it is not a progress line."""
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    # "complete" carries the same figures as "progress"; other events (resolved, corrupt, ...) carry none.
    if not isinstance(event, dict) or event.get("event") not in ("progress", "complete"):
        return {}
    progress: dict[str, Any] = {}
    for model in ("target", "draft"):
        figures = event.get(model) or {}
        if "bytesDone" in figures and "bytesTotal" in figures:
            progress[model] = {"bytesDone": int(figures["bytesDone"]), "bytesTotal": int(figures["bytesTotal"])}
    if "percent" in event:
        progress["percent"] = round(float(event["percent"]), 1)
    return progress


def _verified(result: CacheResult) -> CacheOutcome:
    return CacheOutcome(COMPLETE, "both models are cached and verified", result.target_commit, result.draft_commit,
                        list(result.problems), {"percent": 100.0}, result.draft_block_size)


def cache_outcome(job: dict[str, Any] | None, pods: list[dict[str, Any]], last_log_line: str = "") -> CacheOutcome:
    if job is None:
        # The pass that finds no Job applies it, so it reports what a new Job reports: with its own message, the
        # Job's first watch event would cost every new DFlashDeployment a second status write.
        return CacheOutcome(DOWNLOADING, DOWNLOADING_MESSAGE)
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    results = [r for r in map(_result, newest_first) if r is not None]
    error = next((r.error for r in results if r.error), None)
    if _condition(job, "Complete"):
        return _verified(next((r for r in results if not r.error), CacheResult(ok=True)))
    if _condition(job, "Failed"):
        verdict = next((r for r in results if r.problems), None)
        if verdict is not None:  # the program exits non-zero on an incompatible pair: a verdict, not a failure
            return _verified(verdict)
        return CacheOutcome(FAILED, error or "the cache Job failed; see its pod's log")
    progress = parse_progress_line(last_log_line)
    percent = progress.get("percent")
    message = f"{DOWNLOADING_MESSAGE}: {percent:g}%" if percent is not None else DOWNLOADING_MESSAGE
    if error:  # an earlier attempt failed; the Job retries with backoff, resuming the download
        message += f" (retrying after: {error})"
    return CacheOutcome(DOWNLOADING, message, progress=progress)
