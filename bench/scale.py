"""Benchmark: the operator at scale on the real control plane, each figure beside its floor from the same run.

    .venv/bin/python bench/scale.py --count 1000 [--latency-count 50] [--idle-seconds 120]
                                    [--operator-src DIR] [--out bench-results/scale-1000.json]

Measures, with DFlashDeployments that wait for their cache (no node runs the download: the common state while
hundreds of GB download):
- latency: CR created -> its cache PVC and Job exist, p50/p99 over CRs applied one by one; floor: one client's
  create -> the object readable by another request;
- bulk: N CRs applied at once -> every child and every first status (seen by watches the bench opens first);
  floor: a plain client creating the same children (rendered by the operator's own renderer) with the same
  concurrency; and the CPU seconds the operator, kube-apiserver and etcd used in each of the two steps;
- the operator's writes per CR creation by verb and resource (apiserver_request_total deltas; dry runs apart);
- idle: every request the API server serves over a window with nothing changing, by verb and resource, less the
  same window with the operator stopped (the cluster's own controllers): the operator's writes and GETs/LISTs;
- operator RSS with 0 and N CRs.
--operator-src runs another checkout's operator (e.g. a worktree of an older commit) for before/after figures.
Prints a table and writes JSON with the machine, versions and every raw figure. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from dflash_operator.api import DFlashDeployment
from dflash_operator.ownership import MANAGED_BY_LABEL
from dflash_operator.render_cache import CacheConfig, cache_job_name, cache_name, render_cache_job, render_cache_pvc
from dflash_testkit.apicounts import delta, operator_writes, request_counts
from dflash_testkit.controlplane import ControlPlane, build_binaries, default_crds, free_port, http_ok

REPO = Path(__file__).resolve().parents[1]
API = ("serving.dflash.dev", "v1alpha1")
WORKERS = 16
CPU_PROCESSES = ("operator", "kube-apiserver", "etcd")


def dfd_body(index: int) -> dict[str, Any]:
    # A distinct pair per CR, so each one has its own cache (the worst case for children).
    return {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
            "metadata": {"name": f"coder-{index}"},
            "spec": {"target": {"repo": "Qwen/Qwen3-Coder-Next", "revision": f"rev-{index}"},
                     "draft": {"repo": "z-lab/Qwen3-Coder-Next-DFlash"}}}


def cache_names(index: int, namespace: str) -> tuple[str, str]:
    body = dfd_body(index)
    body["metadata"].update(namespace=namespace, uid="x")
    dfd = DFlashDeployment.model_validate(body)
    return cache_name(dfd), cache_job_name(dfd, CacheConfig())


def plain_children(index: int, namespace: str) -> list[dict[str, Any]]:
    body = dfd_body(index)
    body["metadata"].update(namespace=namespace, uid="x")
    dfd = DFlashDeployment.model_validate(body)
    objects = [render_cache_pvc(dfd), render_cache_job(dfd, CacheConfig())]
    for obj in objects:  # no owner: the garbage collector would take children of a DFlashDeployment that is not
        obj["metadata"].pop("ownerReferences", None)
        # Nor the operator's label: its watches would carry the floor's children and their pods to it (before this,
        # the operator indexed them, and they were half of its memory in the figures).
        for labels in (obj["metadata"].get("labels") or {},
                       obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels") or {}):
            labels.pop(MANAGED_BY_LABEL, None)
    # Suspended: the Job controller makes no pods for the floor's Jobs, whose creation (at its client's 20 QPS,
    # minutes for 10,000) would otherwise run on into the operator's step and load the API server it measures.
    objects[1]["spec"]["suspend"] = True
    return objects


class Arrivals:
    """Watches one namespace's cache Jobs, claims and DFlashDeployments from the present resource version on, and
    tells when `count` of each exist (DFlashDeployments: with a first status)."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, count: int, timeout: float) -> None:
        self.count, self.timeout = count, timeout
        self.seen: dict[str, set[str]] = {"jobs": set(), "claims": set(), "statuses": set()}
        self.changed = threading.Condition()
        batch, core = kubernetes.client.BatchV1Api(client), kubernetes.client.CoreV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        sources = {"jobs": (batch.list_namespaced_job, (namespace,), lambda o: True),
                   "claims": (core.list_namespaced_persistent_volume_claim, (namespace,), lambda o: True),
                   "statuses": (custom.list_namespaced_custom_object, (*API, namespace, "dflashdeployments"),
                                lambda o: bool((o.get("status") or {}).get("cache")))}
        self.started = threading.Barrier(len(sources) + 1)  # every watch has listed before the step begins
        for what, (list_fn, list_args, counts) in sources.items():
            threading.Thread(target=self._watch, args=(what, list_fn, list_args, counts), daemon=True).start()
        self.started.wait()

    def _list(self, what: str, list_fn, list_args: tuple, counts) -> str:
        listed = json.loads(list_fn(*list_args, _preload_content=False).data)
        with self.changed:
            self.seen[what].update(o["metadata"]["name"] for o in listed["items"] if counts(o))
            self.changed.notify_all()
        return listed["metadata"]["resourceVersion"]

    def _watch(self, what: str, list_fn, list_args: tuple, counts) -> None:
        # A watch the server ends (its timeout, or a consumer it finds too slow) is opened again from the last
        # version seen; one whose version has expired (410) starts again from a fresh list.
        version = self._list(what, list_fn, list_args, counts)
        self.started.wait()
        while True:
            try:
                for event in kubernetes.watch.Watch().stream(list_fn, *list_args, resource_version=version,
                                                             timeout_seconds=300):
                    obj = event["raw_object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED") and counts(obj):
                        with self.changed:
                            self.seen[what].add(obj["metadata"]["name"])
                            self.changed.notify_all()
            except kubernetes.client.ApiException as error:
                if error.status != 410:
                    raise
                version = self._list(what, list_fn, list_args, counts)
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.MaxRetryError):
                return  # the control plane went away after the step

    def wait(self) -> float:
        """The moment the last of them arrived."""
        deadline = time.monotonic() + self.timeout
        with self.changed:
            # Waits of a second at most, so that Ctrl-C reaches the main thread (a long lock wait defers it).
            while not all(len(s) >= self.count for s in self.seen.values()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"benchmark step timed out: {({k: len(v) for k, v in self.seen.items()})}")
                self.changed.wait(1.0)
        return time.monotonic()


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds each process has used (fields 14 and 15 of /proc/PID/stat)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        used[name] = (int(fields[11]) + int(fields[12])) / ticks
    return used


def delta_seconds(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before[name], 2) for name in after}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def poll(check, timeout: float, interval: float = 0.005) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError("benchmark step timed out")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def exists(fn, *args) -> bool:
    try:
        fn(*args)
        return True
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return False
        raise


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="dflash-scale-"))
    # No nodes: the cache pods stay Pending, as while a download waits; nothing plays a kubelet.
    with ControlPlane(workdir=workdir, bin_dir=build_binaries(), crd_files=default_crds(), gpu_nodes=0) as plane:
        client = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        client.configuration.connection_pool_maxsize = WORKERS * 2
        core, batch = kubernetes.client.CoreV1Api(client), kubernetes.client.BatchV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        for ns in ("lat", "bulk", "floor"):
            core.create_namespace({"metadata": {"name": ns}})

        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "DFLASH_LOG_LEVEL": "WARNING"}
        if args.operator_src:
            env["PYTHONPATH"] = str(Path(args.operator_src).resolve())
        log = (workdir / "operator.log").open("wb")
        operator = subprocess.Popen([sys.executable, "-m", "dflash_operator", "run", "--liveness",
                                     f"http://127.0.0.1:{port}/healthz"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
        try:
            poll(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 120, 0.2)
            time.sleep(5)
            rss_empty = rss_mib(operator.pid)

            # Latency, one by one; floor: create -> readable by another request.
            floor_ms, latency_ms = [], []
            before = request_counts(plane)
            for i in range(args.latency_count):
                start = time.monotonic()
                core.create_namespaced_config_map("lat", {"metadata": {"name": f"probe-{i}"}})
                floor_ms.append(1000 * (poll(lambda i=i: exists(core.read_namespaced_config_map, f"probe-{i}", "lat"),
                                             30) - start))
                claim, job = cache_names(i, "lat")
                start = time.monotonic()
                custom.create_namespaced_custom_object(*API, "lat", "dflashdeployments", dfd_body(i))
                latency_ms.append(1000 * (poll(lambda claim=claim, job=job: exists(
                    batch.read_namespaced_job, job, "lat") and exists(
                    core.read_namespaced_persistent_volume_claim, claim, "lat"), 60) - start))
            # Let the first status of the last ones land, then count writes per creation.
            time.sleep(3)
            per_creation = delta(request_counts(plane), before)
            # The operator's writes only: not the bench's creates, not the Job controller's status updates.
            writes = {k: v for k, v in per_creation.items() if operator_writes({k: v})}
            writes_per_cr = {k: round(v / args.latency_count, 2) for k, v in writes.items()}

            # Floor for bulk: a plain client creates the same children with the same concurrency.
            pids = {"operator": operator.pid, **{c.name: c.process.pid for c in plane.components
                                                 if c.name in ("kube-apiserver", "etcd") and c.process}}
            cpu_before = cpu_seconds(pids)
            start = time.monotonic()
            with ThreadPoolExecutor(WORKERS) as pool:
                list(pool.map(lambda obj: _create(client, obj),
                              [o for i in range(args.count) for o in plain_children(i, "floor")]))
            floor_bulk = time.monotonic() - start
            cpu_floor = delta_seconds(cpu_seconds(pids), cpu_before)

            # Bulk: N CRs at once -> all children and first status, counted from watches opened beforehand (a
            # LIST of N objects of each kind every second would load the API server the operator shares).
            arrivals = Arrivals(client, "bulk", args.count, args.timeout)
            cpu_before = cpu_seconds(pids)
            start = time.monotonic()
            with ThreadPoolExecutor(WORKERS) as pool:
                list(pool.map(lambda i: custom.create_namespaced_custom_object(
                    *API, "bulk", "dflashdeployments", dfd_body(i)), range(args.count)))
            applied = time.monotonic() - start
            bulk = arrivals.wait() - start
            cpu_bulk = delta_seconds(cpu_seconds(pids), cpu_before)
            rss_full = rss_mib(operator.pid)

            # Idle: nothing changes; count every request the API server serves.
            time.sleep(10)
            before = request_counts(plane)
            time.sleep(args.idle_seconds)
            idle = delta(request_counts(plane), before)
            rss_idle = rss_mib(operator.pid)
            alive = operator.poll() is None
        finally:
            operator.terminate()
            operator.wait(30)
        # The same window with the operator stopped: what the cluster's own controllers send (with no node, the
        # Job controller updates the status of every pending cache Job), to subtract.
        time.sleep(10)
        before = request_counts(plane)
        time.sleep(args.idle_seconds)
        baseline = delta(request_counts(plane), before)
    operator_idle = {k: v - baseline.get(k, 0) for k, v in idle.items() if v - baseline.get(k, 0) > 0}
    # What the target counts: every write of the operator's and every GET or LIST. A WATCH is a stream the
    # operator re-opens when the server ends it (settings.watching.server_timeout), not a request for state.
    idle_writes = operator_writes(operator_idle)
    idle_reads = sum(n for k, n in operator_idle.items() if k.split()[0] in ("GET", "LIST"))
    return {
        "count": args.count,
        "operator_src": args.operator_src or str(REPO),
        "machine": machine(),
        "versions": versions(),
        "latency_ms": {"operator_p50": statistics.median(latency_ms), "operator_p99": percentile(latency_ms, 0.99),
                       "floor_p50": statistics.median(floor_ms), "floor_p99": percentile(floor_ms, 0.99),
                       "operator_raw": latency_ms, "floor_raw": floor_ms},
        "writes_per_creation": writes_per_cr,
        "bulk_seconds": {"operator": bulk, "floor": floor_bulk, "ratio": bulk / floor_bulk,
                         "apply_seconds": applied,
                         # Where the time went: CPU seconds each process used during each step (2 cores shared).
                         "cpu_seconds": {"operator_step": cpu_bulk, "floor_step": cpu_floor}},
        "idle_requests": {"window_seconds": args.idle_seconds, "by_verb_resource": operator_idle,
                          "total": sum(operator_idle.values()), "writes": idle_writes, "gets_and_lists": idle_reads,
                          "with_operator": idle,
                          "operator_stopped": baseline},
        "rss_mib": {"empty": rss_empty, "full": rss_full, "after_idle": rss_idle},
        "operator_alive": alive,
        "workdir": str(workdir),
    }


def _create(client: kubernetes.client.ApiClient, obj: dict[str, Any]) -> None:
    namespace = obj["metadata"]["namespace"]
    if obj["kind"] == "Job":
        kubernetes.client.BatchV1Api(client).create_namespaced_job(namespace, copy.deepcopy(obj))
    else:
        kubernetes.client.CoreV1Api(client).create_namespaced_persistent_volume_claim(namespace, copy.deepcopy(obj))


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()}


def versions() -> dict[str, str]:
    from importlib.metadata import version
    return {"kubernetes": "v1.37.2", "kopf": version("kopf"), "kubernetes_client": version("kubernetes")}


def table(result: dict[str, Any]) -> str:
    lat, bulk, rss = result["latency_ms"], result["bulk_seconds"], result["rss_mib"]
    rows = [
        ("CR -> children, p50 / p99 (ms)", f"{lat['operator_p50']:.0f} / {lat['operator_p99']:.0f}",
         f"{lat['floor_p50']:.0f} / {lat['floor_p99']:.0f}"),
        (f"{result['count']} CRs at once -> children + status (s)", f"{bulk['operator']:.1f}",
         f"{bulk['floor']:.1f} (x{bulk['ratio']:.2f})"),
        ("CPU s in that step: operator / apiserver / etcd",
         " / ".join(f"{bulk['cpu_seconds']['operator_step'].get(n, 0):.1f}" for n in CPU_PROCESSES),
         " / ".join(f"{bulk['cpu_seconds']['floor_step'].get(n, 0):.1f}" for n in CPU_PROCESSES)),
        ("writes per CR creation", json.dumps(result["writes_per_creation"]), "children + 2 = 4"),
        (f"operator's writes / GETs+LISTs in {result['idle_requests']['window_seconds']:g} s idle",
         f"{result['idle_requests']['writes']} / {result['idle_requests']['gets_and_lists']}",
         "0"),
        ("operator RSS empty / full / idle (MiB)", f"{rss['empty']:.0f} / {rss['full']:.0f} / {rss['after_idle']:.0f}",
         ""),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'measure':<{width}}  operator  |  floor"]
    lines += [f"{name:<{width}}  {ours}  |  {floor}" for name, ours, floor in rows]
    if result["idle_requests"]["by_verb_resource"]:
        lines.append("requests over the cluster's own in the idle window: "
                     + json.dumps(result["idle_requests"]["by_verb_resource"]))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="CRs applied at once")
    parser.add_argument("--latency-count", type=int, default=50, help="CRs applied one by one for latency")
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the bulk step may take")
    parser.add_argument("--operator-src", help="run the operator package found in this directory instead")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args)
    out = args.out or REPO / "bench-results" / f"scale-{args.count}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(table(result))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
