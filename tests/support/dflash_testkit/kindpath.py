"""The kind path's pieces shared by `scripts/demo.sh --kind` and tests/kind: the settings of the cluster
scripts/kind/cluster.sh made (read from `cluster.sh env`, their one home), kubectl against it, and the hub mirror
with the tiny models on the host's address on the cluster's bridge, where the chart's hub.endpoint points."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from dflash_testkit import REPO
from dflash_testkit.flow import CACHE, Progress, publish_models
from dflash_testkit.hub import Hub, start_hub
from dflash_testkit.waiting import wait_for

CLUSTER_SH = REPO / "scripts" / "kind" / "cluster.sh"
WORKER = "dflash-worker"


@cache
def settings() -> dict[str, str]:
    """The `export NAME=VALUE ...` lines `cluster.sh env` prints (DOCKER_HOST, KUBECONFIG, DFLASH_KIND_HUB, ...)."""
    lines = subprocess.run(["bash", str(CLUSTER_SH), "env"], capture_output=True, text=True, check=True).stdout
    found: dict[str, str] = {}
    for line in lines.splitlines():
        words = shlex.split(line)
        if words and words[0] == "export":
            found.update(word.partition("=")[::2] for word in words[1:] if "=" in word)
    return found


def kubectl_argv() -> list[str]:
    return ["kubectl", f"--kubeconfig={settings()['KUBECONFIG']}"]


def kubectl(*args: str, input: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "KUBECACHEDIR": settings()["KUBECACHEDIR"]}
    return subprocess.run([*kubectl_argv(), *args], input=input, text=True, capture_output=True, check=check,
                          env=env, timeout=timeout)


def helm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The helm scripts/setup.sh built (cluster.sh uses the same), against the kind cluster."""
    binary = sorted(CACHE.glob("bin/k8s-*/helm"))[0]
    env = {**os.environ, "KUBECONFIG": settings()["KUBECONFIG"]}
    return subprocess.run([str(binary), *args], text=True, capture_output=True, check=True, env=env,
                          timeout=timeout)


def get(*args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def set_fake_gpus(count: int | None) -> None:
    """Advertises (or withdraws) nvidia.com/gpu on the worker the documented way for an extended resource (a node
    status patch: no device plugin runs, as no GPU exists), then waits until allocatable, which is what the operator's
    node check reads, shows it. The patch sets allocatable too, to the value the kubelet derives from capacity (no
    reservation applies to an extended resource): with capacity alone it waited for the kubelet's next status update,
    up to 10 s (seen: the demo's patch step took 10 s, then 2 s)."""
    value = "null" if count is None else f'"{count}"'
    gpus = f'{{"nvidia.com/gpu":{value}}}'
    kubectl("patch", "node", WORKER, "--subresource=status", "--type=merge",
            "-p", f'{{"status":{{"capacity":{gpus},"allocatable":{gpus}}}}}')
    want = None if count is None else str(count)
    wait_for(lambda: get("node", WORKER)["status"]["allocatable"].get("nvidia.com/gpu") == want,
             f"allocatable nvidia.com/gpu {want}", timeout=60, interval=1)


def vllm_image() -> str:
    return settings()["DFLASH_KIND_VLLM_IMAGE"]


@dataclass
class KindHub:
    hub: Hub
    commits: dict[str, str]


@contextmanager
def kind_hub(workdir: Path, progress: Progress = lambda _: None) -> Iterator[KindHub]:
    """olah at the chart's hub.endpoint (the host's address on the cluster's bridge), holding the tiny models."""
    endpoint = urllib.parse.urlsplit(settings()["DFLASH_KIND_HUB"])
    assert endpoint.hostname and endpoint.port, endpoint
    workdir.mkdir(parents=True, exist_ok=True)
    hub = start_hub(workdir, host=endpoint.hostname, port=endpoint.port)
    try:
        started = time.monotonic()
        commits = publish_models(hub, workdir, progress)
        progress(f"hub mirror at {hub.endpoint} holds {', '.join(sorted(commits))} "
                 f"({time.monotonic() - started:.0f} s)")
        yield KindHub(hub, commits)
    finally:
        hub.stop()
