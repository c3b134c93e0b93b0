"""reconcile's normal path against a recording fake of Kube: what it applies, under which manager, and the status."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dflash_cache.result import CacheResult
from dflash_operator.api import DFlashDeployment
from dflash_operator.kube.ownership import FIELD_MANAGER, cache_field_manager
from dflash_operator.reconcile.ledger import Ledger, compare_resource_versions
from dflash_operator.reconcile.observed import Observed
from dflash_operator.reconcile.passes import reconcile as reconcile_with
from dflash_operator.render.cache import CacheConfig, cache_job_name, cache_name
from dflash_operator.render.desired import desired_objects
from dflash_operator.render.serving import CacheFacts
from dflash_operator.runtime.config import OperatorConfig
from dflash_testkit.cachejob import cache_pod_status, image_verdict
from dflash_testkit.indexes import observed

BODY = yaml.safe_load((Path(__file__).parent / "golden" / "minimal.input.yaml").read_text())
BODY["metadata"]["generation"] = 3
UID = BODY["metadata"]["uid"]
DFD = DFlashDeployment.model_validate(BODY)
JOB = cache_job_name(DFD, CacheConfig())
NS = BODY["metadata"]["namespace"]


def job(status: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": NS}, "status": status}


class RecordingKube:
    """Answers like an API server; records every apply and status write."""

    def __init__(self, deployment_status: dict[str, Any] | None = None) -> None:
        self.deployment_status = deployment_status or {}
        self.applied: list[tuple[str, str, str]] = []  # (kind, name, field manager) of every stored write
        self.created: list[tuple[str, str, str]] = []  # those that were POSTs of objects absent from the indexes
        self.statuses: list[dict] = []
        self.logs_read: list[tuple[str, str]] = []
        self.dry_runs: list[tuple[str, str, str]] = []
        self.event_lines: dict[tuple[str, str, str], str] = {}  # (kind, name, reason) -> the newest message
        self.events_read: list[str] = []

    def newest_event(self, namespace: str, kind: str, name: str, reason: str, starting: str | tuple[str, ...]
                     ) -> str:
        self.events_read.append(name)
        message = self.event_lines.get((kind, name, reason), "")
        return message if message.startswith(starting) else ""

    def last_log_line(self, namespace: str, pod: str, container: str) -> str:
        self.logs_read.append((pod, container))
        return json.dumps({"event": "progress", "percent": 40.0})

    def apply(self, obj: dict, field_manager: str, dry_run: bool = False) -> dict:
        if dry_run:  # validated, not stored: an answer, but nothing on the server changed
            self.dry_runs.append((obj["kind"], obj["metadata"]["name"], field_manager))
            return copy.deepcopy(obj)
        self.applied.append((obj["kind"], obj["metadata"]["name"], field_manager))
        answer = copy.deepcopy(obj)
        answer["metadata"]["generation"] = 1
        if obj["kind"] == "Deployment":
            answer["status"] = self.deployment_status
        return answer

    def create(self, obj: dict, field_manager: str, dry_run: bool = False) -> dict:
        if dry_run:
            return self.apply(obj, field_manager, dry_run=True)  # recorded alike: validated, not stored
        self.created.append((obj["kind"], obj["metadata"]["name"], field_manager))
        self.applied.append(self.created[-1])
        return copy.deepcopy(obj)

    def patch_dfd_status(self, namespace: str, name: str, status: dict) -> None:
        self.statuses.append(status)


def reconcile(kube: RecordingKube, body: dict, config: OperatorConfig, emit, world: Observed | None = None,
              ledger: Ledger | None = None) -> None:
    reconcile_with(kube, world or observed(), ledger or Ledger(), body, config, emit)  # type: ignore[arg-type]


def _completed_pod(result: CacheResult, verdict: dict | None = None) -> dict:
    """Both steps done: the fetch step left `result`, the serving image's check `verdict` (default: it agrees)."""
    return {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": cache_pod_status(result, verdict=verdict)}


def _conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_first_pass_applies_only_the_cache_and_says_it_is_downloading() -> None:
    kube, events = RecordingKube(), []
    reconcile(kube, copy.deepcopy(BODY), OperatorConfig(), lambda *e: events.append(e))
    shared = cache_field_manager(UID)
    # Absent from the indexes, the cache objects are created (a POST), not applied.
    assert kube.created == kube.applied == [("PersistentVolumeClaim", cache_name(DFD), shared), ("Job", JOB, shared)]
    # Before the download: the serving Deployment went through the API server's validation, as a dry run.
    assert kube.dry_runs == [("Deployment", DFD.metadata["name"], FIELD_MANAGER)]
    [status] = kube.statuses
    assert _conditions(status)["CacheReady"] == ("False", "Downloading")
    assert _conditions(status)["Ready"] == ("False", "CacheNotReady")
    assert status["cache"]["phase"] == "Downloading" and "resolved" not in status
    assert events == [], "a condition's first appearance is not a transition"


def test_the_new_jobs_first_event_costs_no_second_status_write() -> None:
    """A new DFlashDeployment's status is written once: the pass after the cache Job's first watch event (the Job
    and its PVC in the indexes, no pod yet) finds nothing new to report."""
    kube, ledger = RecordingKube(), Ledger()
    reconcile(kube, copy.deepcopy(BODY), OperatorConfig(), lambda *e: None, ledger=ledger)
    [first] = kube.statuses
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": cache_name(DFD),
                                                                               "namespace": NS}}
    reconcile(kube, {**copy.deepcopy(BODY), "status": first}, OperatorConfig(), lambda *e: None,
              observed([job({}), claim]), ledger)
    assert kube.statuses == [first]


def test_running_download_reports_progress_from_the_log() -> None:
    # The pod is Pending while its init container, the download step, runs; the log read is that container's.
    fetching = {"metadata": {"name": "p", "creationTimestamp": "T"}, "status": {"phase": "Pending",
                "initContainerStatuses": [{"name": "fetch", "state": {"running": {"startedAt": "T"}}}]}}
    kube = RecordingKube()
    world = observed([job({"active": 1})], {("job", NS, JOB): [fetching]})
    reconcile(kube, copy.deepcopy(BODY), OperatorConfig(), lambda *e: None, world)
    assert kube.statuses[-1]["cache"] == {"name": cache_name(DFD), "phase": "Downloading",
                                          "message": "downloading target and draft: 40%", "percent": 40.0}
    assert kube.logs_read == [("p", "fetch")]


def test_verified_pair_applies_exactly_the_desired_objects_and_reports_the_rollout() -> None:
    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40, draft_block_size=16)
    kube = RecordingKube(deployment_status={"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                                            "readyReplicas": 0})
    world = observed([job({"conditions": [{"type": "Complete", "status": "True"}]})],
                     {("job", NS, JOB): [_completed_pod(result)]})
    config = OperatorConfig()
    reconcile(kube, copy.deepcopy(BODY), config, lambda *e: None, world)

    # The path `dflash-operator render` and the golden files test is the one the operator applies.
    expected = desired_objects(DFD, config.render, config.cache,
                               CacheFacts(cache_name(DFD), "a" * 40, "b" * 40))
    assert [(k, n) for k, n, _ in kube.applied] == [(o["kind"], o["metadata"]["name"]) for o in expected]
    # The Job on the server already says everything: it is applied again only because the index stub holds just
    # its status; the next test shows an unchanged world costs no apply.
    # Only the absent cache claim is created; the serving objects are always applied (their fields can go away).
    assert [k for k, _, _ in kube.created] == ["PersistentVolumeClaim"]
    managers = {k: m for k, _, m in kube.applied}
    assert managers["Deployment"] == managers["Service"] == managers["PodDisruptionBudget"] == FIELD_MANAGER
    assert managers["Job"] == managers["PersistentVolumeClaim"] == cache_field_manager(UID)

    [status] = kube.statuses
    conditions = _conditions(status)
    assert conditions["CacheReady"] == ("True", "Cached") and conditions["ModelsCompatible"] == ("True", "PairChecked")
    assert conditions["Ready"] == ("False", "WaitingForSpeculativeProbe")
    assert status["resolved"] == {"targetCommit": "a" * 40, "draftCommit": "b" * 40}
    assert (status["replicas"], status["readyReplicas"]) == (1, 0)
    assert status["observedGeneration"] == BODY["metadata"]["generation"]


def test_unchanged_world_writes_no_status_the_second_time() -> None:
    kube = RecordingKube()
    reconcile(kube, copy.deepcopy(BODY), OperatorConfig(), lambda *e: None)
    again = {**copy.deepcopy(BODY), "status": kube.statuses[-1]}
    events: list = []
    reconcile(kube, again, OperatorConfig(), lambda *e: events.append(e))
    assert len(kube.statuses) == 1 and events == []


def test_too_many_tokens_for_the_cached_draft_gets_no_serving_object() -> None:
    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40, draft_block_size=4)
    kube = RecordingKube()
    world = observed([job({"conditions": [{"type": "Complete", "status": "True"}]})],
                     {("job", NS, JOB): [_completed_pod(result)]})
    reconcile(kube, copy.deepcopy(BODY), OperatorConfig(), lambda *e: None, world)
    assert [k for k, _, _ in kube.applied] == ["PersistentVolumeClaim", "Job"]
    assert _conditions(kube.statuses[-1])["ModelsCompatible"] == ("False", "IncompatiblePair")


def test_a_spec_with_problems_creates_nothing_and_stalls_with_every_problem() -> None:
    body = copy.deepcopy(BODY)
    body["spec"]["extraArgs"] = ["--port=1"]
    body["spec"]["env"] = [{"name": "HF_HOME", "value": "/x"}]
    kube = RecordingKube()
    reconcile(kube, body, OperatorConfig(), lambda *e: None)
    assert kube.applied == []
    stalled = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "ExtraArgsCollide" and "HF_HOME" in stalled["message"]


def test_children_the_server_already_holds_as_rendered_are_not_applied_again() -> None:
    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40)
    config = OperatorConfig()
    expected = desired_objects(DFD, config.render, config.cache, CacheFacts(cache_name(DFD), "a" * 40, "b" * 40))
    on_server = copy.deepcopy(expected)
    for obj in on_server:  # what the server adds: defaults, other fields, status
        obj["metadata"].update(resourceVersion="7", generation=2)
        obj["spec"]["addedByServer"] = True
        if obj["kind"] == "Job":
            obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        if obj["kind"] == "Deployment":
            obj["status"] = {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    world = observed(on_server, {("job", NS, JOB): [_completed_pod(result)]})
    kube = RecordingKube()
    reconcile(kube, copy.deepcopy(BODY), config, lambda *e: None, world)
    assert kube.applied == []
    assert _conditions(kube.statuses[-1])["Ready"] == ("True", "AllReplicasReady")

    # Drift: someone scaled the Deployment by hand. Only that object is applied again.
    next(o for o in on_server if o["kind"] == "Deployment")["spec"]["replicas"] = 5
    reconcile(kube, copy.deepcopy(BODY), config, lambda *e: None, observed(on_server, {
        ("job", NS, JOB): [_completed_pod(result)]}))
    assert [k for k, _, _ in kube.applied] == ["Deployment"]


def test_a_watch_copy_older_than_the_operators_own_apply_is_not_applied_over_again() -> None:
    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40)
    config = OperatorConfig()
    on_server = copy.deepcopy(desired_objects(DFD, config.render, config.cache,
                                              CacheFacts(cache_name(DFD), "a" * 40, "b" * 40)))
    for obj in on_server:
        obj["metadata"]["resourceVersion"] = "7"
        if obj["kind"] == "Job":
            obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    deployment = next(o for o in on_server if o["kind"] == "Deployment")
    deployment["spec"]["replicas"] = 5  # a hand edit: drift

    class VersionedKube(RecordingKube):
        def apply(self, obj: dict, field_manager: str, dry_run: bool = False) -> dict:
            answer = super().apply(obj, field_manager, dry_run)
            answer["metadata"]["resourceVersion"] = "9"
            return answer

    kube, ledger = VersionedKube(), Ledger()

    def world():
        return observed(copy.deepcopy(on_server), {("job", NS, JOB): [_completed_pod(result)]})
    reconcile(kube, copy.deepcopy(BODY), config, lambda *e: None, world(), ledger=ledger)
    assert [k for k, _, _ in kube.applied] == ["Deployment"]
    # The next pass still sees the watch's copy from before that apply (resourceVersion 7 < 9): nothing to repeat.
    reconcile(kube, copy.deepcopy(BODY), config, lambda *e: None, world(), ledger=ledger)
    assert [k for k, _, _ in kube.applied] == ["Deployment"]
    # A copy newer than the apply that still differs is someone's new edit: applied again.
    deployment["metadata"]["resourceVersion"] = "12"
    reconcile(kube, copy.deepcopy(BODY), config, lambda *e: None, world(), ledger=ledger)
    assert [k for k, _, _ in kube.applied] == ["Deployment", "Deployment"]


@pytest.mark.parametrize("a, b, order", [
    ("7", "9", -1), ("10", "9", 1), ("12", "12", 0), ("123456789012345678901", "9", 1),
    ("", "9", None), ("07", "9", None), ("0", "9", None), ("abc", "9", None), ("٣", "9", None),
])
def test_resource_versions_compare_as_client_go_compares_them(a: str, b: str, order: int | None) -> None:
    assert compare_resource_versions(a, b) == order


def test_a_second_pass_before_the_watch_catches_up_sends_nothing() -> None:
    kube, ledger, events = RecordingKube(), Ledger(), []
    reconcile(kube, copy.deepcopy(BODY), OperatorConfig(), lambda *e: events.append(e), ledger=ledger)
    # Same stale body and empty indexes, as when a child's event arrives before the CR's own update.
    reconcile(kube, copy.deepcopy(BODY), OperatorConfig(), lambda *e: events.append(e), ledger=ledger)
    assert len(kube.applied) == 2 and len(kube.statuses) == 1 and events == []


def test_the_serving_vllms_version_reaches_status_and_gates_the_fields_it_lacks() -> None:
    """An image whose tag says no version passes the early check; the cache Job's check then finds vLLM 0.28.0,
    which has no --per-request-spec-decode-metrics: no serving object, Stalled with the field and the version."""
    body = copy.deepcopy(BODY)
    body["spec"].update(image="registry.example/vllm:latest", perRequestSpeculativeMetrics="Summary")
    dfd = DFlashDeployment.model_validate(body)
    job_name = cache_job_name(dfd, CacheConfig())
    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40)
    completed = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job_name, "namespace": NS},
                 "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    kube = RecordingKube()
    old = _completed_pod(result, image_verdict(vllm_version="0.28.0"))
    reconcile(kube, copy.deepcopy(body), OperatorConfig(), lambda *e: None,
              observed([completed], {("job", NS, job_name): [old]}))
    assert [k for k, _, _ in kube.applied] == ["PersistentVolumeClaim", "Job"]
    status = kube.statuses[-1]
    assert status["pairCheck"] == {"checkedBy": "vllm", "vllmVersion": "0.28.0", "draftLayout": "z-lab"}
    assert _conditions(status)["Stalled"] == ("True", "NeedsNewerVLLM")
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")["message"]
    assert "spec.perRequestSpeculativeMetrics needs vLLM 0.29+" in stalled and "vLLM 0.28.0" in stalled

    kube = RecordingKube()
    new = _completed_pod(result, image_verdict(vllm_version="0.32.0"))
    reconcile(kube, copy.deepcopy(body), OperatorConfig(), lambda *e: None,
              observed([completed], {("job", NS, job_name): [new]}))
    assert "Deployment" in [k for k, _, _ in kube.applied]
    assert kube.statuses[-1]["pairCheck"]["vllmVersion"] == "0.32.0"
