"""The resync pass does only what no watch can tell, and validates a spec once per generation, not once per pass."""

from __future__ import annotations

import copy
from typing import Any

import kopf
import pytest

from dflash_operator.api import DFlashDeployment
from dflash_operator.reconcile import handlers
from dflash_operator.render.cache import cache_job_name
from dflash_operator.runtime.config import OperatorConfig
from dflash_testkit.indexes import observed

BODY = {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
        "metadata": {"name": "coder", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"target": {"repo": "Qwen/Qwen3-Coder-Next"}, "draft": {"repo": "z-lab/Qwen3-Coder-Next-DFlash"}}}
CONFIG = OperatorConfig()
JOB = cache_job_name(DFlashDeployment.model_validate(BODY), CONFIG.cache)


def pod(phase: str, ip: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "creationTimestamp": "", "deletionTimestamp": None},
            "status": {"phase": phase, "podIP": ip, "ready": False, "containerStatuses": []}}


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(handlers, "_run", lambda memo, body, seen, measure=False:
                        calls.append((body["metadata"]["name"], measure)))
    return calls


@pytest.fixture
def memo() -> kopf.Memo:
    return kopf.Memo(config=CONFIG, cache_jobs={})


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counted: list[int] = []
    real = DFlashDeployment.model_validate

    def counting(body: Any) -> DFlashDeployment:
        counted.append(1)
        return real(body)
    monkeypatch.setattr(handlers.DFlashDeployment, "model_validate", counting)
    return counted


def test_nothing_to_read_costs_no_pass(memo, runs, validations) -> None:
    for _ in range(3):
        handlers.resync(memo, observed(pods={("job", "ns", JOB): [pod("Succeeded")]}), BODY)
    assert runs == [] and len(validations) == 1


def test_a_running_download_is_followed_and_the_spec_validated_once_per_generation(memo, runs, validations) -> None:
    # The download is the cache pod's init container: the pod is Pending while it runs.
    fetching = pod("Pending", "10.0.0.9")
    fetching["status"]["initContainerStatuses"] = [{"name": "fetch", "state": {"running": {}}}]
    checking = pod("Running", "10.0.0.9")   # the check step runs: no progress lines to follow
    checking["status"]["initContainerStatuses"] = [{"name": "fetch", "state": {"terminated": {"exitCode": 0}}}]
    handlers.resync(memo, observed(pods={("job", "ns", JOB): [checking]}), BODY)
    assert runs == []
    seen = observed(pods={("job", "ns", JOB): [fetching]})
    for _ in range(3):
        handlers.resync(memo, seen, BODY)
    assert runs == [("coder", False)] * 3 and len(validations) == 1
    changed = copy.deepcopy(BODY)
    changed["metadata"]["generation"] = 2
    handlers.resync(memo, seen, changed)
    assert len(validations) == 2


def test_a_running_serving_pod_is_measured_ready_or_not(memo, runs) -> None:
    handlers.resync(memo, observed(pods={("serving", "ns", "coder"): [pod("Running", "10.0.0.7")]}), BODY)
    handlers.resync(memo, observed(pods={("serving", "ns", "coder"): [pod("Pending")]}), BODY)
    assert runs == [("coder", True)]


def test_an_invalid_spec_is_left_to_the_event_handler(memo, runs) -> None:
    bad = copy.deepcopy(BODY)
    bad["spec"]["numSpeculativeTokens"] = "many"
    handlers.resync(memo, observed(), bad)
    assert runs == [] and memo.cache_jobs["u-1"] == (1, None)
