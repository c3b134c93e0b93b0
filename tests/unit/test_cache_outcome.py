"""Reading the cache Job: its conditions, its pods' termination messages, the last progress line."""

from __future__ import annotations

import json

from dflash_cache.pairing import Problem
from dflash_cache.result import NO_CHECKER, CacheResult
from dflash_operator.reconcile.cache_outcome import (
    CHECKING_MESSAGE,
    COMPLETE,
    DOWNLOADING,
    FAILED,
    cache_outcome,
    fetch_running,
    parse_progress_line,
)
from dflash_testkit.cachejob import cache_pod_status, image_verdict, termination_message


def job(condition: str | None = None) -> dict:
    conditions = [{"type": condition, "status": "True"}] if condition else []
    return {"metadata": {"name": "dflash-cache-x"}, "status": {"conditions": conditions}}


def pod(message: str, created: str = "2026-01-01T00:00:00Z", fetch_exit: int = 0,
        verdict: dict | str | None = None) -> dict:
    """A cache pod whose fetch step left `message` and, when it exited 0, whose check step left `verdict`
    (default: the serving image agrees with the fetch step)."""
    result = CacheResult.from_message(message)
    assert result is not None
    status = cache_pod_status(result, fetch_exit, verdict)
    # The message as written, not as re-encoded: legacy and foreign messages must reach the reader unchanged.
    status["initContainerStatuses"][0]["state"]["terminated"]["message"] = message
    return {"metadata": {"creationTimestamp": created}, "status": status}


def legacy_pod(message: str) -> dict:
    """A pod of a cache Job rendered before the check step: one container, fetch, which judged the pair itself."""
    return {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"containerStatuses": [
        {"name": "fetch", "state": {"terminated": {"exitCode": 3, "message": message}}}]}}


HIDDEN = Problem("HiddenSizeMismatch", "target hidden_size 128 != draft 256")


def test_complete_job_yields_the_commits_the_program_resolved() -> None:
    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[], error=None)
    outcome = cache_outcome(job("Complete"), [pod(message)])
    assert (outcome.phase, outcome.target_commit, outcome.draft_commit, outcome.problems) == (
        COMPLETE, "a" * 40, "b" * 40, [])


def test_incompatible_verdict_is_complete_with_problems_even_though_the_job_failed() -> None:
    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40,
                                  problems=[HIDDEN], error=None)
    outcome = cache_outcome(job("Failed"), [pod(message)])
    assert outcome.phase == COMPLETE
    assert outcome.problems == [{"code": "HiddenSizeMismatch", "message": "target hidden_size 128 != draft 256"}]
    assert outcome.pair_check is not None and outcome.pair_check.checked_by == "vllm"


def test_the_serving_images_verdict_wins_over_the_operators_rules() -> None:
    """The operator's rules refuse a draft the serving vLLM serves (a newer format): compatible, with its note."""
    note = "the operator's rules refuse the draft architecture (...), but vLLM 0.32.0 registers X: accepted"
    refused_by_rules = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40,
                                           problems=[HIDDEN], error=None)
    outcome = cache_outcome(job("Complete"), [pod(refused_by_rules, verdict=image_verdict(notes=[note]))])
    assert (outcome.phase, outcome.problems) == (COMPLETE, [])
    check = outcome.pair_check
    assert check is not None and (check.checked_by, check.vllm_version, check.notes) == ("vllm", "0.32.0", [note])
    # ... and the other way round: the image finds what the rules did not.
    clean = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[], error=None)
    kv = {"code": "KvGeometryNeedsNewerVLLM", "message": "vLLM 0.23.0 cannot ..."}
    refused = cache_outcome(job("Failed"), [pod(clean, verdict=image_verdict([kv], vllm_version="0.23.0"))])
    assert refused.problems == [kv] and refused.pair_check.vllm_version == "0.23.0"


def test_an_image_without_the_checker_leaves_the_operators_verdict_and_says_so() -> None:
    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[HIDDEN],
                                  error=None)
    no_checker = json.dumps({NO_CHECKER: "the serving image has no dflash-check-pair"})
    outcome = cache_outcome(job("Complete"), [pod(message, verdict=no_checker)])
    assert outcome.phase == COMPLETE and [p["code"] for p in outcome.problems] == ["HiddenSizeMismatch"]
    check = outcome.pair_check
    assert check is not None and check.checked_by == "operator" and check.vllm_version is None
    assert "has no dflash-check-pair" in check.notes[0]


def test_a_check_that_crashed_fails_the_cache_with_its_reason() -> None:
    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[], error=None)
    crashed = pod(message)
    terminated = crashed["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated.update(exitCode=137, reason="OOMKilled", message="")
    outcome = cache_outcome(job("Failed"), [crashed])
    assert outcome.phase == FAILED
    assert outcome.message == ("both models are cached, but the serving image's pair check failed: exit code 137 "
                               "(OOMKilled), no verdict")
    traceback = pod(message, verdict="Traceback (most recent call last):\nImportError: libcuda.so.1")
    assert cache_outcome(job("Failed"), [traceback]).message.endswith("ImportError: libcuda.so.1")


def test_a_job_rendered_before_the_check_step_still_reports_its_verdict() -> None:
    message = termination_message(ok=False, target_commit="a" * 40, draft_commit="b" * 40, problems=[HIDDEN],
                                  error=None)
    outcome = cache_outcome(job("Failed"), [legacy_pod(message)])
    assert outcome.phase == COMPLETE and [p["code"] for p in outcome.problems] == ["HiddenSizeMismatch"]
    assert outcome.pair_check is not None and outcome.pair_check.checked_by == "operator"


def test_between_the_download_and_the_verdict_the_cache_is_being_checked() -> None:
    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[], error=None)
    checking = pod(message)
    checking["status"]["containerStatuses"][0]["state"] = {"running": {}}
    outcome = cache_outcome(job(), [checking])
    assert (outcome.phase, outcome.message, outcome.target_commit) == (DOWNLOADING, CHECKING_MESSAGE, "a" * 40)
    assert not fetch_running(checking)
    fetching = {"status": {"initContainerStatuses": [{"name": "fetch", "state": {"running": {}}}]}}
    assert fetch_running(fetching)


def test_failed_download_reports_the_programs_error() -> None:
    message = termination_message(ok=False, target_commit=None, draft_commit=None, problems=[],
                                  error="revision 'nope' of org/x not found on the hub")
    failed = pod(message, fetch_exit=4)
    assert cache_outcome(job("Failed"), [failed]).message == "revision 'nope' of org/x not found on the hub"
    assert cache_outcome(job("Failed"), [failed]).phase == FAILED
    retrying = cache_outcome(job(), [pod(message, fetch_exit=1)])
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


def test_the_pod_index_keeps_what_the_cache_outcome_reads() -> None:
    """The operator reads slim copies of pods from its index: both steps' results must survive the slimming."""
    from dflash_operator.reconcile.observed import slim_pod

    message = termination_message(ok=True, target_commit="a" * 40, draft_commit="b" * 40, problems=[], error=None)
    full = pod(message, verdict=image_verdict(vllm_version="0.24.0"))
    full["metadata"].update(name="p", managedFields=[{"manager": "kubelet"}])
    for status in full["status"]["initContainerStatuses"] + full["status"]["containerStatuses"]:
        status.update(imageID="sha256:" + "0" * 64, containerID="containerd://x")
    slim = slim_pod(full)
    assert cache_outcome(job("Complete"), [slim]) == cache_outcome(job("Complete"), [full])
    assert cache_outcome(job("Complete"), [slim]).pair_check.vllm_version == "0.24.0"
    fetching = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "initContainerStatuses": [
        {"name": "fetch", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}
    assert fetch_running(slim_pod(fetching)) and not fetch_running(slim)
