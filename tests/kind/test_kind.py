"""A real kind cluster made by scripts/kind/cluster.sh: nodes, the operator installed by helm from the image
`docker build` made, and a DFlashDeployment carried to its cache Job (no GPU exists: a node advertises fake
nvidia.com/gpu capacity, and the hub is unreachable from the cluster, so the download retries)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.kind
WORKER = "dflash-worker"
CACHE = Path(os.environ.get("DFLASH_CACHE", Path.home() / ".cache" / "dflash-operator"))
KUBECONFIG = os.environ.get("KUBECONFIG") or str(CACHE / "kind" / "kubeconfig")


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": KUBECONFIG, "KUBECACHEDIR": str(CACHE / "kind" / "kubecache")}
    return subprocess.run(["kubectl", *args], input=input, text=True, capture_output=True, check=check, env=env,
                          timeout=60)


def get(*args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


@pytest.fixture(scope="module", autouse=True)
def kind_cluster() -> None:
    if not Path(KUBECONFIG).exists() or kubectl("get", "--raw", "/readyz", check=False).returncode != 0:
        pytest.fail(f"no kind cluster at {KUBECONFIG}: run `bash scripts/kind/cluster.sh up`", pytrace=False)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


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


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"t-kind-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def set_fake_gpus(count: int | None) -> None:
    """Advertises (or withdraws) an extended resource the documented way, then waits for the kubelet to carry it
    into allocatable, which is what the operator's node check reads."""
    value = "null" if count is None else f'"{count}"'
    kubectl("patch", "node", WORKER, "--subresource=status", "--type=merge",
            "-p", f'{{"status":{{"capacity":{{"nvidia.com/gpu":{value}}}}}}}')
    want = None if count is None else str(count)
    wait_for(f"allocatable nvidia.com/gpu {want}", lambda: get("node", WORKER)["status"]["allocatable"].get(
        "nvidia.com/gpu") == want, timeout=60)


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
        stalled = wait_for("NoNodeFits", lambda: (c := conditions(get("dfd", "-n", namespace, "coder")).get("Stalled"))
                           and c["reason"] == "NoNodeFits" and c)
        assert "nvidia.com/gpu 0 < 1" in stalled["message"]
        assert not get("jobs", "-n", namespace)["items"]

        set_fake_gpus(4)
        jobs = wait_for("the cache Job", lambda: get("jobs", "-n", namespace)["items"])
        assert jobs[0]["metadata"]["name"].startswith("dflash-cache-")
        claim = wait_for("the cache claim bound", lambda: [p for p in get("pvc", "-n", namespace)["items"]
                                                          if p["status"]["phase"] == "Bound"])
        assert claim[0]["spec"]["storageClassName"] == "standard"
        cache_ready = wait_for("CacheReady", lambda: conditions(get("dfd", "-n", namespace, "coder")).get("CacheReady"))
        assert cache_ready["status"] == "False" and cache_ready["reason"] == "Downloading"
        # The fetch container ran (it can write the claim) and fails only at the hub, which nothing here can reach.
        message = wait_for("the fetch's error in status", lambda: "retrying after" in (
            m := conditions(get("dfd", "-n", namespace, "coder"))["CacheReady"]["message"]) and m, timeout=180)
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
        ready = wait_for("Ready reason ClaimPending", lambda: (
            c := conditions(get("dfd", "-n", namespace, "shared")).get("Ready")) and c["reason"] == "ClaimPending"
            and c, timeout=180)
        assert "NodePath only supports ReadWriteOnce" in ready["message"], ready
        assert get("pvc", "-n", namespace)["items"][0]["status"]["phase"] == "Pending"
    finally:
        set_fake_gpus(None)
