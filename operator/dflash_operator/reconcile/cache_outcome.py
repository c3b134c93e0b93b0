"""What the cache Job says, reduced to what status needs. Pure: dicts in, dataclasses out.

The Job's pod runs two steps (see render_cache). The fetch step prints JSON progress lines to its log and leaves a
JSON result in its termination message: the commits it resolved, the draft's block size and what the operator's
rules find wrong with the pair. The check step leaves the serving image's vLLM's verdict on the pair and its version;
where it judged, it wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dflash_cache.result import CHECK_CONTAINER, FETCH_CONTAINER, CacheResult, PairVerdict
from dflash_operator.api.models import PairCheckStatus

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
    pair_check: PairCheckStatus | None = None  # who judged the pair: status.pairCheck as is


DOWNLOADING_MESSAGE = "downloading target and draft"
CHECKING_MESSAGE = "both models are cached and verified; the serving image's vLLM is checking the pair"


def _condition(job: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in job.get("status", {}).get("conditions", []))


def _statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    status = pod.get("status", {})
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def _terminated(pod: dict[str, Any], container: str) -> dict[str, Any] | None:
    for status in _statuses(pod):
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") == container and terminated:
            return terminated
    return None


def _result(pod: dict[str, Any]) -> CacheResult | None:
    message = (_terminated(pod, FETCH_CONTAINER) or {}).get("message")
    return CacheResult.from_message(message) if message else None


def _verdict(pod: dict[str, Any]) -> PairVerdict | None:
    terminated = _terminated(pod, CHECK_CONTAINER)
    if terminated is None:
        return None
    message = terminated.get("message") or ""
    if not message.strip() and terminated.get("exitCode"):
        reason = f" ({terminated['reason']})" if terminated.get("reason") else ""
        return PairVerdict(compatible=False, unavailable=f"exit code {terminated['exitCode']}{reason}, no verdict")
    return PairVerdict.from_message(message)


def fetch_running(pod: dict[str, Any]) -> bool:
    """The download step of this cache pod runs: its log carries the progress lines."""
    return any(s.get("name") == FETCH_CONTAINER and "running" in (s.get("state") or {}) for s in _statuses(pod))


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


def _verified(result: CacheResult, verdict: PairVerdict | None) -> CacheOutcome:
    """Both models cached: the pair's problems are the serving image's vLLM's where it judged them (its reading wins
    over the operator's rules), else the operator's rules' from the fetch step."""
    if verdict is not None and verdict.unavailable is None:
        problems = list(verdict.problems)
        check = PairCheckStatus(checked_by="vllm", vllm_version=verdict.vllm_version,
                                draft_layout=verdict.draft_layout, notes=list(verdict.notes) or None)
    else:
        why = verdict.unavailable if verdict is not None else "the cache Job had no check step"
        problems = list(result.problems)
        check = PairCheckStatus(checked_by="operator", notes=[
            f"judged by the operator's rules only: the serving image did not check the pair ({why})"])
    return CacheOutcome(COMPLETE, "both models are cached and verified", result.target_commit, result.draft_commit,
                        problems, {"percent": 100.0}, result.draft_block_size, check)


def cache_outcome(job: dict[str, Any] | None, pods: list[dict[str, Any]], last_log_line: str = "") -> CacheOutcome:
    if job is None:
        # The pass that finds no Job applies it, so it reports what a new Job reports: with its own message, the
        # Job's first watch event would cost every new DFlashDeployment a second status write.
        return CacheOutcome(DOWNLOADING, DOWNLOADING_MESSAGE)
    newest_first = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    results = [r for r in map(_result, newest_first) if r is not None]
    verdicts = [v for v in map(_verdict, newest_first) if v is not None]
    judged = next((v for v in verdicts if v.unavailable is None), None)
    cached = next((r for r in results if not r.error), None)
    error = next((r.error for r in results if r.error), None)
    if _condition(job, "Complete"):
        return _verified(cached or CacheResult(ok=True), judged or next(iter(verdicts), None))
    if _condition(job, "Failed"):
        if cached is not None and judged is not None:
            return _verified(cached, judged)  # the check exits non-zero on an incompatible pair: a verdict
        if cached is not None and verdicts:
            return CacheOutcome(FAILED, "both models are cached, but the serving image's pair check failed: "
                                        f"{verdicts[0].unavailable}")
        if cached is not None and cached.problems:  # a fetch step that judged alone (exit 3)
            return _verified(cached, None)
        return CacheOutcome(FAILED, error or "the cache Job failed; see its pod's log")
    if cached is not None:
        return CacheOutcome(DOWNLOADING, CHECKING_MESSAGE, cached.target_commit, cached.draft_commit,
                            progress={"percent": 100.0})
    progress = parse_progress_line(last_log_line)
    percent = progress.get("percent")
    message = f"{DOWNLOADING_MESSAGE}: {percent:g}%" if percent is not None else DOWNLOADING_MESSAGE
    if error:  # an earlier attempt failed; the Job retries with backoff, resuming the download
        message += f" (retrying after: {error})"
    return CacheOutcome(DOWNLOADING, message, progress=progress)
