"""Benchmark: the operator at scale on the real control plane, each figure beside its floor from the same run.

    .venv/bin/python bench/scale.py --count 1000 [--latency-count 50] [--gate-count 20] [--idle-seconds 120]
                                    [--operator-src DIR] [--out bench-results/scale-1000.json]

Measures, with DFlashDeployments that wait for their cache (no node runs the download: the common state while
hundreds of GB download):
- gate: CR by CR, its cache Job complete (one kwok node runs the cache pod, which the bench ends as the kubelet
  would) -> the serving Deployment exists; floor: a plain client's create of the same Deployment -> seen. The node
  is removed after this step;
- latency: CR created -> its cache PVC and Job exist, p50/p99 over CRs applied one by one; floor: a plain client
  creating the same claim, then the same Job; all seen by watches the bench opens first;
- bulk: N CRs applied at once -> every child and every first status (seen by watches the bench opens first);
  floor: a plain client creating the same children (rendered by the operator's own renderer) with the same
  concurrency; a second floor: a plain client sending every request of that step per CR (the CR's create, under a
  twin CRD the operator does not watch, the dry run, both children, the first status); and the CPU seconds the
  operator, kube-apiserver and etcd used in each step;
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
import yaml

from dflash_operator.api import DFlashDeployment
from dflash_operator.kube.client import Kube
from dflash_operator.kube.ownership import MANAGED_BY_LABEL
from dflash_operator.render.cache import CacheConfig, cache_job_name, cache_name, render_cache_job, render_cache_pvc
from dflash_operator.render.serving import CacheFacts, RenderConfig, render_deployment
from dflash_testkit.apicounts import delta, operator_writes, request_counts
from dflash_testkit.cachejob import fetch_result, finish_cache_job
from dflash_testkit.controlplane import ControlPlane, build_binaries, default_crds, free_port, http_ok

REPO = Path(__file__).resolve().parents[1]
API = ("serving.dflash.dev", "v1alpha1")
WORKERS = 16
CPU_PROCESSES = ("operator", "kube-apiserver", "etcd")
# The DFlashDeployment CRD again under a group the operator does not watch (see twin_crd).
TWIN = ("floor.dflash.dev", "v1alpha1")


def dfd_body(index: int) -> dict[str, Any]:
    # A distinct pair per CR, so each one has its own cache (the worst case for children).
    return {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
            "metadata": {"name": f"coder-{index}"},
            "spec": {"target": {"repo": "Qwen/Qwen3-Coder-Next", "revision": f"rev-{index}"},
                     "draft": {"repo": "z-lab/Qwen3-Coder-Next-DFlash"}}}


def dfd_model(index: int, namespace: str) -> DFlashDeployment:
    """The `index`-th CR as the operator parses it (placed in `namespace`; the uid only fills the field)."""
    body = dfd_body(index)
    body["metadata"].update(namespace=namespace, uid="x")
    return DFlashDeployment.model_validate(body)


def cache_names(index: int, namespace: str) -> tuple[str, str]:
    dfd = dfd_model(index, namespace)
    return cache_name(dfd), cache_job_name(dfd, CacheConfig())


def plain_deployment(index: int, namespace: str) -> dict[str, Any]:
    """The serving Deployment the operator would dry-run for the `index`-th CR, without the owner it lacks here."""
    dfd = dfd_model(index, namespace)
    deployment = render_deployment(dfd, RenderConfig(), CacheFacts(claim_name=cache_name(dfd)))
    deployment["metadata"].pop("ownerReferences", None)
    return deployment


def plain_children(index: int, namespace: str) -> list[dict[str, Any]]:
    dfd = dfd_model(index, namespace)
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


def twin_crd(workdir: Path) -> Path:
    """The DFlashDeployment CRD under another group: its objects cost the API server what DFlashDeployments do (the
    same schema and rules) and never reach the operator, for the floor that sends the operator's own requests."""
    crd = yaml.safe_load(next(p for p in default_crds() if "dflashdeployments" in p.name).read_text())
    crd["metadata"]["name"] = f"dflashdeployments.{TWIN[0]}"
    crd["spec"]["group"] = TWIN[0]
    for name in ("shortNames", "categories"):
        crd["spec"]["names"].pop(name, None)
    path = workdir / "twin-crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    return path


def same_writes(client: kubernetes.client.ApiClient, index: int, namespace: str, status: dict[str, Any]) -> None:
    """The requests the operator's first pass sends for one new CR, from a plain client, after the CR's create: the
    serving Deployment's dry run, the claim, the Job (suspended, as in the children floor) and the first status."""
    body = dfd_body(index)
    body["apiVersion"] = "/".join(TWIN)
    custom = kubernetes.client.CustomObjectsApi(client)
    custom.create_namespaced_custom_object(*TWIN, namespace, "dflashdeployments", body)
    kube = Kube(client)
    kube.create(plain_deployment(index, namespace), "bench", dry_run=True)
    for obj in plain_children(index, namespace):
        kube.create(obj, "bench")
    custom.patch_namespaced_custom_object_status(*TWIN, namespace, "dflashdeployments", body["metadata"]["name"],
                                                 {"status": status})


class FirstSeen:
    """One watch of one kind in one namespace, from a list on: the moment each object was first seen to satisfy
    `counts`. A watch the server ends (its timeout, or a consumer it finds too slow) is opened again from the last
    version seen; one whose version has expired (410) starts again from a fresh list."""

    def __init__(self, list_fn, list_args: tuple, counts=lambda o: True) -> None:
        self.list_fn, self.list_args, self.counts = list_fn, list_args, counts
        self.at: dict[str, float] = {}  # name -> time.monotonic() when first seen counting
        self.changed = threading.Condition()
        self._listed = threading.Event()
        self.closed = False
        threading.Thread(target=self._watch, daemon=True).start()
        self._listed.wait()

    def _record(self, obj: dict[str, Any]) -> None:
        if self.counts(obj):
            with self.changed:
                self.at.setdefault(obj["metadata"]["name"], time.monotonic())
                self.changed.notify_all()

    def _list(self) -> str:
        listed = json.loads(self.list_fn(*self.list_args, _preload_content=False).data)
        for obj in listed["items"]:
            self._record(obj)
        return listed["metadata"]["resourceVersion"]

    def _watch(self) -> None:
        version = self._list()
        self._listed.set()
        while not self.closed:
            try:
                for event in kubernetes.watch.Watch().stream(self.list_fn, *self.list_args, resource_version=version,
                                                             timeout_seconds=300):
                    obj = event["raw_object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(obj)
            except kubernetes.client.ApiException as error:
                if error.status != 410:
                    raise
                if not self.closed:
                    version = self._list()
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.MaxRetryError):
                return  # the control plane went away after the step

    def close(self) -> None:
        """No request from here on: the open stream lapses with its timeout, and nothing re-watches or re-lists (the
        idle window counts every request the API server serves)."""
        self.closed = True

    def when(self, name: str, timeout: float) -> float:
        """The moment `name` was first seen counting; waits for it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while name not in self.at:  # waits of a second at most, so that Ctrl-C reaches a waiting bench
                if time.monotonic() > deadline:
                    raise TimeoutError(f"benchmark step timed out waiting for {name}")
                self.changed.wait(1.0)
            return self.at[name]


class Arrivals:
    """Watches one namespace's cache Jobs, claims and DFlashDeployments from the present resource version on, and
    tells when `count` of each exist (DFlashDeployments: with a first status)."""

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, count: int, timeout: float) -> None:
        self.count, self.timeout = count, timeout
        batch, core = kubernetes.client.BatchV1Api(client), kubernetes.client.CoreV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        # Every watch has listed before the step begins.
        self.watches = [FirstSeen(batch.list_namespaced_job, (namespace,)),
                        FirstSeen(core.list_namespaced_persistent_volume_claim, (namespace,)),
                        FirstSeen(custom.list_namespaced_custom_object, (*API, namespace, "dflashdeployments"),
                                  lambda o: bool((o.get("status") or {}).get("cache")))]

    def wait(self) -> float:
        """The moment the last of them arrived."""
        deadline = time.monotonic() + self.timeout
        for watch in self.watches:
            with watch.changed:
                while len(watch.at) < self.count:
                    if time.monotonic() > deadline:
                        raise TimeoutError("benchmark step timed out: "
                                           f"{[len(w.at) for w in self.watches]} of {self.count}")
                    watch.changed.wait(1.0)
        return max(max(w.at.values()) for w in self.watches)


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
    # One kwok node, for the gate step only; removed before the rest, whose cache pods stay Pending as while a
    # download waits (nothing plays a kubelet for them).
    with ControlPlane(workdir=workdir, bin_dir=build_binaries(), crd_files=[*default_crds(), twin_crd(workdir)],
                      gpu_nodes=1) as plane:
        client = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        client.configuration.connection_pool_maxsize = WORKERS * 2
        core, custom = kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
        for ns in ("gate", "lat", "lat-floor", "bulk", "floor", "floor-writes"):
            core.create_namespace({"metadata": {"name": ns}})

        port = free_port()
        # At the operator's default log level, as users run it: the log's lines per CR are one of the figures.
        env = {k: v for k, v in os.environ.items() if k != "DFLASH_LOG_LEVEL"} | {"KUBECONFIG": str(plane.kubeconfig)}
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
            gate_ms, gate_floor_ms, gate_watches = gate_latency(client, args.gate_count, args.timeout)
            _remove_the_node(core)  # from here on, the node is cordoned: cache pods stay Pending

            # Latency, one by one: CR created -> its claim and Job seen by watches opened beforehand (the bench
            # polling with GETs would load the API server the operator's requests wait for).
            lat = Arrivals(client, "lat", args.latency_count, args.timeout)
            latency_ms = []
            before = request_counts(plane)
            for i in range(args.latency_count):
                claim, job = cache_names(i, "lat")
                start = time.monotonic()
                custom.create_namespaced_custom_object(*API, "lat", "dflashdeployments", dfd_body(i))
                latency_ms.append(1000 * (_both_seen(lat, claim, job) - start))
            # Let the first status of the last ones land, then count writes per creation.
            time.sleep(3)
            per_creation = delta(request_counts(plane), before)
            # The operator's writes only: not the bench's creates, not the Job controller's status updates. (Before
            # the floor below, whose creates of the same kinds would count.)
            writes = {k: v for k, v in per_creation.items() if operator_writes({k: v})}
            writes_per_cr = {k: round(v / args.latency_count, 2) for k, v in writes.items()}
            # Its floor: a plain client creates the same claim, then the same Job -> both seen by the same watches.
            lat_floor = Arrivals(client, "lat-floor", args.latency_count, args.timeout)
            floor_ms = []
            for i in range(args.latency_count):
                claim, job = cache_names(i, "lat-floor")
                start = time.monotonic()
                for obj in plain_children(i, "lat-floor"):
                    _create(client, obj)
                floor_ms.append(1000 * (_both_seen(lat_floor, claim, job) - start))

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
            # A second floor: a plain client sending, per CR, every request the bulk step costs the operator and
            # the user (the CR's create, the dry run, both children, the first status) with the same concurrency.
            first_status = custom.get_namespaced_custom_object(*API, "lat", "dflashdeployments", "coder-0")["status"]
            cpu_before = cpu_seconds(pids)
            start = time.monotonic()
            with ThreadPoolExecutor(WORKERS) as pool:
                list(pool.map(lambda i: same_writes(client, i, "floor-writes", first_status), range(args.count)))
            floor_writes = time.monotonic() - start
            cpu_floor_writes = delta_seconds(cpu_seconds(pids), cpu_before)

            # Bulk: N CRs at once -> all children and first status, counted from watches opened beforehand (a
            # LIST of N objects of each kind every second would load the API server the operator shares).
            arrivals = Arrivals(client, "bulk", args.count, args.timeout)
            log_lines_before = _lines(workdir / "operator.log")
            cpu_before = cpu_seconds(pids)
            start = time.monotonic()
            with ThreadPoolExecutor(WORKERS) as pool:
                list(pool.map(lambda i: custom.create_namespaced_custom_object(
                    *API, "bulk", "dflashdeployments", dfd_body(i)), range(args.count)))
            applied = time.monotonic() - start
            bulk = arrivals.wait() - start
            cpu_bulk = delta_seconds(cpu_seconds(pids), cpu_before)
            rss_full = rss_mib(operator.pid)
            bulk_log_lines = _lines(workdir / "operator.log") - log_lines_before

            # Idle: nothing changes; count every request the API server serves (the bench's own watches closed).
            for watch in [*lat.watches, *lat_floor.watches, *arrivals.watches, *gate_watches]:
                watch.close()
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
        "gate_latency_ms": {"operator_p50": statistics.median(gate_ms), "operator_p99": percentile(gate_ms, 0.99),
                            "floor_p50": statistics.median(gate_floor_ms),
                            "floor_p99": percentile(gate_floor_ms, 0.99),
                            "operator_raw": gate_ms, "floor_raw": gate_floor_ms},
        "writes_per_creation": writes_per_cr,
        "bulk_seconds": {"operator": bulk, "floor": floor_bulk, "ratio": bulk / floor_bulk,
                         "floor_same_requests": floor_writes, "ratio_same_requests": bulk / floor_writes,
                         "cpu_seconds_same_requests": cpu_floor_writes,
                         "apply_seconds": applied,
                         # Where the time went: CPU seconds each process used during each step (2 cores shared).
                         "cpu_seconds": {"operator_step": cpu_bulk, "floor_step": cpu_floor}},
        "idle_requests": {"window_seconds": args.idle_seconds, "by_verb_resource": operator_idle,
                          "total": sum(operator_idle.values()), "writes": idle_writes, "gets_and_lists": idle_reads,
                          "with_operator": idle,
                          "operator_stopped": baseline},
        "rss_mib": {"empty": rss_empty, "full": rss_full, "after_idle": rss_idle},
        "log_lines": {"bulk_step": bulk_log_lines, "per_cr": round(bulk_log_lines / args.count, 2)},
        "operator_alive": alive,
        "workdir": str(workdir),
    }


def gate_latency(client: kubernetes.client.ApiClient, count: int, timeout: float
                 ) -> tuple[list[float], list[float], list[FirstSeen]]:
    """The gated pass, CR by CR: its cache Job complete (the pod ended as the kubelet would, with a verified pair)
    -> the serving Deployment exists, both as the watches see them. Floor: a plain client's create of the same
    Deployment -> seen by the same watch."""
    batch, apps = kubernetes.client.BatchV1Api(client), kubernetes.client.AppsV1Api(client)
    complete = FirstSeen(batch.list_namespaced_job, ("gate",), lambda o: any(
        c.get("type") == "Complete" and c.get("status") == "True" for c in (o.get("status") or {}).get("conditions")
        or []))
    deployments = FirstSeen(apps.list_namespaced_deployment, ("gate",))
    gated: list[float] = []
    floor: list[float] = []
    for i in range(count):
        body = dfd_body(i)
        kubernetes.client.CustomObjectsApi(client).create_namespaced_custom_object(*API, "gate", "dflashdeployments",
                                                                                   body)
        _, job = cache_names(i, "gate")
        finish_cache_job(client, "gate", fetch_result(), job_name=job)
        done = complete.when(job, timeout)
        gated.append(1000 * (deployments.when(body["metadata"]["name"], timeout) - done))
        # The same Deployment under another name, with labels of its own (no selector shared with the operator's).
        spec = client.sanitize_for_serialization(apps.read_namespaced_deployment(body["metadata"]["name"], "gate").spec)
        spec["selector"] = {"matchLabels": {"floor": str(i)}}
        spec["template"]["metadata"]["labels"] = {"floor": str(i)}
        start = time.monotonic()
        apps.create_namespaced_deployment("gate", {"apiVersion": "apps/v1", "kind": "Deployment",
                                                   "metadata": {"name": f"floor-{i}"}, "spec": spec})
        floor.append(1000 * (deployments.when(f"floor-{i}", timeout) - start))
    return gated, floor, [complete, deployments]


def _remove_the_node(core: kubernetes.client.CoreV1Api) -> None:
    """The gate step's namespace, then the node it ran on is cordoned: later cache pods are not scheduled. (Cordoned,
    not deleted: with no node at all the operator would refuse every spec before the download, NoNodeFits.)"""
    core.delete_namespace("gate")
    poll(lambda: not exists(core.read_namespace, "gate"), 300, 0.5)
    for node in core.list_node().items:
        core.patch_node(node.metadata.name, {"spec": {"unschedulable": True}})


def _lines(path: Path) -> int:
    with path.open("rb") as text:
        return sum(1 for _ in text)


def _both_seen(arrivals: Arrivals, claim: str, job: str, timeout: float = 60) -> float:
    jobs, claims = arrivals.watches[0], arrivals.watches[1]
    return max(jobs.when(job, timeout), claims.when(claim, timeout))


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
    lat, bulk, rss, gate = result["latency_ms"], result["bulk_seconds"], result["rss_mib"], result["gate_latency_ms"]
    rows = [
        ("CR -> children, p50 / p99 (ms)", f"{lat['operator_p50']:.0f} / {lat['operator_p99']:.0f}",
         f"{lat['floor_p50']:.0f} / {lat['floor_p99']:.0f}"),
        ("cache complete -> Deployment, p50 / p99 (ms)", f"{gate['operator_p50']:.0f} / {gate['operator_p99']:.0f}",
         f"{gate['floor_p50']:.0f} / {gate['floor_p99']:.0f}"),
        (f"{result['count']} CRs at once -> children + status (s)", f"{bulk['operator']:.1f}",
         f"{bulk['floor']:.1f} (x{bulk['ratio']:.2f})"),
        ("  the same requests from a plain client (s)", f"{bulk['operator']:.1f}",
         f"{bulk['floor_same_requests']:.1f} (x{bulk['ratio_same_requests']:.2f})"),
        ("CPU s in that step: operator / apiserver / etcd",
         " / ".join(f"{bulk['cpu_seconds']['operator_step'].get(n, 0):.1f}" for n in CPU_PROCESSES),
         " / ".join(f"{bulk['cpu_seconds']['floor_step'].get(n, 0):.1f}" for n in CPU_PROCESSES)
         + " (same requests: " + " / ".join(f"{bulk['cpu_seconds_same_requests'].get(n, 0):.1f}"
                                           for n in CPU_PROCESSES) + ")"),
        ("writes per CR creation", json.dumps(result["writes_per_creation"]), "children + 2 = 4"),
        (f"operator's writes / GETs+LISTs in {result['idle_requests']['window_seconds']:g} s idle",
         f"{result['idle_requests']['writes']} / {result['idle_requests']['gets_and_lists']}",
         "0"),
        ("operator log lines per CR in the bulk step", f"{result['log_lines']['per_cr']:g}", ""),
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
    parser.add_argument("--gate-count", type=int, default=20,
                        help="CRs taken one by one through a finished cache to their serving Deployment")
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
