"""A real kind cluster made by scripts/kind/cluster.sh: nodes, the operator installed by helm from the image
`docker build` made, and a DFlashDeployment carried to its cache Job (no GPU exists: the worker advertises fake
nvidia.com/gpu capacity; no hub mirror runs during these tests, so the download is refused and retries).
test_serving.py then serves the tiny pair with the hub mirror up."""

from __future__ import annotations

import pytest

from dflash_testkit.kindpath import WORKER, conditions, get, kubectl, set_fake_gpus
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.kind


def test_nodes_ready() -> None:
    nodes = get("nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["dflash-control-plane", WORKER]
    for node in nodes:
        assert conditions(node)["Ready"]["status"] == "True", node["metadata"]["name"]
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        assert node["spec"].get("podCIDR"), "scripts/kind/cni.sh routes each node's pod CIDR"


def test_system_pods_run() -> None:
    pods = get("pods", "-A")["items"]
    apps = {p["metadata"]["name"].rsplit("-", 2)[0] if p["metadata"].get("generateName") else p["metadata"]["name"]
            : p["status"]["phase"] for p in pods}
    for name in ("coredns", "local-path-provisioner", "kube-apiserver-dflash-control-plane", "dflash-dflash-operator"):
        assert apps.get(name) == "Running", (name, apps)


def test_operator_runs_the_built_image() -> None:
    deploy = get("deployment", "-n", "dflash-system", "dflash-dflash-operator")
    assert deploy["status"].get("availableReplicas") == 1
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "dflash-operator:kind"


def dfd_manifest(name: str, namespace: str, cache: str) -> str:
    """The README's DFlashDeployment, one GPU per pod, with the given spec.cache (flow style)."""
    return f"""
apiVersion: serving.dflash.dev/v1alpha1
kind: DFlashDeployment
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  target: {{repo: Qwen/Qwen3-Coder-Next}}
  draft: {{repo: z-lab/Qwen3-Coder-Next-DFlash}}
  tensorParallelSize: 1
  cache: {cache}
"""


@pytest.mark.timeout(240)
def test_dflashdeployment_reaches_its_cache_job(namespace: str) -> None:
    set_fake_gpus(None)
    # kind's default StorageClass (local-path) provisions ReadWriteOnce only; a ReadWriteMany claim stays Pending.
    manifest = dfd_manifest("coder", namespace, "{size: 1Gi, accessMode: ReadWriteOnce}")
    try:
        kubectl("apply", "-f", "-", input=manifest)
        # No node has a GPU: the operator refuses before any download.
        stalled = wait_for(lambda: (c := conditions(get("dfd", "-n", namespace, "coder")).get("Stalled"))
                           and c["reason"] == "NoNodeFits" and c, "NoNodeFits", timeout=120, interval=2)
        assert "nvidia.com/gpu 0 < 1" in stalled["message"]
        assert not get("jobs", "-n", namespace)["items"]

        set_fake_gpus(4)
        jobs = wait_for(lambda: get("jobs", "-n", namespace)["items"], "the cache Job", timeout=120, interval=2)
        assert jobs[0]["metadata"]["name"].startswith("dflash-cache-")
        claim = wait_for(lambda: [p for p in get("pvc", "-n", namespace)["items"] if p["status"]["phase"] == "Bound"],
                         "the cache claim bound", timeout=120, interval=2)
        assert claim[0]["spec"]["storageClassName"] == "standard"
        cache_ready = wait_for(lambda: conditions(get("dfd", "-n", namespace, "coder")).get("CacheReady"),
                               "CacheReady", timeout=120, interval=2)
        assert cache_ready["status"] == "False" and cache_ready["reason"] == "Downloading"
        # The fetch container ran (it can write the claim) and fails only at the hub: the chart's hub.endpoint is
        # the host's bridge address, where no mirror runs during this test (test_serving.py starts one).
        message = wait_for(lambda: "retrying after" in (
            m := conditions(get("dfd", "-n", namespace, "coder"))["CacheReady"]["message"]) and m,
            "the fetch's error in status", timeout=180, interval=2)
        assert "cannot reach the hub" in message
    finally:
        set_fake_gpus(None)


@pytest.mark.timeout(240)
def test_a_claim_kinds_storage_cannot_provision_says_why(namespace: str) -> None:
    # The default accessMode (ReadWriteMany): kind's local-path refuses it, and only in the claim's own events.
    manifest = dfd_manifest("shared", namespace, "{size: 1Gi}")
    set_fake_gpus(4)
    try:
        kubectl("apply", "-f", "-", input=manifest)
        ready = wait_for(lambda: (
            c := conditions(get("dfd", "-n", namespace, "shared")).get("Ready")) and c["reason"] == "ClaimPending"
            and c, "Ready reason ClaimPending", timeout=180, interval=2)
        assert "NodePath only supports ReadWriteOnce" in ready["message"], ready
        assert get("pvc", "-n", namespace)["items"][0]["status"]["phase"] == "Pending"
    finally:
        set_fake_gpus(None)
