"""When the cluster says no: quotas, StorageClasses and nodes judged before any download (nothing is created for a
spec that can never run), and what the controllers and the scheduler say once pods exist, in status and events.
Real API server, quota admission and controller, scheduler and kwok nodes (4 nodes, 8 GPUs each)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import kubernetes
import pytest

from dflash_testkit.apicounts import sample_sum
from dflash_testkit.controlplane import DEFAULT_STORAGE_CLASS, ControlPlane
from dflash_testkit.dfd import (
    apply,
    apply_with_cache,
    condition,
    condition_is,
    deployment,
    dfd,
    mark_pods_ready,
)
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.cluster


def _quota(api_client, namespace: str, name: str, hard: dict[str, str]) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": name}, "spec": {"hard": hard}})
    # The quota controller fills in status (hard and used); the operator and admission read it from there.
    wait_for(lambda: getattr(core.read_namespaced_resource_quota(name, namespace).status, "hard", None),
             f"quota {name}'s status")


def _stalled(api_client, namespace: str, name: str, reason: str) -> dict:
    obj = wait_for(lambda: condition_is(api_client, namespace, name, "Stalled", "True"), f"{name} Stalled=True")
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["reason"] == reason, stalled
    assert stalled["message"].startswith("nothing was downloaded: "), stalled
    return stalled


def _nothing_created(api_client, namespace: str) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    assert kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace).items == []
    assert core.list_namespaced_persistent_volume_claim(namespace).items == []


def _event(api_client, namespace: str, reason: str) -> kubernetes.client.CoreV1Event:
    found = wait_for(lambda: [e for e in kubernetes.client.CoreV1Api(api_client).list_namespaced_event(namespace).items
                              if e.reason == reason], f"a {reason} event")
    return found[0]


def test_a_quota_that_allows_no_gpu_stalls_before_the_download(
        control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    _quota(api_client, namespace, "no-gpus", {"requests.nvidia.com/gpu": "0"})
    apply(control_plane, namespace, dfd("quota"))
    stalled = _stalled(api_client, namespace, "quota", "QuotaExceeded")
    assert "ResourceQuota no-gpus allows requests.nvidia.com/gpu: 0 (used 0); one serving pod needs 1" in \
        stalled["message"], stalled
    _nothing_created(api_client, namespace)
    assert _event(api_client, namespace, "QuotaExceeded").type == "Warning"

    # The quota raised: the quota's change passes the stalled DFlashDeployment again, and the download starts.
    kubernetes.client.CoreV1Api(api_client).patch_namespaced_resource_quota(
        "no-gpus", namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}})
    wait_for(lambda: kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace).items,
             "the cache Job once the quota allows a pod", 30)


def test_a_quota_full_now_waits_with_the_reason_and_serves_once_it_frees(
        control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    _quota(api_client, namespace, "gpus", {"requests.nvidia.com/gpu": "8"})
    hog = {"metadata": {"name": "hog"}, "spec": {"containers": [{
        "name": "c", "image": "example.com/hog:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    core.create_namespaced_pod(namespace, hog)
    wait_for(lambda: (core.read_namespaced_resource_quota("gpus", namespace).status.used or {})
             .get("requests.nvidia.com/gpu") == "8", "the hog's GPUs counted")
    apply_with_cache(control_plane, api_client, namespace, dfd("waits"))  # the download is not held back
    ready = wait_for(lambda: (c := condition(_get(api_client, namespace, "waits"), "Ready")) and
                     c["reason"] == "PodsRefused" and c, "Ready reason PodsRefused", 90)
    assert "exceeded quota: gpus" in ready["message"], ready
    assert condition(_get(api_client, namespace, "waits"), "Stalled")["status"] == "False"
    assert _event(api_client, namespace, "PodsRefused").type == "Warning"

    core.delete_namespaced_pod("hog", namespace, grace_period_seconds=0)
    mark_pods_ready(api_client, namespace, "waits")
    wait_for(lambda: condition_is(api_client, namespace, "waits", "Ready", "True"), "Ready once the quota frees", 120)


def _get(api_client, namespace: str, name: str) -> dict:
    return kubernetes.client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "serving.dflash.dev", "v1alpha1", namespace, "dflashdeployments", name)


@pytest.mark.parametrize(("spec", "words"), [
    ({"tensorParallelSize": 16}, "allocatable nvidia.com/gpu 8 < 16"),
    ({"nodeSelector": {"nvidia.com/gpu.product": "B200"}}, "nodeSelector nvidia.com/gpu.product=B200 (node has"),
], ids=["gpu-count", "node-selector"])
def test_a_pod_no_node_can_hold_stalls_naming_the_closest_node(
        control_plane: ControlPlane, api_client, operator, namespace: str, spec: dict, words: str) -> None:
    apply(control_plane, namespace, dfd("nofit", **spec))
    stalled = _stalled(api_client, namespace, "nofit", "NoNodeFits")
    assert "no node of 4 can hold one serving pod; closest: gpu-node-0" in stalled["message"], stalled
    assert words in stalled["message"], stalled
    _nothing_created(api_client, namespace)
    assert _event(api_client, namespace, "NoNodeFits").type == "Warning"


@pytest.fixture
def tainted_node(api_client) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(api_client)
    core.patch_node("gpu-node-1", {"spec": {"taints": [{"key": "dedicated", "value": "training",
                                                        "effect": "NoSchedule"}]}})
    yield "gpu-node-1"
    core.patch_node("gpu-node-1", {"spec": {"taints": None}})


def test_a_taint_no_toleration_covers_stalls_and_the_annotation_makes_it_wait(
        control_plane: ControlPlane, api_client, operator, namespace: str, tainted_node: str) -> None:
    pinned = {"nodeSelector": {"kubernetes.io/hostname": tainted_node}}
    apply(control_plane, namespace, dfd("tainted", **pinned))
    stalled = _stalled(api_client, namespace, "tainted", "NoNodeFits")
    assert f"closest: {tainted_node} (untolerated taint dedicated=training:NoSchedule)" in stalled["message"]
    _nothing_created(api_client, namespace)

    # A cluster autoscaler may bring such a node: the annotation turns the stall into a warning, the download starts.
    body = dfd("tainted", **pinned)
    body["metadata"]["annotations"] = {"serving.dflash.dev/node-autoscaling": "true"}
    apply(control_plane, namespace, body)
    wait_for(lambda: kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace).items,
             "the cache Job with the autoscaling annotation", 30)


def test_a_storage_class_that_does_not_exist_stalls(
        control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    apply(control_plane, namespace, dfd("noclass", cache={"storageClassName": "fast-nvme"}))
    stalled = _stalled(api_client, namespace, "noclass", "StorageClassNotFound")
    assert f"'fast-nvme' names no StorageClass (the cluster has: {DEFAULT_STORAGE_CLASS})" in stalled["message"]
    _nothing_created(api_client, namespace)


@pytest.fixture
def no_default_class(api_client) -> Iterator[None]:
    storage = kubernetes.client.StorageV1Api(api_client)
    annotation = "storageclass.kubernetes.io/is-default-class"
    storage.patch_storage_class(DEFAULT_STORAGE_CLASS, {"metadata": {"annotations": {annotation: "false"}}})
    yield
    storage.patch_storage_class(DEFAULT_STORAGE_CLASS, {"metadata": {"annotations": {annotation: "true"}}})


def test_no_default_class_stalls_until_one_is_made_default(
        control_plane: ControlPlane, api_client, operator, namespace: str, no_default_class: None) -> None:
    apply(control_plane, namespace, dfd("nodefault"))
    stalled = _stalled(api_client, namespace, "nodefault", "StorageClassNotFound")
    assert "no StorageClass is the default" in stalled["message"], stalled
    _nothing_created(api_client, namespace)
    # The class marked default again: its change passes the stalled DFlashDeployment, and it goes on.
    kubernetes.client.StorageV1Api(api_client).patch_storage_class(
        DEFAULT_STORAGE_CLASS, {"metadata": {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}})
    wait_for(lambda: kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace).items,
             "the cache Job once a class is the default", 30)


def test_a_serving_pod_the_scheduler_cannot_place_says_why(
        control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    """Every node could hold the pod (so no stall before the download), but not now: each has 8 GPUs, and 3 pods
    of 8 GPUs fill 3 nodes of 4, here 5 replicas of 8 do not fit."""
    apply_with_cache(control_plane, api_client, namespace, dfd("crowd", tensorParallelSize=8, replicas=5))
    wait_for(lambda: deployment(api_client, namespace, "crowd"), "the Deployment")
    ready = wait_for(lambda: (c := condition(_get(api_client, namespace, "crowd"), "Ready")) and
                     c["reason"] == "Unschedulable" and c, "Ready reason Unschedulable", 90)
    assert "cannot be scheduled" in ready["message"] and "nvidia.com/gpu" in ready["message"], ready
    assert condition(_get(api_client, namespace, "crowd"), "Stalled")["status"] == "False"


@pytest.mark.timeout(240)
def test_pods_held_back_by_their_probe_cost_one_event_read_a_minute_each(
        control_plane: ControlPlane, api_client, operator, operator_metrics_url: str, namespace: str) -> None:
    """Running pods that are not ready (kwok's pods stay unready, as if their probe failed): the operator looks for
    the probe's FAIL line in their events at most once a minute each, not on every pass (a pass every 2 s here)."""
    apply_with_cache(control_plane, api_client, namespace, dfd("held", replicas=3))
    core = kubernetes.client.CoreV1Api(api_client)

    def held_back(namespace: str | None = None) -> list:
        """Running serving pods whose containers all run and that are not ready (what the operator reads events for),
        in one namespace or, since earlier tests' DFlashDeployments may still run, in all."""
        selector = "app.kubernetes.io/name=dflash-vllm"
        pods = (core.list_namespaced_pod(namespace, label_selector=selector) if namespace
                else core.list_pod_for_all_namespaces(label_selector=selector)).items
        return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
                and p.status.container_statuses and all(c.state.running for c in p.status.container_statuses)
                and not all(c.ready for c in p.status.container_statuses)]
    wait_for(lambda: len(held_back(namespace)) == 3, "3 running, unready serving pods", 90)
    wait_for(lambda: (c := condition(_get(api_client, namespace, "held"), "Ready")) and c["reason"] ==
             "WaitingForSpeculativeProbe", "a pass that saw them", 30)
    # The operator's own count: the API server's LIST events also counts the namespace controller emptying earlier
    # tests' namespaces (17 in this window once, against the operator's 3).
    everywhere = len(held_back())
    before = sample_sum(operator_metrics_url, "dflash_operator_event_reads_total")
    time.sleep(65)  # 32 passes, and one minute for each pod's next read
    reads = sample_sum(operator_metrics_url, "dflash_operator_event_reads_total") - before
    everywhere = max(everywhere, len(held_back()))
    print(f"\nevent reads in 65 s, {everywhere} unready pods in the cluster (3 here), a pass every 2 s: {reads:.0f}")
    # One read a minute per unready pod (two at most in a window just over a minute); without the rule, one per pass
    # (32 per pod); none if this namespace's pods were never read.
    assert 3 <= reads <= 2 * everywhere, (reads, everywhere)
