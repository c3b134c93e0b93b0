"""What the cache Job says, reduced to what status needs. Pure: dicts in, dataclasses out.

The Job's program (dflash_operator.fetch) prints JSON progress lines to its log and leaves a JSON result in its
termination message: commits it resolved, and every draft/target incompatibility it found on the cached files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

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


def _condition(job: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in job.get("status", {}).get("conditions", []))


def _termination_message(pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in pod.get("status", {}).get("containerStatuses", []) or []:
        message = ((status.get("state") or {}).get("terminated") or {}).get("message")
        if message:
            try:
                parsed = json.loads(message)
            except ValueError:
                return {"ok": False, "error": message.strip().splitlines()[-1][:500]}
            return parsed if isinstance(parsed, dict) else None
    return None


def _block_size(result: dict[str, Any]) -> int | None:
    value = result.get("draftBlockSize")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


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


def cache_outcome(job: dict[str, Any] | None, pods: list[dict[str, Any]], last_log_line: str = "") -> CacheOutcome:
    if job is None:
        return CacheOutcome(DOWNLOADING, "the cache Job is being created")
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    results = [r for r in map(_termination_message, newest_first) if r is not None]
    if _condition(job, "Complete"):
        result = next((r for r in results if r.get("ok") is not None), {})
        problems = [{"code": str(p.get("code", "")), "message": str(p.get("message", ""))}
                    for p in result.get("problems") or []]
        return CacheOutcome(COMPLETE, "both models are cached and verified",
                            result.get("targetCommit"), result.get("draftCommit"), problems,
                            {"percent": 100.0}, _block_size(result))
    if _condition(job, "Failed"):
        error = next((r.get("error") for r in results if r.get("error")), None)
        problems = next((r.get("problems") for r in results if r.get("problems")), None)
        if problems:  # the program exits non-zero on an incompatible pair; that is a verdict, not a failure
            return CacheOutcome(COMPLETE, "both models are cached and verified",
                                results[0].get("targetCommit"), results[0].get("draftCommit"),
                                [{"code": str(p.get("code", "")), "message": str(p.get("message", ""))}
                                 for p in problems], {"percent": 100.0}, _block_size(results[0]))
        return CacheOutcome(FAILED, error or "the cache Job failed; see its pod's log")
    progress = parse_progress_line(last_log_line)
    percent = progress.get("percent")
    message = f"downloading target and draft: {percent:g}%" if percent is not None else "downloading target and draft"
    error = next((r.get("error") for r in results if r.get("error")), None)
    if error:  # an earlier attempt failed; the Job retries with backoff, resuming the download
        message += f" (retrying after: {error})"
    return CacheOutcome(DOWNLOADING, message, progress=progress)
