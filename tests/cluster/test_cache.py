"""The paired cache on the real control plane: PVC + Job first, GPU pods only for a cached, compatible pair."""

from __future__ import annotations

import base64
import json

import kubernetes
import pytest

from dflash_cache.fetch import progress_line
from dflash_testkit.cachejob import (
    DRAFT_COMMIT,
    TARGET_COMMIT,
    cache_job,
    fetch_result,
    finish_cache_job,
    mark_fetching,
    start_cache_job,
    write_fetch_log,
)
from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.dfd import apply, condition, condition_is, deployment, dfd, get_dfd
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_cache_comes_first_and_gates_the_gpu_pods(control_plane: ControlPlane, api_client, operator,
                                                   namespace: str) -> None:
    apply(control_plane, namespace, dfd("paired", cache={"size": "300Gi", "retainPolicy": "Delete"}))
    job = wait_for(lambda: cache_job(api_client, namespace), "the cache Job")
    core = kubernetes.client.CoreV1Api(api_client)
    claim = next(v.persistent_volume_claim.claim_name for v in job.spec.template.spec.volumes if v.name == "cache")
    assert job.metadata.name.startswith(claim + "-"), "the Job is named after its claim, plus its image and hub"
    pvc = core.read_namespaced_persistent_volume_claim(claim, namespace)
    assert pvc.spec.access_modes == ["ReadWriteMany"] and pvc.spec.resources.requests["storage"] == "300Gi"
    assert pvc.metadata.labels["serving.dflash.dev/cache-pair"] == job.metadata.labels["serving.dflash.dev/cache-pair"]
    assert [r.name for r in pvc.metadata.owner_references] == ["paired"], "retainPolicy Delete: owned by its users"
    assert job.spec.template.spec.automount_service_account_token is False
    args = job.spec.template.spec.init_containers[0].args
    assert args == ["--target", "Qwen/Qwen3-Coder-Next@main", "--draft", "z-lab/Qwen3-Coder-Next-DFlash@main",
                    "--dest", "/cache", "--pair-verdict-by-image"]
    assert job.spec.template.spec.containers[0].image == job.metadata.annotations["serving.dflash.dev/image"]

    waiting = wait_for(lambda: condition_is(api_client, namespace, "paired", "CacheReady", "False"), "CacheReady")
    assert condition(waiting, "ModelsCompatible")["status"] == "Unknown"
    assert condition(waiting, "Ready")["reason"] == "CacheNotReady"
    assert waiting["status"]["cache"]["phase"] == "Downloading"
    assert deployment(api_client, namespace, "paired") is None, "a GPU Deployment before the cache is ready"

    finish_cache_job(api_client, namespace, fetch_result())
    ready = wait_for(lambda: condition_is(api_client, namespace, "paired", "ModelsCompatible", "True"),
                     "ModelsCompatible=True")
    assert condition(ready, "CacheReady")["status"] == "True"
    assert ready["status"]["resolved"] == {"targetCommit": TARGET_COMMIT, "draftCommit": DRAFT_COMMIT}
    assert ready["status"]["cache"]["phase"] == "Complete"
    assert ready["status"]["pairCheck"] == {"checkedBy": "vllm", "vllmVersion": "0.32.0", "draftLayout": "z-lab"}
    dep = wait_for(lambda: deployment(api_client, namespace, "paired"), "the serving Deployment")
    volume = next(v for v in dep.spec.template.spec.volumes if v.name == "models")
    assert volume.persistent_volume_claim.claim_name == claim
    assert volume.persistent_volume_claim.read_only is True
    annotations = dep.spec.template.metadata.annotations
    assert annotations["serving.dflash.dev/target-commit"] == TARGET_COMMIT
    wait_for(lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/instance=paired").items),
        "a serving pod scheduled with the bound cache claim")


def test_failed_download_is_reported_while_the_job_retries(control_plane: ControlPlane, api_client, operator,
                                                           namespace: str) -> None:
    apply(control_plane, namespace, dfd("norev", draft={"repo": "z-lab/x", "revision": "nope"}))
    error = "revision 'nope' of z-lab/x not found on the hub"
    finish_cache_job(api_client, namespace, fetch_result(error=error), exit_code=1)

    def retrying():
        obj = get_dfd(api_client, namespace, "norev")
        return obj if error in (obj.get("status") or {}).get("cache", {}).get("message", "") else None

    obj = wait_for(retrying, "the download error in status.cache")
    assert condition(obj, "CacheReady")["status"] == "False"
    assert deployment(api_client, namespace, "norev") is None


def test_two_deployments_of_one_pair_share_one_cache(control_plane: ControlPlane, api_client, operator,
                                                     namespace: str) -> None:
    apply(control_plane, namespace, dfd("first"))
    apply(control_plane, namespace, dfd("second", numSpeculativeTokens=4))
    job = wait_for(lambda: (j := cache_job(api_client, namespace)) and len(j.metadata.owner_references) == 2 and j,
                   "the shared Job owned by both")
    assert sorted(r.name for r in job.metadata.owner_references) == ["first", "second"]
    finish_cache_job(api_client, namespace, fetch_result())
    for name in ("first", "second"):
        wait_for(lambda name=name: deployment(api_client, namespace, name), f"the Deployment of {name}")
    jobs = kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace).items
    assert len(jobs) == 1
    claim = next(v.persistent_volume_claim.claim_name for v in job.spec.template.spec.volumes if v.name == "cache")
    assert kubernetes.client.CoreV1Api(api_client).read_namespaced_persistent_volume_claim(
        claim, namespace).metadata.owner_references is None, "retainPolicy Keep: the cache outlives users"


def test_hub_token_stays_in_the_secret(control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    token = "hf_test_" + "x" * 30
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_secret(namespace, {"metadata": {"name": "hub"},
                                              "data": {"token": base64.b64encode(token.encode()).decode()}})
    apply(control_plane, namespace, dfd("gated", hubTokenSecretRef={"name": "hub"}))
    finish_cache_job(api_client, namespace, fetch_result())
    wait_for(lambda: deployment(api_client, namespace, "gated"), "the Deployment")
    job = cache_job(api_client, namespace)
    env = {e.name: e for e in job.spec.template.spec.init_containers[0].env}
    assert env["HF_TOKEN"].value_from.secret_key_ref.name == "hub" and env["HF_TOKEN"].value is None
    everything = json.dumps([
        get_dfd(api_client, namespace, "gated"),
        kubernetes.client.ApiClient().sanitize_for_serialization(
            kubernetes.client.AppsV1Api(api_client).read_namespaced_deployment("gated", namespace)),
        [e.message for e in core.list_namespaced_event(namespace).items],
    ])
    assert token not in everything
    assert "HF_TOKEN" not in json.dumps(kubernetes.client.ApiClient().sanitize_for_serialization(
        kubernetes.client.AppsV1Api(api_client).read_namespaced_deployment("gated", namespace)))


def test_download_progress_reaches_status_through_the_pod_log(control_plane: ControlPlane, api_client, operator,
                                                              namespace: str) -> None:
    snapshot = {"target": {"bytesDone": 3_000, "bytesTotal": 10_000},
                "draft": {"bytesDone": 1_000, "bytesTotal": 1_000}}
    write_fetch_log(control_plane, ['{"event":"resolved"}', progress_line(snapshot)])
    apply(control_plane, namespace, dfd("progress"))
    _, pod = start_cache_job(api_client, namespace)
    mark_fetching(api_client, namespace, pod)

    def progressed():
        cache = (get_dfd(api_client, namespace, "progress").get("status") or {}).get("cache", {})
        return cache if cache.get("percent") == 36.4 else None

    cache = wait_for(progressed, "36.4% in status.cache")
    assert cache["target"] == {"bytesDone": 3000, "bytesTotal": 10000}
    assert cache["draft"] == {"bytesDone": 1000, "bytesTotal": 1000}
    assert cache["message"] == "downloading target and draft: 36.4%"
    wide = control_plane.kubectl("-n", namespace, "get", "dfd", "progress", "-o", "wide").stdout
    assert "36.4" in wide and "Downloading" in wide, wide


@pytest.mark.parametrize("policy, kept", [("Keep", True), ("Delete", False)])
def test_retain_policy_decides_the_cache_after_the_last_user(control_plane: ControlPlane, api_client, operator,
                                                             namespace: str, policy: str, kept: bool) -> None:
    apply(control_plane, namespace, dfd("user", cache={"retainPolicy": policy}))
    name = finish_cache_job(api_client, namespace, fetch_result())
    wait_for(lambda: deployment(api_client, namespace, "user"), "the Deployment")
    control_plane.kubectl("-n", namespace, "delete", "dfd/user", "--wait=true", "--timeout=30s")
    core = kubernetes.client.CoreV1Api(api_client)

    def claims():
        return [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items
                if c.metadata.deletion_timestamp is None]

    wait_for(lambda: cache_job(api_client, namespace) is None, "the GC to delete the cache Job with its user")
    if kept:
        assert claims() == [name], "retainPolicy Keep lost the cache"
    else:
        wait_for(lambda: claims() == [], "the GC to delete the cache claim with its last user", timeout=90)


def test_speculative_tokens_beyond_the_drafts_block_size_get_no_gpu_pod(
    control_plane: ControlPlane, api_client, operator, namespace: str
) -> None:
    # The cache is shared whatever the token count; each deployment checks its own against the cached draft.
    apply(control_plane, namespace, dfd("greedy", numSpeculativeTokens=16))
    finish_cache_job(api_client, namespace, fetch_result(draft_block_size=16))
    stalled = wait_for(lambda: condition_is(api_client, namespace, "greedy", "ModelsCompatible", "False"),
                       "ModelsCompatible=False")
    assert "num_speculative_tokens 16 exceeds the draft's block_size 16 - 1 = 15" in condition(
        stalled, "ModelsCompatible")["message"]
    assert deployment(api_client, namespace, "greedy") is None
    # Lowering the count to what the draft proposes fixes it without a new download.
    apply(control_plane, namespace, dfd("greedy", numSpeculativeTokens=15))
    wait_for(lambda: deployment(api_client, namespace, "greedy"), "the Deployment once the count fits")
