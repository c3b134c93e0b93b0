"""Why no pod serves, read from what the kubelet, the scheduler and the controllers report (status.trouble), and the
pass that puts it in Ready, Stalled, the events."""

from __future__ import annotations

import copy

from test_reconcile import BODY, JOB, NS, RecordingKube, _completed_pod, job

from dflash_cache.result import CacheResult
from dflash_operator.api.models import Condition
from dflash_operator.reconcile.ledger import Ledger
from dflash_operator.reconcile.observed import slim_pod
from dflash_operator.reconcile.passes import reconcile
from dflash_operator.runtime.config import OperatorConfig
from dflash_operator.status import trouble
from dflash_operator.status.conditions import transition_events
from dflash_testkit.indexes import observed

VLLM_ERROR = ("INFO 12-04 starting\nusage: api_server.py [-h] ...\n"
              "api_server.py: error: unrecognized arguments: --no-such-flag\n")


def _pod(name: str = "coder-1", **status) -> dict:
    """A pod as the API server reports it, slimmed as the operator's index keeps it."""
    return slim_pod({"metadata": {"name": name, "creationTimestamp": "T"}, "status": {"phase": "Pending", **status}})


def _vllm(state: dict, restarts: int = 0, last: dict | None = None) -> dict:
    status = {"name": "vllm", "state": state, "restartCount": restarts}
    if last is not None:
        status["lastState"] = {"terminated": last}
    return status


def test_the_vllm_error_line_is_picked_from_a_log_tail() -> None:
    assert trouble.error_line(VLLM_ERROR) == "api_server.py: error: unrecognized arguments: --no-such-flag"
    assert trouble.error_line("a\nb\n\n") == "b" and trouble.error_line("") == ""


def test_crash_loop_reports_vllms_own_line_and_stalls_after_three_restarts() -> None:
    last = {"exitCode": 2, "reason": "Error", "message": VLLM_ERROR}
    looping = _pod(phase="Running", containerStatuses=[_vllm({"waiting": {"reason": "CrashLoopBackOff"}}, 2, last)])
    found = trouble.serving_trouble(None, [looping])
    assert found is not None and found.reason == "CrashLoopBackOff" and not found.stalled
    assert "unrecognized arguments: --no-such-flag" in found.message and "restarts: 2" in found.message
    looping = _pod(phase="Running", containerStatuses=[_vllm({"waiting": {"reason": "CrashLoopBackOff"}}, 3, last)])
    assert trouble.serving_trouble(None, [looping]).stalled  # type: ignore[union-attr]


def test_oom_killed_image_pull_and_unschedulable() -> None:
    oom = _pod(containerStatuses=[_vllm({"waiting": {"reason": "CrashLoopBackOff"}}, 1,
                                        {"exitCode": 137, "reason": "OOMKilled"})])
    assert trouble.serving_trouble(None, [oom]).reason == "OOMKilled"  # type: ignore[union-attr]
    missing = _pod(containerStatuses=[_vllm({"waiting": {"reason": "ErrImagePull", "message":
               'failed to pull and unpack image "example.com/vllm:v9": not found'}})])
    found = trouble.serving_trouble(None, [missing])
    assert found is not None and found.reason == "ImagePullBackOff" and found.stalled and "vllm:v9" in found.message
    unreachable = _pod(containerStatuses=[_vllm({"waiting": {"reason": "ImagePullBackOff", "message":
                   "Back-off pulling image: dial tcp: connect: network is unreachable"}})])
    assert not trouble.serving_trouble(None, [unreachable]).stalled  # type: ignore[union-attr]
    pending = _pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}])
    found = trouble.serving_trouble(None, [pending])
    assert found == trouble.Trouble("Unschedulable", "serving pod coder-1 cannot be scheduled: 0/4 nodes are "
                                                     "available: 4 Insufficient nvidia.com/gpu.", False)
    assert trouble.serving_trouble(None, [_pod(phase="Running", containerStatuses=[_vllm({"running": {}})])]) is None


def test_a_refused_replica_set_is_pods_refused_and_the_worst_pod_wins() -> None:
    deployment = {"status": {"conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                             "message": 'pods "coder-x" is forbidden: exceeded quota: gpus'}]}}
    found = trouble.serving_trouble(deployment, [])
    assert found is not None and found.reason == "PodsRefused" and "exceeded quota: gpus" in found.message
    stalled = _pod("b", containerStatuses=[_vllm({"waiting": {"reason": "InvalidImageName", "message": "bad"}})])
    assert trouble.serving_trouble(deployment, [stalled]).reason == "ImagePullBackOff"  # type: ignore[union-attr]


def _pass(world, body):
    kube, events = RecordingKube(deployment_status={"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                                                    "readyReplicas": 0}), []
    reconcile(kube, world, Ledger(), body, OperatorConfig(), lambda *e: events.append(e))  # type: ignore[arg-type]
    return kube, events


def test_a_pass_says_what_the_serving_pod_says_with_a_warning_on_the_transition() -> None:
    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40, draft_block_size=16)
    last = {"exitCode": 2, "reason": "Error", "message": VLLM_ERROR}
    looping = _pod(phase="Running", containerStatuses=[_vllm({"waiting": {"reason": "CrashLoopBackOff"}}, 5, last)])
    world = observed([job({"conditions": [{"type": "Complete", "status": "True"}]})],
                     {("job", NS, JOB): [_completed_pod(result)], ("serving", NS, BODY["metadata"]["name"]): [looping]})
    body = copy.deepcopy(BODY)
    kube, _ = _pass(world, body)
    conditions = {c["type"]: c for c in kube.statuses[-1]["conditions"]}
    assert (conditions["Ready"]["reason"], conditions["Stalled"]["status"]) == ("CrashLoopBackOff", "True")
    assert "unrecognized arguments: --no-such-flag" in conditions["Ready"]["message"]
    before = [{"type": "Ready", "status": "False", "reason": "WaitingForSpeculativeProbe"},
              {"type": "Stalled", "status": "False", "reason": "Reconciling"}]
    events = transition_events(before, [Condition.model_validate(c) for c in kube.statuses[-1]["conditions"]])
    assert {(e.type, e.reason) for e in events} >= {("Warning", "CrashLoopBackOff")}


def test_the_cache_pod_that_cannot_pull_the_serving_image_shows_while_downloading() -> None:
    pulling = _pod("cache-pod", initContainerStatuses=[{"name": "fetch", "state": {"terminated": {"exitCode": 0}}}],
                   containerStatuses=[{"name": "check-pair", "state": {"waiting": {
                       "reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope/vllm:v0.0.1": '
                                                               "repository does not exist"}}}])
    world = observed([job({"active": 1})], {("job", NS, JOB): [pulling]})
    kube, _ = _pass(world, copy.deepcopy(BODY))
    conditions = {c["type"]: c for c in kube.statuses[-1]["conditions"]}
    assert conditions["Ready"]["reason"] == "ImagePullBackOff" and conditions["Stalled"]["status"] == "True"
    assert "nope/vllm:v0.0.1" in conditions["Ready"]["message"] and "check-pair" in conditions["Ready"]["message"]
    assert conditions["CacheReady"]["status"] == "False"


def test_a_cache_pod_waiting_for_its_claims_volume_is_not_trouble() -> None:
    waiting = _pod("cache-pod", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                             "message": "0/4 nodes are available: pod has unbound immediate "
                                                        "PersistentVolumeClaims. preemption: 0/4 nodes are available"}])
    pending = {"metadata": {"name": "cache-x"}, "status": {"phase": "Pending"}}
    assert trouble.cache_trouble([waiting], pending) is None
    no_gpu = _pod("cache-pod", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": "0/4 nodes are available: 4 node(s) had untolerated taint"}])
    assert trouble.cache_trouble([no_gpu], pending).reason == "Unschedulable"  # type: ignore[union-attr]



FAIL_LINE = "FAIL acceptance 0.00 < floor 0.50: 0 of 45 draft tokens accepted"


def test_a_running_pod_that_fails_its_probe_says_the_probes_own_line_read_once_a_minute() -> None:
    from dflash_operator.reconcile.ledger import EVENT_READ_SECONDS
    from dflash_operator.runtime.clock import Clock

    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40, draft_block_size=16)
    running = _pod(phase="Running", containerStatuses=[_vllm({"running": {"startedAt": "T"}})])
    starting = _pod("coder-2", phase="Running", containerStatuses=[_vllm({"waiting": {"reason": "ContainerCreating"}})])
    world = observed([job({"conditions": [{"type": "Complete", "status": "True"}]})],
                     {("job", NS, JOB): [_completed_pod(result)],
                      ("serving", NS, BODY["metadata"]["name"]): [running, starting]})
    kube = RecordingKube(deployment_status={"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                                            "readyReplicas": 0})
    kube.event_lines["Pod", "coder-1", "Unhealthy"] = f"Readiness probe failed: {FAIL_LINE}"
    now = [100.0]
    clock = Clock(monotonic=lambda: now[0])
    ledger = Ledger()
    for step in (0.0, EVENT_READ_SECONDS / 2, EVENT_READ_SECONDS):  # two passes inside a minute, one after it
        now[0] = 100.0 + step
        reconcile(kube, world, ledger, copy.deepcopy(BODY), OperatorConfig(), lambda *e: None, clock=clock)
        ready = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Ready") if kube.statuses else None
    assert ready is not None and ready["reason"] == "ProbeFailing", ready
    assert ready["message"] == f"serving pod coder-1 runs and fails its readiness probe: {FAIL_LINE}"
    # Only the running pod is asked about (the other is still starting), and at most once per minute.
    assert kube.events_read == ["coder-1", "coder-1"]


def test_a_pod_not_running_or_ready_is_no_probe_question() -> None:
    ready = _pod(phase="Running", conditions=[{"type": "Ready", "status": "True"}],
                 containerStatuses=[_vllm({"running": {}})])
    pending = _pod("coder-2")
    running = _pod("coder-3", phase="Running", containerStatuses=[_vllm({"running": {}})])
    assert trouble.probing_pods([ready, pending, running]) == ["coder-3"]
    assert trouble.probe_trouble("p", "Readiness probe failed: FAIL no completion").message == (  # type: ignore
        "serving pod p runs and fails its readiness probe: FAIL no completion")
    # The startup probe is the speculative probe too; while vLLM loads it only says the server does not answer.
    assert trouble.probe_trouble("p", "Startup probe failed: FAIL acceptance 0.00 < floor 0.50: 0 of 45").message == (
        "serving pod p runs and fails its startup probe: FAIL acceptance 0.00 < floor 0.50: 0 of 45")  # type: ignore
    starting = "Startup probe failed: FAIL metrics: server unreachable at http://127.0.0.1:8000: connection refused"
    assert trouble.probe_trouble("p", starting) is None and trouble.probe_trouble("p", "") is None


def test_a_claim_its_provisioner_refuses_says_the_provisioners_words_while_downloading() -> None:
    from dflash_operator.api import DFlashDeployment
    from dflash_operator.render.cache import cache_name

    name = cache_name(DFlashDeployment.model_validate(BODY))
    refused = ("failed to provision volume with StorageClass \"standard\": NodePath only supports ReadWriteOnce and "
               "ReadWriteOncePod access modes")
    waiting = _pod("cache-pod", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                             "message": "0/2 nodes are available: pod has unbound immediate "
                                                        "PersistentVolumeClaims."}])

    def world(phase: str, annotations: dict | None = None):
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": phase}, "spec": {},
                 "metadata": {"name": name, "namespace": NS, "annotations": annotations or {},
                              "creationTimestamp": "2099-01-01T00:00:00Z"}}
        return observed([job({"active": 1}), claim], {("job", NS, JOB): [waiting]})

    # A fresh claim the scheduler has not picked a node for yet: a provisioner at work, nothing read.
    fresh = RecordingKube()
    reconcile(fresh, world("Pending"), Ledger(), copy.deepcopy(BODY), OperatorConfig(), lambda *e: None)
    assert fresh.events_read == []

    kube = RecordingKube()
    kube.event_lines["PersistentVolumeClaim", name, "ProvisioningFailed"] = refused
    picked = {"volume.kubernetes.io/selected-node": "worker"}
    reconcile(kube, world("Pending", picked), Ledger(), copy.deepcopy(BODY), OperatorConfig(), lambda *e: None)
    ready = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ClaimPending" and "NodePath only supports ReadWriteOnce" in ready["message"], ready
    assert name in ready["message"] and kube.events_read == [name]
    # Bound: nothing to read, and the download's own words again.
    bound = RecordingKube()
    reconcile(bound, world("Bound", picked), Ledger(), copy.deepcopy(BODY), OperatorConfig(), lambda *e: None)
    assert bound.events_read == []
    assert next(c for c in bound.statuses[-1]["conditions"] if c["type"] == "Ready")["reason"] != "ClaimPending"


def test_a_claim_pending_a_minute_counts_as_stalled_provisioning_without_a_node_mark() -> None:
    from dflash_operator.reconcile.cluster_says import provisioning_stalled

    claim = {"metadata": {"creationTimestamp": "2026-12-05T08:00:00Z"}, "status": {"phase": "Pending"}}
    born = 1796457600.0  # 2026-12-05T08:00:00Z
    assert not provisioning_stalled(claim, born + 59) and provisioning_stalled(claim, born + 60)
    assert not provisioning_stalled({**claim, "status": {"phase": "Bound"}}, born + 600)
    assert not provisioning_stalled(None, born)


def test_a_claim_read_that_found_nothing_is_repeated_sooner_than_one_that_found_the_why() -> None:
    from dflash_operator.reconcile.ledger import CLAIM_NOTHING_SAID_READ_SECONDS as NOTHING_SAID_READ_SECONDS
    from dflash_operator.reconcile.ledger import EVENT_READ_SECONDS

    ledger, answers, reads = Ledger(), iter(["", "", "ProvisioningFailed: NodePath only supports ReadWriteOnce"]), []

    def read() -> str:
        reads.append(next(answers))
        return reads[-1]

    at = [0.0, NOTHING_SAID_READ_SECONDS / 2, NOTHING_SAID_READ_SECONDS, 2 * NOTHING_SAID_READ_SECONDS,
          2 * NOTHING_SAID_READ_SECONDS + EVENT_READ_SECONDS / 2]
    said = [ledger.recent_read("uid", "claim/cache", now, read, NOTHING_SAID_READ_SECONDS) for now in at]
    assert said[-1].startswith("ProvisioningFailed")
    assert reads == ["", "", said[-1]], "an empty answer is read again after NOTHING_SAID_READ_SECONDS, an answer kept"
    # Without it (pods), an empty answer is kept as long as any other.
    pod_reads = []
    for now in at:
        ledger.recent_read("uid", "pod/a", now, lambda: pod_reads.append("") or "")
    assert pod_reads == [""]


def test_reads_of_one_kind_are_forgotten_without_touching_the_others() -> None:
    """A pass that looks at pods forgets pods no longer in trouble, never the claim's read (and the reverse): forgetting
    across kinds would read both again on every pass of a DFlashDeployment with both in trouble."""
    ledger, reads = Ledger(), []

    def read(what: str) -> str:
        reads.append(what)
        return what

    ledger.recent_read("uid", "claim/cache", 0.0, lambda: read("claim"))
    ledger.recent_read("uid", "pod/a", 0.0, lambda: read("pod a"))
    ledger.recent_read("uid", "pod/b", 0.0, lambda: read("pod b"))
    ledger.forget_reads("uid", "pod", ["pod/a"])  # b serves now
    ledger.forget_reads("uid", "claim", ["claim/cache"])
    for key in ("claim/cache", "pod/a", "pod/b"):
        ledger.recent_read("uid", key, 30.0, lambda key=key: read(key))
    assert reads == ["claim", "pod a", "pod b", "pod/b"]
