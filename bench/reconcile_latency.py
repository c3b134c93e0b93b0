"""Benchmark: how fast the operator turns DFlashDeployments into their objects, on the real control plane.

Measures, per DFlashDeployment, apply -> cache Job exists (first reconcile) and cache done -> GPU Deployment exists
(the gated reconcile). The peer, measured in the same run on the same API server, is the floor no controller can
beat: one client's create -> the object readable by another request. Prints a table and writes JSON.

    .venv/bin/python bench/reconcile_latency.py [--count 20] [--out bench-results/reconcile_latency.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kubernetes

from dflash_testkit.cachejob import bind_cache_volume, fetch_result
from dflash_testkit.controlplane import (
    ControlPlane,
    build_binaries,
    default_crds,
    free_port,
    http_ok,
)

REPO = Path(__file__).resolve().parents[1]


def _poll(check, timeout: float = 120.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError("benchmark step timed out")


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"n": len(ordered), "median_ms": 1000 * statistics.median(ordered),
            "p90_ms": 1000 * ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], "max_ms": 1000 * ordered[-1]}


def _finish(core: kubernetes.client.CoreV1Api, namespace: str, job_name: str) -> None:
    pod = None
    while pod is None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items
        pod = next((p for p in pods if p.status.phase == "Running"), None)
        time.sleep(0.05)
    started = pod.status.container_statuses[0].state.running.started_at.isoformat().replace("+00:00", "Z")
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {"phase": "Succeeded",
        "containerStatuses": [{"name": "fetch", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 0, "message": fetch_result().to_message(),
                                                        "startedAt": started, "finishedAt": started}}}]}})


def run(count: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="dflash-bench-"))
    with ControlPlane(workdir=workdir, bin_dir=build_binaries(), crd_files=default_crds()) as plane:
        client = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        core, batch, apps = (kubernetes.client.CoreV1Api(client), kubernetes.client.BatchV1Api(client),
                             kubernetes.client.AppsV1Api(client))
        custom = kubernetes.client.CustomObjectsApi(client)
        port = free_port()
        operator = subprocess.Popen(
            [sys.executable, "-m", "dflash_operator", "run", "--liveness", f"http://127.0.0.1:{port}/healthz"],
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig), "DFLASH_RESYNC_SECONDS": "300"},
            stdout=(workdir / "operator.log").open("wb"), stderr=subprocess.STDOUT)
        try:
            _poll(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60)
            floor, first, gated = [], [], []
            for i in range(count):
                namespace = f"bench-{i}"
                core.create_namespace({"metadata": {"name": namespace}})
                # Peer: create -> readable, the API server's own round trip.
                start = time.monotonic()
                core.create_namespaced_config_map(namespace, {"metadata": {"name": "probe"}})
                floor.append(_poll(lambda ns=namespace: core.list_namespaced_config_map(ns).items) - start)

                body = {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
                        "metadata": {"name": "coder"},
                        "spec": {"target": {"repo": "Qwen/Qwen3-Coder-Next"},
                                 "draft": {"repo": "z-lab/Qwen3-Coder-Next-DFlash"}}}
                start = time.monotonic()
                custom.create_namespaced_custom_object("serving.dflash.dev", "v1alpha1", namespace,
                                                       "dflashdeployments", body)
                first.append(_poll(lambda ns=namespace: batch.list_namespaced_job(ns).items) - start)
                job = batch.list_namespaced_job(namespace).items[0].metadata.name
                bind_cache_volume(client, namespace, job)
                _finish(core, namespace, job)
                start = time.monotonic()
                _poll(lambda ns=namespace, job=job: any(
                    c.type == "Complete" and c.status == "True"
                    for c in batch.read_namespaced_job(job, ns).status.conditions or []))
                complete = time.monotonic()
                gated.append(_poll(lambda ns=namespace: apps.list_namespaced_deployment(ns).items) - complete)
        finally:
            operator.terminate()
            operator.wait(20)
    return {"count": count, "peer_create_to_readable": _summary(floor),
            "operator_apply_to_cache_job": _summary(first), "operator_cache_complete_to_deployment": _summary(gated)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "reconcile_latency.json")
    args = parser.parse_args()
    result = run(args.count)
    peer = result["peer_create_to_readable"]["median_ms"]
    print(f"{'measure':40} {'n':>4} {'median ms':>10} {'p90 ms':>8} {'max ms':>8} {'x peer':>7}")
    for name in ("peer_create_to_readable", "operator_apply_to_cache_job", "operator_cache_complete_to_deployment"):
        row = result[name]
        print(f"{name:40} {row['n']:>4} {row['median_ms']:>10.1f} {row['p90_ms']:>8.1f} {row['max_ms']:>8.1f} "
              f"{row['median_ms'] / peer:>7.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
