"""Reading the cache Job: its conditions, its pods' termination messages, the last progress line."""

from __future__ import annotations

import json

from dflash_operator.cache_outcome import (
    COMPLETE,
    DOWNLOADING,
    FAILED,
    cache_outcome,
    parse_progress_line,
)
from dflash_operator.pairing import Problem
from dflash_testkit.cachejob import termination_message


def job(condition: str | None = None) -> dict:
    conditions = [{"type": condition, "status": "True"}] if condition else []
    return {"metadata": {"name": "dflash-cache-x"}, "status": {"conditions": conditions}}


def pod(message: str, created: str = "2026-01-01T00:00:00Z") -> dict:
    return {"metadata": {"creationTimestamp": created}, "status": {"containerStatuses": [
        {"state": {"terminated": {"exitCode": 0, "message": message}}}]}}


def test_complete_job_yields_the_commits_the_program_resolved() -> None:
    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[], error=None)
    outcome = cache_outcome(job("Complete"), [pod(message)])
    assert (outcome.phase, outcome.target_commit, outcome.draft_commit, outcome.problems) == (
        COMPLETE, "a" * 40, "b" * 40, [])


def test_incompatible_verdict_is_complete_with_problems_even_though_the_job_failed() -> None:
    problem = Problem("HiddenSizeMismatch", "target hidden_size 128 != draft 256")
    message = termination_message(ok=False, target_commit="a" * 40, draft_commit="b" * 40,
                                  problems=[problem], error=None)
    outcome = cache_outcome(job("Failed"), [pod(message)])
    assert outcome.phase == COMPLETE
    assert outcome.problems == [{"code": "HiddenSizeMismatch", "message": "target hidden_size 128 != draft 256"}]


def test_failed_download_reports_the_programs_error() -> None:
    message = termination_message(ok=False, target_commit=None, draft_commit=None, problems=[],
                                  error="revision 'nope' of org/x not found on the hub")
    assert cache_outcome(job("Failed"), [pod(message)]).message == "revision 'nope' of org/x not found on the hub"
    assert cache_outcome(job("Failed"), [pod(message)]).phase == FAILED
    retrying = cache_outcome(job(), [pod(message)])
    assert retrying.phase == DOWNLOADING and "retrying after: revision 'nope'" in retrying.message


def test_progress_line_becomes_status_figures() -> None:
    line = json.dumps({"event": "progress", "target": {"bytesDone": 50, "bytesTotal": 100},
                       "draft": {"bytesDone": 10, "bytesTotal": 10}, "percent": 54.5454})
    assert parse_progress_line(line) == {"target": {"bytesDone": 50, "bytesTotal": 100},
                                         "draft": {"bytesDone": 10, "bytesTotal": 10}, "percent": 54.5}
    assert parse_progress_line('{"event":"resolved"}') == {} and parse_progress_line("not json") == {}
    outcome = cache_outcome(job(), [], line)
    assert outcome.message == "downloading target and draft: 54.5%"


def test_draft_block_size_travels_with_the_verdict() -> None:
    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[], error=None,
                                  draft_block_size=16)
    assert cache_outcome(job("Complete"), [pod(message)]).draft_block_size == 16
    legacy = json.dumps({"ok": True, "targetCommit": "a", "draftCommit": "b", "problems": []})
    assert cache_outcome(job("Complete"), [pod(legacy)]).draft_block_size is None
