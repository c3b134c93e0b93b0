"""Can a spec ever run here: quotas, storage classes and nodes, judged from index entries (reconcile.capacity), and
the pass that stalls on a no before anything is created."""

from __future__ import annotations

import copy
import datetime
from decimal import Decimal

import pytest
from test_reconcile import BODY, NS, RecordingKube

from dflash_operator.reconcile import capacity
from dflash_operator.reconcile.ledger import Ledger
from dflash_operator.reconcile.passes import reconcile
from dflash_operator.runtime.clock import Clock
from dflash_operator.runtime.config import OperatorConfig
from dflash_testkit.indexes import GPU_NODE, STANDARD_CLASS, observed

POD = {"containers": [{"name": "vllm", "resources": {"requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "2"},
                                                    "limits": {"memory": "32Gi", "nvidia.com/gpu": "2"}}}],
       "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "8"}}}]}


def test_a_pod_counts_its_requests_limits_bare_names_and_itself() -> None:
    needs = capacity.pod_needs(POD)
    assert needs["requests.nvidia.com/gpu"] == needs["limits.nvidia.com/gpu"] == needs["nvidia.com/gpu"] == 2
    assert needs["requests.cpu"] == 8, "an init container larger than the containers counts alone"
    assert needs["requests.memory"] == Decimal(32 * 2**30) and needs["pods"] == needs["count/pods"] == 1


@pytest.mark.parametrize(("hard", "used", "stall"), [
    ({"requests.nvidia.com/gpu": "0"}, {}, True),
    ({"requests.nvidia.com/gpu": "1"}, {}, True),
    ({"requests.nvidia.com/gpu": "4"}, {"requests.nvidia.com/gpu": "3"}, False),   # full now, frees later
    ({"count/pods": "0"}, {}, True),
    ({"limits.memory": "16Gi"}, {}, True),
])
def test_a_quota_that_can_never_admit_one_pod_stalls_and_one_full_now_waits(hard, used, stall) -> None:
    found = capacity.quota_finding([{"name": "team", "hard": hard, "used": used}], capacity.pod_needs(POD),
                                   "one serving pod")
    assert found is not None and found.reason == capacity.QUOTA_EXCEEDED and found.stall is stall
    resource = next(iter(hard))
    assert f"ResourceQuota team allows {resource}" in found.message and "one serving pod needs" in found.message


def test_a_quota_with_room_or_without_the_resource_says_nothing() -> None:
    quotas = [{"name": "a", "hard": {"requests.nvidia.com/gpu": "8", "services": "0"}, "used": {}}]
    assert capacity.quota_finding(quotas, capacity.pod_needs(POD), "one serving pod") is None


def test_the_claim_counts_against_storage_and_its_class_quota() -> None:
    claim = {"spec": {"resources": {"requests": {"storage": "500Gi"}}}}
    needs = capacity.claim_needs(claim, "fast")
    quota = {"name": "disk", "hard": {"fast.storageclass.storage.k8s.io/requests.storage": "100Gi"}, "used": {}}
    found = capacity.quota_finding([quota], needs, "the cache claim")
    assert found is not None and found.stall and "fast.storageclass.storage.k8s.io/requests.storage" in found.message


def test_storage_class_absent_named_or_no_default() -> None:
    other = {"name": "slow", "default": False}
    assert capacity.storage_class_finding({"spec": {"storageClassName": "fast"}}, [STANDARD_CLASS]) == (
        "fast", capacity.Finding(capacity.STORAGE_CLASS_NOT_FOUND, "spec.cache.storageClassName 'fast' names no "
                                 "StorageClass (the cluster has: standard); the cache claim would never bind"))
    name, found = capacity.storage_class_finding({"spec": {}}, [other])
    assert name is None and found is not None and "no StorageClass is the default" in found.message
    assert capacity.storage_class_finding({"spec": {}}, [other, STANDARD_CLASS]) == ("standard", None)
    assert capacity.storage_class_finding({"spec": {"storageClassName": ""}}, []) == (None, None)


def _node(**changes) -> dict:
    return {**copy.deepcopy(GPU_NODE), **changes}


def test_nodes_judged_by_gpus_selector_affinity_and_taints() -> None:
    needs = {"limits.nvidia.com/gpu": Decimal(16)}
    found = capacity.node_finding(POD, needs, "nvidia.com/gpu", [_node(name="a"), _node(name="b")], False)
    assert found is not None and found.stall
    assert found.message == ("no node of 2 can hold one serving pod; closest: a (allocatable nvidia.com/gpu 8 < 16)")
    selector = {**POD, "nodeSelector": {"pool": "h200"}}
    found = capacity.node_finding(selector, {}, "nvidia.com/gpu", [_node(labels={"pool": "a100"})], False)
    assert found is not None and "nodeSelector pool=h200 (node has 'a100')" in found.message
    tainted = _node(taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
    found = capacity.node_finding(POD, {}, "nvidia.com/gpu", [tainted], False)
    assert found is not None and "untolerated taint dedicated=infer:NoSchedule" in found.message
    tolerant = {**POD, "tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    assert capacity.node_finding(tolerant, {}, "nvidia.com/gpu", [tainted], False) is None
    cordoned = _node(unschedulable=True, taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    assert capacity.node_finding(POD, {}, "nvidia.com/gpu", [cordoned], False) is None, "a cordon is not for good"
    prefer_no = _node(taints=[{"key": "x", "effect": "PreferNoSchedule"}])
    assert capacity.node_finding(POD, {}, "nvidia.com/gpu", [prefer_no], False) is None
    affinity = {**POD, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu.count", "operator": "Gt", "values": ["4"]}]}]}}}}
    assert capacity.node_finding(affinity, {}, "nvidia.com/gpu", [_node(labels={"gpu.count": "8"})], False) is None
    found = capacity.node_finding(affinity, {}, "nvidia.com/gpu", [_node(labels={"gpu.count": "2"})], False)
    assert found is not None and "required node affinity" in found.message


def test_with_an_autoscaler_no_node_fits_waits_instead_of_stalling() -> None:
    found = capacity.node_finding(POD, {"limits.nvidia.com/gpu": Decimal(16)}, "nvidia.com/gpu", [_node()], True)
    assert found is not None and not found.stall and "waiting for a cluster autoscaler" in found.message
    assert capacity.node_finding(POD, {}, "nvidia.com/gpu", [], False).message == "the cluster has no nodes"


def _pass(world, body=None):
    kube, events = RecordingKube(), []
    reconcile(kube, world, Ledger(), copy.deepcopy(body or BODY), OperatorConfig(), lambda *e: events.append(e))  # type: ignore[arg-type]
    return kube, events


def _stalled(kube: RecordingKube) -> dict:
    return next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Stalled")


@pytest.mark.parametrize(("world", "reason", "words"), [
    (observed(quotas={NS: [{"name": "gpus", "hard": {"requests.nvidia.com/gpu": "0"}, "used": {}}]}),
     "QuotaExceeded", "ResourceQuota gpus allows requests.nvidia.com/gpu: 0"),
    (observed(storage_classes=()), "StorageClassNotFound", "no StorageClass is the default"),
    (observed(nodes=(_node(allocatable={"nvidia.com/gpu": "0"}),)), "NoNodeFits", "allocatable nvidia.com/gpu 0"),
])
def test_a_spec_that_can_never_run_stalls_before_anything_is_created(world, reason, words) -> None:
    kube, events = _pass(world)
    assert kube.applied == [] and kube.dry_runs == [], "nothing created, not even the dry run"
    stalled = _stalled(kube)
    assert stalled["status"] == "True" and stalled["reason"] == reason and words in stalled["message"]
    assert stalled["message"].startswith("nothing was downloaded: ")
    assert any(e[0] == "Warning" and e[1] == reason for e in events)


def test_without_the_node_index_the_check_is_skipped_and_said() -> None:
    kube, events = _pass(observed(nodes=None))
    assert [k for k, *_ in kube.applied] == ["PersistentVolumeClaim", "Job"]
    assert [e[1] for e in events] == ["NodeCheckSkipped"]


def test_the_annotation_turns_no_node_fits_into_a_warning_and_the_download_starts() -> None:
    body = copy.deepcopy(BODY)
    body["metadata"]["annotations"] = {"serving.dflash.dev/node-autoscaling": "true"}
    kube, events = _pass(observed(nodes=(_node(allocatable={}),)), body)
    assert [k for k, *_ in kube.applied] == ["PersistentVolumeClaim", "Job"]
    assert [(e[0], e[1]) for e in events] == [("Warning", "NoNodeFits")]


def test_transition_times_come_from_the_clock_passed_in() -> None:
    kube = RecordingKube()
    moment = datetime.datetime(2031, 5, 6, 7, 8, 9, 999, tzinfo=datetime.UTC)
    reconcile(kube, observed(storage_classes=()), Ledger(), copy.deepcopy(BODY), OperatorConfig(),  # type: ignore[arg-type]
              lambda *e: None, clock=Clock(now=lambda: moment))
    assert {c["lastTransitionTime"] for c in kube.statuses[-1]["conditions"]} == {"2031-05-06T07:08:09Z"}
