"""The speculation autopilot end to end on the real node, with real vLLM and a real Prometheus.

A DFlashDeployment with spec.speculation.onLowAcceptance Fallback serves the tiny target with a random draft (its
proposals are almost never accepted; the readiness floor is 0, so the pod serves). The operator's window sees the
acceptance under the floor -> SpeculationHealthy=False and the chart's DFlashAcceptanceBelowFloor alert fires in a
Prometheus that scrapes the operator and the pod; after fallbackAfterSeconds the pods roll to the target alone with
no moment without a ready pod, and DFlashSpeculationFallback fires; the documented annotation brings the draft back.
Every dashboard query is run against the same Prometheus while vLLM speculates. The timeline is written to
$DFLASH_CACHE/logs/fallback-timeline.json.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import kubernetes
import pytest

from dflash_testkit.dfd import SELECTOR, get_dfd
from dflash_testkit.flow import CACHE, RANDOM_DRAFT, Stack, conditions, dfd
from dflash_testkit.monitoring import RELEASE, dashboard, dashboard_queries, render, rule_file
from dflash_testkit.prometheus import Prometheus, running_prometheus
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.node

NAME = "autopilot"
SERVING_TIMEOUT = 900
SPECULATION = {"minAcceptanceRate": 0.5, "windowSeconds": 60, "onLowAcceptance": "Fallback",
               "fallbackAfterSeconds": 45}
# The chart's rules, with `for` shortened to this test's time scale (the durations themselves: promtool's cases).
SHORT_FOR = [f"metrics.prometheusRule.for.{k}=0s" for k in ("acceptanceBelowFloor", "speculationInactive")]


class Timeline:
    """Polls the DFlashDeployment, its Deployment and its pods every second from a thread; keeps each change."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.start = time.monotonic()
        self.entries: list[dict] = []
        self.min_ready_after_fallback: int | None = None
        self._last: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def mark(self, what: str) -> None:
        self.entries.append({"t": round(time.monotonic() - self.start, 1), "event": what})

    def first(self, what: str) -> float:
        return next(e["t"] for e in self.entries if e["event"] == what)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        core = kubernetes.client.CoreV1Api(self.api)
        while not self._stop.wait(1):
            try:
                self._poll(core)
            except kubernetes.client.ApiException:
                continue

    def _poll(self, core: kubernetes.client.CoreV1Api) -> None:
        obj = get_dfd(self.api, self.namespace, NAME)
        healthy = conditions(obj).get("SpeculationHealthy", {})
        pods = core.list_namespaced_pod(self.namespace, label_selector=SELECTOR.format(NAME)).items
        ready = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.conditions
                 and {c.type: c.status for c in p.status.conditions}.get("Ready") == "True"]
        now = {
            "SpeculationHealthy": f"{healthy.get('status')}/{healthy.get('reason')}",
            "pods": sorted(_describe(p, p in ready) for p in pods if p.metadata.deletion_timestamp is None),
        }
        for key, value in now.items():
            if self._last.get(key) != value:
                self.mark(f"{key} {value}")
        self._last = now
        if self.min_ready_after_fallback is not None or healthy.get("reason") == "FellBackToTarget":
            count = len(ready)
            if self.min_ready_after_fallback is None or count < self.min_ready_after_fallback:
                self.min_ready_after_fallback = count


def _describe(pod, ready: bool) -> str:
    mode = "speculating" if "--speculative-config" in pod.spec.containers[0].args else "target-only"
    return f"{pod.metadata.name}:{mode}:{'ready' if ready else 'not-ready'}"


def running_pods(core, namespace: str) -> list:
    return [p for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR.format(NAME)).items
            if p.metadata.deletion_timestamp is None and p.status.phase == "Running" and p.status.pod_ip]


def scrape_serving_pods(prom: Prometheus, core, namespace: str) -> None:
    prom.set_pod_targets([(namespace, p.metadata.name, NAME, p.status.pod_ip) for p in running_pods(core, namespace)],
                         port=8000)


def wait_reason(core, namespace: str, reason: str, timeout: float) -> dict:
    return wait_for(lambda: (o := get_dfd(core.api_client, namespace, NAME)) and
                    conditions(o).get("SpeculationHealthy", {}).get("reason") == reason and o,
                    f"SpeculationHealthy reason {reason}", timeout)


def all_pods_ready(core, namespace: str, speculating: bool) -> bool:
    pods = [p for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR.format(NAME)).items]
    return len(pods) == 1 and all(
        p.metadata.deletion_timestamp is None
        and ("--speculative-config" in p.spec.containers[0].args) == speculating
        and {c.type: c.status for c in p.status.conditions or []}.get("Ready") == "True" for p in pods)


def test_a_draft_that_stops_paying_falls_back_without_losing_capacity_and_comes_back_on_request(
        stack: Stack, core, namespace: str, tmp_path: Path) -> None:
    bins = stack.plane.bin_dir
    objects = render(bins / "helm", *SHORT_FOR)
    rules = rule_file(objects, tmp_path / "rules.yaml")
    with running_prometheus(bins / "prometheus", tmp_path / "prometheus", rules, stack.operator_metrics_port,
                            f"{RELEASE}-dflash-operator-metrics") as prom:
        manifest = dfd(NAME, stack.vllm_image, draft=RANDOM_DRAFT, min_acceptance=0.0, speculation=SPECULATION)
        stack.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))
        timeline = Timeline(core.api_client, namespace)
        try:
            timeline.mark("applied")
            wait_for(lambda: all_pods_ready(core, namespace, speculating=True), "a speculating pod Ready",
                     SERVING_TIMEOUT)
            timeline.mark("speculating pod ready")
            scrape_serving_pods(prom, core, namespace)

            # The window: acceptance under the floor -> False, with the figures and the fallback's deadline.
            below = wait_reason(core, namespace, "AcceptanceBelowFloor", 180)
            timeline.mark("condition AcceptanceBelowFloor")
            figures = below["status"]["speculation"]
            assert figures["acceptanceRate"] < 0.5 and figures["windowSeconds"] == 60 and figures["podsMeasured"] == 1
            assert figures["belowFloorSince"] and len(figures["acceptanceByPosition"]) == 3
            assert "fall back to the target alone after 45 s" in conditions(below)["SpeculationHealthy"]["message"]
            waited = stack.kubectl("-n", namespace, "wait", "--for=condition=SpeculationHealthy=False",
                                   f"dfd/{NAME}", "--timeout=5s", check=False)
            assert waited.returncode == 0, waited.stderr

            # The chart's alert, from a real Prometheus scraping the operator, and every dashboard query against
            # live vLLM while it still speculates.
            wait_for(lambda: prom.firing("DFlashAcceptanceBelowFloor"), "DFlashAcceptanceBelowFloor firing", 60)
            timeline.mark("alert DFlashAcceptanceBelowFloor firing")
            (alert,) = prom.firing("DFlashAcceptanceBelowFloor")
            assert alert["metric"]["namespace"] == namespace and alert["metric"]["dflashdeployment"] == NAME
            gaps = _wait_dashboard(prom, objects)
            assert gaps == [], f"dashboard queries without data: {gaps}"
            assert not prom.firing("DFlashSpeculationInactive")

            # Fallback: a condition and a warning event that say why, then the roll, never below one ready pod.
            fell = wait_reason(core, namespace, "FellBackToTarget", 180)
            timeline.mark("condition FellBackToTarget")
            message = conditions(fell)["SpeculationHealthy"]["message"]
            assert "serving the target without the draft" in message and "resume-speculation" in message
            assert fell["status"]["speculation"]["fallback"]["since"]
            # kopf posts events from its own queue after the status patch: wait for it rather than race it.
            wait_for(lambda: any(e.reason == "FellBackToTarget" and e.type == "Warning"
                                 for e in core.list_namespaced_event(namespace).items
                                 if e.involved_object.kind == "DFlashDeployment"),
                     "the FellBackToTarget warning event", 30)
            wait_for(lambda: all_pods_ready(core, namespace, speculating=False), "the target-only pod Ready",
                     SERVING_TIMEOUT)
            timeline.mark("rolled: target-only pod ready, speculating pod gone")
            assert timeline.min_ready_after_fallback is not None and timeline.min_ready_after_fallback >= 1
            (pod,) = running_pods(core, namespace)
            probe = pod.spec.containers[0].readiness_probe._exec.command
            assert "--no-speculation" in probe and "--min-acceptance" not in probe
            wait_for(lambda: prom.firing("DFlashSpeculationFallback"), "DFlashSpeculationFallback firing", 60)
            timeline.mark("alert DFlashSpeculationFallback firing")
            scrape_serving_pods(prom, core, namespace)
            time.sleep(10)  # the target-only pod generates (its probes) without drafts: explained by the Fallback
            assert not prom.firing("DFlashSpeculationInactive")

            # Nothing measured can end the fallback; the documented annotation does.
            stack.kubectl("-n", namespace, "annotate", "dfd", NAME,
                          f"serving.dflash.dev/resume-speculation={int(time.time())}", "--overwrite")
            timeline.mark("resume annotation set")
            wait_for(lambda: all_pods_ready(core, namespace, speculating=True), "a speculating pod Ready again",
                     SERVING_TIMEOUT)
            timeline.mark("speculating pod ready again")
            resumed = get_dfd(core.api_client, namespace, NAME)
            assert "fallback" not in (resumed["status"].get("speculation") or {})
        finally:
            timeline.stop()
            _write_timeline(timeline)
    order = [timeline.first(e) for e in ("applied", "condition AcceptanceBelowFloor", "condition FellBackToTarget",
                                          "rolled: target-only pod ready, speculating pod gone",
                                          "resume annotation set", "speculating pod ready again")]
    assert order == sorted(order)


def _dashboard_gaps(prom: Prometheus, objects: list[dict]) -> list[str]:
    """Dashboard queries that return nothing (each must at least parse and run: prom.query raises otherwise)."""
    return [title for title, expr in dashboard_queries(dashboard(objects)).items() if not prom.query(expr)]


def _wait_dashboard(prom: Prometheus, objects: list[dict]) -> list[str]:
    gaps: list[str] = []

    def filled() -> bool:
        gaps[:] = _dashboard_gaps(prom, objects)
        return not gaps
    try:
        wait_for(filled, "every dashboard panel with data", 90)
    except AssertionError:
        pass
    return gaps


def _write_timeline(timeline: Timeline) -> None:
    out = CACHE / "logs" / "fallback-timeline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"spec.speculation": SPECULATION, "entries": timeline.entries,
                               "min_ready_pods_after_fallback": timeline.min_ready_after_fallback}, indent=2))
    print(f"\nfallback timeline ({out}):")
    for entry in timeline.entries:
        print(f"  {entry['t']:7.1f} s  {entry['event']}")
