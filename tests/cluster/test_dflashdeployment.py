"""DFlashDeployment end to end: the real operator against the real control plane."""

from __future__ import annotations

import datetime
import json
import threading
import time

import kubernetes
import pytest

from dflash_testkit.apicounts import delta, operator_writes, request_counts
from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.dfd import (
    API,
    SELECTOR,
    apply,
    apply_with_cache,
    condition,
    condition_is,
    deployment,
    dfd,
    mark_pods_ready,
)
from dflash_testkit.waiting import found, wait_for

pytestmark = pytest.mark.cluster


def test_apply_creates_children_and_becomes_ready_when_pods_pass_the_probe(
    control_plane: ControlPlane, api_client, operator, namespace: str
) -> None:
    apply_with_cache(control_plane, api_client, namespace, dfd("coder", tensorParallelSize=2, numSpeculativeTokens=6,
                                                               replicas=2,
                                        extraArgs=["--enable-chunked-prefill"]))
    dep = wait_for(lambda: deployment(api_client, namespace, "coder"), "the Deployment")
    owner = dep.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("DFlashDeployment", "coder", True)

    container = dep.spec.template.spec.containers[0]
    assert container.resources.limits["nvidia.com/gpu"] == "2"
    args = container.args
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "model": "/models/draft", "num_speculative_tokens": 6}
    assert args[:2] == ["--model", "/models/target"]
    assert args[args.index("--served-model-name") + 1] == "Qwen/Qwen3-Coder-Next"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert args[-1] == "--enable-chunked-prefill"
    assert container.readiness_probe.var_exec.command[0] == "dflash-probe"
    assert container.startup_probe.var_exec.command == container.readiness_probe.var_exec.command
    shm = next(v for v in dep.spec.template.spec.volumes if v.name == "dshm")
    assert shm.empty_dir.medium == "Memory"

    # The operator applies the Deployment, then the Service, then the PodDisruptionBudget (render/serving.py), so
    # the Deployment can be seen before the other two exist: wait for each rather than read it once.
    core = kubernetes.client.CoreV1Api(api_client)
    service = wait_for(lambda: found(lambda: core.read_namespaced_service("coder", namespace)), "the Service")
    assert service.spec.ports[0].port == 8000
    policy = kubernetes.client.PolicyV1Api(api_client)
    wait_for(lambda: found(lambda: policy.read_namespaced_pod_disruption_budget("coder", namespace)),
             "the PodDisruptionBudget")

    wait_for(lambda: len([p for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR.format(
        "coder")).items if p.status.phase == "Running"]) == 2, "two running pods")
    for pod in core.list_namespaced_pod(namespace, label_selector=SELECTOR.format("coder")).items:
        assert core.read_node(pod.spec.node_name).metadata.labels["nvidia.com/gpu.present"] == "true"

    # Once the Deployment controller has counted the running pods, the only thing missing is the probe.
    def waiting_for_probe():
        obj = condition_is(api_client, namespace, "coder", "Ready", "False")
        return obj if obj and condition(obj, "Ready")["reason"] == "WaitingForSpeculativeProbe" else None

    not_ready = wait_for(waiting_for_probe, "Ready=False with reason WaitingForSpeculativeProbe")
    assert condition(not_ready, "Ready")["message"] == "0/2 pods passed the speculative probe"
    assert condition(not_ready, "Reconciling")["status"] == "True"

    mark_pods_ready(api_client, namespace, "coder", count=2)
    ready = wait_for(lambda: condition_is(api_client, namespace, "coder", "Ready", "True"), "Ready=True")
    assert ready["status"]["readyReplicas"] == 2
    assert ready["status"]["observedGeneration"] == ready["metadata"]["generation"]
    assert condition(ready, "Stalled")["status"] == "False"
    assert condition(ready, "Ready")["observedGeneration"] == ready["metadata"]["generation"]

    # `kubectl wait` on every documented condition gives the present answer, true or false.
    for expected in ("Ready", "Ready=True", "CacheReady", "ModelsCompatible", "Stalled=False", "Reconciling=False"):
        waited = control_plane.kubectl("-n", namespace, "wait", f"--for=condition={expected}", "dfd/coder",
                                       "--timeout=5s", check=False)
        assert waited.returncode == 0, f"{expected}: {waited.stderr}"
    for wrong in ("Stalled", "Reconciling", "CacheReady=False"):
        waited = control_plane.kubectl("-n", namespace, "wait", f"--for=condition={wrong}", "dfd/coder",
                                       "--timeout=2s", check=False)
        assert waited.returncode != 0 and "timed out" in waited.stderr, f"{wrong}: {waited.stderr}"

    # kopf posts events in the background; they follow the status shortly.
    wait_for(lambda: "AllReplicasReady" in {e.reason for e in core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=coder").items if e.involved_object.kind == "DFlashDeployment"},
        "the AllReplicasReady event")


def test_scale_subresource_changes_the_pod_count(control_plane: ControlPlane, api_client, operator,
                                                 namespace: str) -> None:
    apply_with_cache(control_plane, api_client, namespace, dfd("scaled"))
    wait_for(lambda: deployment(api_client, namespace, "scaled"), "the Deployment")
    control_plane.kubectl("-n", namespace, "scale", "dfd/scaled", "--replicas=3")
    wait_for(lambda: deployment(api_client, namespace, "scaled").spec.replicas == 3, "3 replicas on the Deployment")
    scale = kubernetes.client.CustomObjectsApi(api_client).get_namespaced_custom_object_scale(
        *API, namespace, "dflashdeployments", "scaled")
    assert scale["spec"]["replicas"] == 3
    wait_for(lambda: kubernetes.client.CustomObjectsApi(api_client).get_namespaced_custom_object_scale(
        *API, namespace, "dflashdeployments", "scaled")["status"].get("replicas") == 3, "status.replicas 3")
    assert "app.kubernetes.io/instance=scaled" in scale["status"]["selector"]


def test_changing_a_field_rolls_the_pods(control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    apply_with_cache(control_plane, api_client, namespace, dfd("roll", numSpeculativeTokens=4))
    first = wait_for(lambda: deployment(api_client, namespace, "roll"), "the Deployment")
    apply(control_plane, namespace, dfd("roll", numSpeculativeTokens=12))

    def rolled():
        dep = deployment(api_client, namespace, "roll")
        args = dep.spec.template.spec.containers[0].args
        return dep if '"num_speculative_tokens":12' in args[args.index("--speculative-config") + 1] else None

    second = wait_for(rolled, "the new speculative config in the pod template")
    assert second.metadata.generation > first.metadata.generation
    apps = kubernetes.client.AppsV1Api(api_client)
    wait_for(lambda: len(apps.list_namespaced_replica_set(namespace, label_selector=SELECTOR.format(
        "roll")).items) == 2, "a second ReplicaSet (a rolling update)")


def test_child_edited_or_deleted_by_hand_is_restored(control_plane: ControlPlane, api_client, operator,
                                                      namespace: str) -> None:
    apply_with_cache(control_plane, api_client, namespace, dfd("drift", replicas=1))
    wait_for(lambda: deployment(api_client, namespace, "drift"), "the Deployment")
    apps, core = kubernetes.client.AppsV1Api(api_client), kubernetes.client.CoreV1Api(api_client)

    apps.patch_namespaced_deployment("drift", namespace, {"spec": {"replicas": 5}})
    wait_for(lambda: deployment(api_client, namespace, "drift").spec.replicas == 1, "replicas restored to 1")

    core.delete_namespaced_service("drift", namespace)
    wait_for(lambda: core.list_namespaced_service(namespace, field_selector="metadata.name=drift").items,
             "the Service recreated")

    apps.delete_namespaced_deployment("drift", namespace)
    wait_for(lambda: (d := deployment(api_client, namespace, "drift")) is not None
             and d.metadata.deletion_timestamp is None, "the Deployment recreated")


def test_deleting_the_dfd_removes_its_children(control_plane: ControlPlane, api_client, operator,
                                               namespace: str) -> None:
    apply_with_cache(control_plane, api_client, namespace, dfd("gone"))
    wait_for(lambda: deployment(api_client, namespace, "gone"), "the Deployment")
    control_plane.kubectl("-n", namespace, "delete", "dfd/gone", "--wait=true", "--timeout=30s")
    core = kubernetes.client.CoreV1Api(api_client)
    wait_for(lambda: deployment(api_client, namespace, "gone") is None
             and not core.list_namespaced_service(namespace, field_selector="metadata.name=gone").items,
             "the garbage collector to remove Deployment and Service")


def test_spec_admitted_but_unrenderable_is_stalled_without_children(
    control_plane: ControlPlane, api_client, operator, namespace: str
) -> None:
    apply(control_plane, namespace, dfd("stuck", resources={"limits": {"nvidia.com/gpu": "4"}}))
    stalled = wait_for(lambda: condition_is(api_client, namespace, "stuck", "Stalled", "True"), "Stalled=True")
    cond = condition(stalled, "Stalled")
    assert cond["reason"] == "GpuInResources"
    assert "tensorParallelSize" in cond["message"]
    assert condition(stalled, "Ready")["status"] == "False"
    assert deployment(api_client, namespace, "stuck") is None
    jobs = kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace).items
    assert jobs == [], "an unrenderable spec must not start a download either"
    waited = control_plane.kubectl("-n", namespace, "wait", "--for=condition=Stalled", "dfd/stuck", "--timeout=5s",
                                   check=False)
    assert waited.returncode == 0, waited.stderr

    # Fixing the spec recovers without a restart of anything.
    apply_with_cache(control_plane, api_client, namespace, dfd("stuck"))
    wait_for(lambda: deployment(api_client, namespace, "stuck"), "the Deployment after the fix")
    wait_for(lambda: condition_is(api_client, namespace, "stuck", "Stalled", "False"), "Stalled=False")


def test_a_pod_spec_the_api_server_refuses_stalls_before_any_download(
    control_plane: ControlPlane, api_client, operator, namespace: str
) -> None:
    # Tolerations pass through the CRD unchecked; the API server's Deployment validation is what rejects this one,
    # and the operator asks it (a dry run) before it creates the cache claim and starts the download.
    apply(control_plane, namespace, dfd("tolerant", tolerations=[{"key": "nvidia.com/gpu", "operator": "Sometimes"}]))
    stalled = wait_for(lambda: condition_is(api_client, namespace, "tolerant", "Stalled", "True"), "Stalled=True")
    cond = condition(stalled, "Stalled")
    assert cond["reason"] == "ChildRejected"
    assert cond["message"].startswith("nothing was downloaded: the API server rejected the Deployment"), cond
    assert "Sometimes" in cond["message"], cond["message"]
    assert deployment(api_client, namespace, "tolerant") is None
    assert kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace).items == []
    core = kubernetes.client.CoreV1Api(api_client)
    assert core.list_namespaced_persistent_volume_claim(namespace).items == []
    assert core.list_namespaced_service(namespace).items == [], "no Service without its Deployment"

    # Fixing the spec goes on from there: the download, then the serving objects.
    apply_with_cache(control_plane, api_client, namespace,
                     dfd("tolerant", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]))
    wait_for(lambda: deployment(api_client, namespace, "tolerant"), "the Deployment after the fix")
    wait_for(lambda: condition_is(api_client, namespace, "tolerant", "Stalled", "False"), "Stalled=False")

    # While it serves, a change that needs a new download and brings a pod spec the server refuses. The dry run
    # is a create of a Deployment that exists: the server validates the new one before it looks for the old one,
    # so the refusal still comes first and the new download does not start.
    batch = kubernetes.client.BatchV1Api(api_client)
    jobs = {j.metadata.name for j in batch.list_namespaced_job(namespace).items}
    apply(control_plane, namespace, dfd("tolerant", target={"repo": "Qwen/Qwen3-Coder-Next", "revision": "v2"},
                                        tolerations=[{"key": "nvidia.com/gpu", "operator": "Sometimes"}]))
    stalled = wait_for(lambda: condition_is(api_client, namespace, "tolerant", "Stalled", "True"),
                       "Stalled=True for the changed spec")
    cond = condition(stalled, "Stalled")
    assert cond["reason"] == "ChildRejected" and "Sometimes" in cond["message"], cond
    assert {j.metadata.name for j in batch.list_namespaced_job(namespace).items} == jobs, "a download started"
    assert deployment(api_client, namespace, "tolerant") is not None, "the serving Deployment stays"


def no_teardown_under_way(api_client) -> bool:
    """No earlier test's namespace is being torn down right now: the plane-wide request counts would take the writes
    of its teardown (its DFlashDeployments' passes as their children go) for this test's. A namespace still
    Terminating a minute on waits on something else (a pod kwok never finalised) and is quiet."""
    now = datetime.datetime.now(datetime.UTC)
    return not [n.metadata.name for n in kubernetes.client.CoreV1Api(api_client).list_namespace().items
                if n.metadata.deletion_timestamp is not None
                and (now - n.metadata.deletion_timestamp).total_seconds() < 60]


def test_concurrent_edits_of_the_cr_and_its_deployment_end_as_intended_without_a_hot_loop(
        control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    # Three writers at once: a client scaling through the scale subresource (as an HPA does), a second client
    # changing the spec, and a person editing the Deployment by hand. The operator's writes are counted.
    apply_with_cache(control_plane, api_client, namespace, dfd("busy", replicas=1))
    wait_for(lambda: deployment(api_client, namespace, "busy"), "the Deployment")
    apps, custom = kubernetes.client.AppsV1Api(api_client), kubernetes.client.CustomObjectsApi(api_client)
    wait_for(lambda: no_teardown_under_way(api_client), "no earlier test's namespace being torn down", 180)
    before = request_counts(control_plane)
    edits = 10

    def scaler() -> None:
        for i in range(edits):
            custom.patch_namespaced_custom_object_scale(*API, namespace, "dflashdeployments", "busy",
                                                        {"spec": {"replicas": 1 + i % 3}})
            time.sleep(0.1)

    def spec_editor() -> None:
        for i in range(edits):
            custom.patch_namespaced_custom_object(*API, namespace, "dflashdeployments", "busy",
                                                  {"spec": {"numSpeculativeTokens": 4 + i}})
            time.sleep(0.1)

    def hand_editor() -> None:
        for i in range(edits):
            apps.patch_namespaced_deployment("busy", namespace, {"spec": {"replicas": 7 + i}})
            time.sleep(0.1)

    writers = [threading.Thread(target=fn) for fn in (scaler, spec_editor, hand_editor)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    # The intended state: the last spec and scale written to the CR, whatever the hand editor did.
    want_replicas, want_tokens = 1 + (edits - 1) % 3, 4 + edits - 1

    def intended():
        dep = deployment(api_client, namespace, "busy")
        args = dep.spec.template.spec.containers[0].args
        config = json.loads(args[args.index("--speculative-config") + 1])
        return dep.spec.replicas == want_replicas and config["num_speculative_tokens"] == want_tokens
    wait_for(intended, "the Deployment as the CR says", 60)
    storm = delta(request_counts(control_plane), before)
    def versions() -> tuple[str, str]:
        return (deployment(api_client, namespace, "busy").metadata.resource_version,
                custom.get_namespaced_custom_object(*API, namespace, "dflashdeployments", "busy")["metadata"][
                    "resourceVersion"])

    def settled() -> bool:  # the rollout's own status changes (Deployment controller, kwok, the operator) are over
        first = versions()
        time.sleep(4)
        return no_teardown_under_way(api_client) and versions() == first
    wait_for(settled, "the Deployment and the DFlashDeployment unchanged for 4 s, no namespace being torn down", 180)
    quiet_before = request_counts(control_plane)
    time.sleep(10)  # five resyncs (2 s): an unchanged world costs nothing
    quiet = delta(request_counts(control_plane), quiet_before)
    applied = storm.get("APPLY deployments", 0)
    print(f"\n{3 * edits} concurrent edits: {operator_writes(storm)} operator writes ({storm}); "
          f"{operator_writes(quiet)} in 10 s once settled")
    assert operator_writes(quiet) == 0, quiet
    # At most one apply of the Deployment per edit (a hand edit undone, a spec or scale change rendered); passes that
    # still see the watch's copy from before the operator's own apply do not repeat it (20 measured for 30 edits;
    # 72 before the ledger compared resource versions).
    assert applied <= 3 * edits, storm
