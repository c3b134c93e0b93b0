"""How reconcile maps API errors: transient ones retry with backoff, rejections stall with the server's message."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from dflash_operator.reconcile.ledger import Ledger
from dflash_operator.reconcile.passes import NamespaceTerminating, RetryLater
from dflash_operator.reconcile.passes import reconcile as reconcile_with
from dflash_operator.runtime.config import OperatorConfig
from dflash_testkit.indexes import observed

BODY = {
    "apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
    "metadata": {"name": "coder", "namespace": "llm", "uid": "u1", "generation": 1},
    "spec": {"target": {"repo": "a/target"}, "draft": {"repo": "b/draft"}},
}


class RefusingKube:
    """Answers every apply with one HTTP status, as the API server would; records status writes."""

    def __init__(self, status: int, message: str = "nope") -> None:
        self.error = ApiException(status=status, reason="x")
        self.error.body = json.dumps({"message": message})
        self.statuses: list[dict] = []

    def apply(self, obj: dict, field_manager: str = "", dry_run: bool = False) -> dict:
        raise self.error
    def create(self, obj: dict, field_manager: str = "", dry_run: bool = False) -> dict:
        return self.apply(obj, field_manager, dry_run)  # a POST meets the same answer as an apply

    def patch_dfd_status(self, namespace: str, name: str, status: dict) -> None:
        self.statuses.append(status)


def reconcile(kube, body: dict, config: OperatorConfig, emit) -> None:
    """Against an empty cluster: nothing observed yet, nothing written before."""
    reconcile_with(kube, observed(), Ledger(), body, config, emit)


@pytest.mark.parametrize("code", [409, 429, 500, 503])
def test_transient_errors_retry(code: int) -> None:
    kube = RefusingKube(code)
    with pytest.raises(RetryLater):
        reconcile(kube, BODY, OperatorConfig(), lambda *a: None)
    assert kube.statuses == [], "a transient error must not be reported as a verdict"


def test_rejection_stalls_with_the_servers_message() -> None:
    kube = RefusingKube(422, 'PersistentVolumeClaim "x" is invalid: spec.resources: storage too small')
    events: list[tuple] = []
    reconcile(kube, BODY, OperatorConfig(), lambda *a: events.append(a))
    stalled = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ChildRejected")
    assert "storage too small" in stalled["message"]
    assert ("Warning", "ChildRejected") in [e[:2] for e in events]


def test_other_errors_propagate() -> None:
    with pytest.raises(ApiException):
        reconcile(RefusingKube(401), BODY, OperatorConfig(), lambda *a: None)


def test_a_forbidden_write_is_an_answer_not_a_crash() -> None:
    """Found by the fuzz test: a claim the storage cannot resize answers 403, as do exceeded quotas and admission
    policies. It stalls with the server's message instead of failing the handler on every retry."""
    kube = RefusingKube(403, 'persistentvolumeclaims "dflash-cache-x" is forbidden: exceeded quota: gpu-team')
    reconcile(kube, BODY, OperatorConfig(), lambda *a: None)
    stalled = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ChildRejected")
    assert "exceeded quota: gpu-team" in stalled["message"]


class RejectingClaims(RefusingKube):
    """Rejects the cache claim only; anything applied after it would be a bug."""

    def __init__(self) -> None:
        super().__init__(422, 'PersistentVolumeClaim "dflash-cache-x" is invalid: spec.accessModes: Unsupported')
        self.applied: list[str] = []

    def apply(self, obj: dict, field_manager: str = "", dry_run: bool = False) -> dict:
        if dry_run:
            return obj
        self.applied.append(obj["kind"])
        if obj["kind"] == "PersistentVolumeClaim":
            raise self.error
        return obj


def test_a_rejected_cache_claim_stops_the_pass() -> None:
    kube = RejectingClaims()
    reconcile(kube, BODY, OperatorConfig(), lambda *a: None)
    assert kube.applied == ["PersistentVolumeClaim"], "applied more after the claim was rejected"
    assert len(kube.statuses) == 1


class RejectingPods(RefusingKube):
    """The API server's answer to a pod template it refuses (here, a toleration's operator); records applies."""

    def __init__(self) -> None:
        super().__init__(422, 'Deployment.apps "coder" is invalid: spec.template.spec.tolerations[0].operator: '
                              'Unsupported value: "Sometimes"')
        self.applied: list[str] = []
        self.dry_runs: list[str] = []

    def apply(self, obj: dict, field_manager: str = "", dry_run: bool = False) -> dict:
        (self.dry_runs if dry_run else self.applied).append(obj["kind"])
        if obj["kind"] == "Deployment":
            raise self.error
        return obj


def test_a_pod_spec_the_server_refuses_stalls_before_any_download() -> None:
    kube, events = RejectingPods(), []
    reconcile(kube, BODY, OperatorConfig(), lambda *a: events.append(a))
    assert kube.dry_runs == ["Deployment"] and kube.applied == [], "no claim, no Job: nothing downloads"
    stalled = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ChildRejected")
    assert stalled["message"].startswith("nothing was downloaded: the API server rejected the Deployment: ")
    assert "Sometimes" in stalled["message"]
    assert ("Warning", "ChildRejected") in [e[:2] for e in events]


def test_the_dry_run_happens_once_per_generation_and_not_once_the_download_is_under_way() -> None:
    class Accepting(RejectingPods):
        def apply(self, obj: dict, field_manager: str = "", dry_run: bool = False) -> dict:
            (self.dry_runs if dry_run else self.applied).append(obj["kind"])
            return obj

    kube, ledger = Accepting(), Ledger()
    reconcile_with(kube, observed(), ledger, BODY, OperatorConfig(), lambda *a: None)
    reconcile_with(kube, observed(), ledger, BODY, OperatorConfig(), lambda *a: None)
    assert kube.dry_runs == ["Deployment"]
    # A restarted operator (empty ledger) that finds the cache Job already there does not dry-run again.
    from dflash_operator.api import DFlashDeployment
    from dflash_operator.render.cache import CacheConfig, cache_job_name

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": cache_job_name(DFlashDeployment.model_validate(BODY), CacheConfig()), "namespace": "llm"}}
    restarted = Accepting()
    reconcile_with(restarted, observed([job]), Ledger(), BODY, OperatorConfig(), lambda *a: None)
    assert restarted.dry_runs == []
    changed = {**BODY, "metadata": {**BODY["metadata"], "generation": 2}}
    reconcile_with(kube, observed(), ledger, changed, OperatorConfig(), lambda *a: None)
    assert kube.dry_runs == ["Deployment", "Deployment"]


def test_a_terminating_namespace_ends_the_passes_without_a_verdict() -> None:
    kube = RefusingKube(403, 'services "x" is forbidden: unable to create new content in namespace llm because it is '
                             'being terminated')
    kube.error.body = json.dumps({"message": "being terminated", "reason": "Forbidden", "details": {
        "causes": [{"reason": "NamespaceTerminating", "message": "namespace llm is being terminated"}]}})
    with pytest.raises(NamespaceTerminating):
        reconcile(kube, BODY, OperatorConfig(), lambda *a: None)
    assert kube.statuses == []
    # Any other 403 is an answer about this spec: it stalls.
    quota = RefusingKube(403, 'exceeded quota: gpus')
    reconcile(quota, BODY, OperatorConfig(), lambda *a: None)
    assert any(c["reason"] == "ChildRejected" for c in quota.statuses[-1]["conditions"])


def test_a_deployment_deleted_during_the_pass_is_not_an_error() -> None:
    class Gone(RefusingKube):
        def patch_dfd_status(self, namespace: str, name: str, status: dict) -> None:
            raise ApiException(status=404, reason="Not Found")

    reconcile(Gone(422, "rejected"), BODY, OperatorConfig(), lambda *a: None)   # returns quietly


class ExistingAlready(RefusingKube):
    """The cache objects exist although the indexes do not show them yet (a restarted operator, a lagging watch):
    every POST meets AlreadyExists, every apply succeeds."""

    def __init__(self) -> None:
        super().__init__(409, "already exists")
        self.error.body = json.dumps({"message": "already exists", "reason": "AlreadyExists"})
        self.calls: list[tuple[str, str, bool]] = []  # (verb, kind, dry run)

    def create(self, obj: dict, field_manager: str = "", dry_run: bool = False) -> dict:
        self.calls.append(("create", obj["kind"], dry_run))
        raise self.error

    def apply(self, obj: dict, field_manager: str = "", dry_run: bool = False) -> dict:
        self.calls.append(("apply", obj["kind"], dry_run))
        return obj


def test_an_existing_cache_object_is_applied_and_an_existing_deployment_passes_the_dry_run() -> None:
    kube = ExistingAlready()
    reconcile(kube, BODY, OperatorConfig(), lambda *a: None)
    # The dry run's AlreadyExists comes after validation and admission: it passed, and nothing stalls.
    assert kube.calls == [("create", "Deployment", True),
                          ("create", "PersistentVolumeClaim", False), ("apply", "PersistentVolumeClaim", False),
                          ("create", "Job", False), ("apply", "Job", False)]
    assert not any(c["type"] == "Stalled" and c["status"] == "True" for c in kube.statuses[-1]["conditions"])


def test_a_conflict_that_is_not_already_exists_still_retries() -> None:
    kube = RefusingKube(409, "the object has been modified")
    kube.error.body = json.dumps({"message": "the object has been modified", "reason": "Conflict"})
    with pytest.raises(RetryLater):
        reconcile(kube, BODY, OperatorConfig(), lambda *a: None)
