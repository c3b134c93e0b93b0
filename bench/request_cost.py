"""Benchmark: the API server's CPU per request of each kind the operator (and the bench's floor) sends.

    .venv/bin/python bench/request_cost.py [--count 400] [--out bench-results/request-cost.json]

On the real control plane, `count` requests of one kind at a time from 8 threads, each on its own object: a
DFlashDeployment create (what a user's apply costs), a cache Job and claim as a POST and as a server-side apply
that creates, the serving Deployment's pre-download dry run as an apply and as a create, and a first status patch.
Reports milliseconds of kube-apiserver and etcd CPU per request (/proc/PID/stat) and the step's wall time. It is
how the operator's choice of verb per request was made (reconcile.CREATED_ONCE, Kube.create); the figures move
with the machine, so compare rows of one run. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
from scale import API, cpu_seconds, dfd_body, machine, plain_children, plain_deployment, versions  # beside this

from dflash_operator.kube.client import Kube
from dflash_testkit.controlplane import ControlPlane, build_binaries, default_crds

REPO = Path(__file__).resolve().parents[1]
THREADS = 8
MANAGER = "request-cost"
FIRST_STATUS = {  # the shape of a waiting DFlashDeployment's first status, as the operator writes it
    "observedGeneration": 1, "selector": "app.kubernetes.io/instance=coder",
    "cache": {"name": "dflash-cache-x", "phase": "Downloading", "message": "waiting for the download to start"},
    "conditions": [{"type": t, "status": s, "reason": "CacheNotReady", "message": "the cache is downloading",
                    "lastTransitionTime": "2026-12-03T00:00:00Z", "observedGeneration": 1}
                   for t, s in (("Ready", "False"), ("CacheReady", "False"), ("Progressing", "True"),
                                ("Stalled", "False"))]}


def _claim(index: int, namespace: str) -> dict[str, Any]:
    return plain_children(index, namespace)[0]  # the scale bench's floor objects: unowned, unlabelled


def _job(index: int, namespace: str) -> dict[str, Any]:
    return plain_children(index, namespace)[1]  # suspended: the Job controller's pods are not this request's cost


def run(count: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="dflash-request-cost-"))
    with ControlPlane(workdir=workdir, bin_dir=build_binaries(), crd_files=default_crds(), gpu_nodes=0) as plane:
        client = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        client.configuration.connection_pool_maxsize = THREADS * 2
        core, custom = kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
        kube = Kube(client)
        pids = {c.name: c.process.pid for c in plane.components
                if c.name in ("kube-apiserver", "etcd") and c.process}

        def step(name: str, request: Callable[[int, str], Any], namespace: str | None = None) -> dict[str, Any]:
            namespace = namespace or name
            if namespace == name:
                core.create_namespace({"metadata": {"name": namespace}})
            before, start = cpu_seconds(pids), time.monotonic()
            with ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(lambda i: request(i, namespace), range(count)))
            wall, after = time.monotonic() - start, cpu_seconds(pids)
            row = {"wall_seconds": round(wall, 2),
                   **{f"{p}_cpu_ms": round(1000 * (after[p] - before[p]) / count, 2) for p in pids}}
            print(f"{name:<32} {row}", flush=True)
            return row

        rows = {
            "dflashdeployment create": step("crs", lambda i, ns: custom.create_namespaced_custom_object(
                *API, ns, "dflashdeployments", dfd_body(i))),
            "job create (POST)": step("job-post", lambda i, ns: kube.create(_job(i, ns), MANAGER)),
            "job apply (SSA, creates)": step("job-apply", lambda i, ns: kube.apply(_job(i, ns), MANAGER)),
            "claim create (POST)": step("claim-post", lambda i, ns: kube.create(_claim(i, ns), MANAGER)),
            "claim apply (SSA, creates)": step("claim-apply", lambda i, ns: kube.apply(_claim(i, ns), MANAGER)),
            "deployment dry-run create": step("dry-post", lambda i, ns: kube.create(
                plain_deployment(i, ns), MANAGER, dry_run=True)),
            "deployment dry-run apply": step("dry-apply", lambda i, ns: kube.apply(
                plain_deployment(i, ns), MANAGER, dry_run=True)),
            "first status patch": step("status", lambda i, ns: kube.patch_dfd_status(
                ns, f"coder-{i}", FIRST_STATUS), namespace="crs"),
        }
    return {"count": count, "threads": THREADS, "machine": machine(), "versions": versions(), "per_request": rows,
            "workdir": str(workdir)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=400, help="requests of each kind")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "request-cost.json")
    args = parser.parse_args()
    result = run(args.count)
    print(f"\n{'request':<28} {'apiserver ms':>12} {'etcd ms':>8} {'wall s':>7}")
    for name, row in result["per_request"].items():
        print(f"{name:<28} {row['kube-apiserver_cpu_ms']:>12.2f} {row['etcd_cpu_ms']:>8.2f} "
              f"{row['wall_seconds']:>7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
