"""reconcile with the speculation window: measured figures in status, a Fallback rendered, a resume rendered back."""

from __future__ import annotations

import copy
import datetime

import pytest
from test_reconcile import BODY, JOB, NS, RecordingKube, _completed_pod, job

from dflash_cache.result import CacheResult
from dflash_operator.api import DFlashDeployment
from dflash_operator.reconcile import passes as reconcile_module
from dflash_operator.reconcile.ledger import Ledger
from dflash_operator.reconcile.passes import reconcile
from dflash_operator.runtime import metrics
from dflash_operator.runtime.clock import Clock
from dflash_operator.runtime.config import OperatorConfig
from dflash_operator.speculation import autopilot
from dflash_operator.speculation.counters import PodMetrics, SpecCounters
from dflash_operator.speculation.recommendation import shipped_cost_model_for
from dflash_operator.speculation.window import Windows
from dflash_testkit.indexes import observed

NAME = BODY["metadata"]["name"]
CONFIG = OperatorConfig(speculation_min_draft_tokens=10)


def body(policy: str = "Fallback", resume: str | None = None, speculation_status: dict | None = None) -> dict:
    b = copy.deepcopy(BODY)
    b["spec"]["speculation"] = {"onLowAcceptance": policy, "fallbackAfterSeconds": 0, "minAcceptanceRate": 0.5}
    if resume is not None:
        b["metadata"]["annotations"] = {autopilot.RESUME_ANNOTATION: resume}
    if speculation_status is not None:
        b["status"] = {"speculation": speculation_status}
    return b


def world(pods: int = 1):
    result = CacheResult(ok=True, target_commit="a" * 40, draft_commit="b" * 40, draft_block_size=16)
    serving = [{"metadata": {"name": f"{NAME}-{i}", "deletionTimestamp": None},
                "status": {"phase": "Running", "podIP": f"127.0.0.{i + 1}", "ready": True}} for i in range(pods)]
    return observed([job({"conditions": [{"type": "Complete", "status": "True"}]})],
                    {("job", NS, JOB): [_completed_pod(result)], ("serving", NS, NAME): serving})


def fallback_status(dfd_body: dict) -> dict:
    dfd = DFlashDeployment.model_validate(dfd_body)
    return {"acceptanceRate": 0.0, "fingerprint": autopilot.speculation_fingerprint(dfd),
            "fallback": {"since": "2026-12-03T10:00:00Z", "message": "acceptance 0.00 ..."}}


def deployment_args(kube: RecordingKube) -> tuple[list[str], list[str], dict]:
    deployment = next(o for o in kube.objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    return container["args"], container["readinessProbe"]["exec"]["command"], pod["metadata"]["annotations"]


class KeepingKube(RecordingKube):
    def __init__(self) -> None:
        super().__init__({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1})
        self.objects: list[dict] = []

    def apply(self, obj: dict, field_manager: str, dry_run: bool = False) -> dict:
        if not dry_run:
            self.objects.append(copy.deepcopy(obj))
        return super().apply(obj, field_manager, dry_run)


def test_a_fallback_in_force_renders_the_pods_without_the_draft() -> None:
    b = body(resume="1")
    b["status"] = {"speculation": fallback_status(b)}
    kube = KeepingKube()
    reconcile(kube, world(), Ledger(), b, CONFIG, lambda *e: None)
    args, probe, annotations = deployment_args(kube)
    assert "--speculative-config" not in args and "--no-speculation" in probe and "--min-acceptance" not in probe
    assert annotations["serving.dflash.dev/speculation"] == "fallback"
    # Ready says which probe the pods passed: status does not claim speculation it does not have.
    ready = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "1/1 pods passed the completion probe (Fallback: the target alone, no draft)"


def test_a_new_resume_annotation_rolls_the_draft_back_in_and_clears_the_fallback() -> None:
    b = body(resume="1")
    b["status"] = {"speculation": fallback_status(b)}
    b["metadata"]["annotations"][autopilot.RESUME_ANNOTATION] = "2"
    kube, events = KeepingKube(), []
    reconcile(kube, world(), Ledger(), b, CONFIG, lambda *e: events.append(e))
    args, probe, annotations = deployment_args(kube)
    assert "--speculative-config" in args and "--min-acceptance" in probe
    assert "serving.dflash.dev/speculation" not in annotations
    [written] = kube.statuses
    # The merge patch removes the fallback and the old figures: they no longer describe the pods.
    assert written["speculation"]["fallback"] is None and written["speculation"]["acceptanceRate"] is None
    healthy = next(c for c in written["conditions"] if c["type"] == "SpeculationHealthy")
    assert (healthy["status"], healthy["reason"]) == ("Unknown", autopilot.NO_DRAFT_TOKENS_YET)


def test_measured_passes_judge_the_window_and_write_only_when_a_rounded_figure_moves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([SpecCounters(0, 0, 0), SpecCounters(100, 400, 360), SpecCounters(200, 800, 720.4),
                     SpecCounters(300, 1200, 1080.6)])
    monkeypatch.setattr(reconcile_module.speculation, "read_pod_metrics",
                        lambda url, timeout: PodMetrics(next(readings)))
    seconds = iter(range(0, 1000, 10))
    clock = Clock(monotonic=lambda: float(next(seconds)))
    kube, ledger, windows, events = KeepingKube(), Ledger(), Windows(), []
    for _ in range(4):
        reconcile(kube, world(), ledger, body(policy="Alert"), CONFIG, lambda *e: events.append(e), measure=True,
                  windows=windows, clock=clock)
    figures = [s["speculation"] for s in kube.statuses if s.get("speculation", {}).get("acceptanceRate")]
    # Passes 2-4 measure 0.9, 0.9005 and 0.9005 (mean 4.6, 4.602, 4.602): one write with figures, not three.
    assert len(figures) == 1 and figures[0]["acceptanceRate"] == 0.9 and figures[0]["meanAcceptedLength"] == 4.6
    healthy = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "SpeculationHealthy")
    assert healthy["reason"] == autopilot.ABOVE_FLOOR
    assert metrics.ACCEPTANCE_RATE.labels(NS, NAME)._value.get() == 0.9  # noqa: SLF001 - the exported value


def test_measured_low_acceptance_with_fallback_writes_the_fallback_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([SpecCounters(0, 0, 0), SpecCounters(100, 400, 0)])
    monkeypatch.setattr(reconcile_module.speculation, "read_pod_metrics",
                        lambda url, timeout: PodMetrics(next(readings)))
    kube, ledger, windows, events = KeepingKube(), Ledger(), Windows(), []
    b = body()
    b["status"] = {"conditions": [{"type": "SpeculationHealthy", "status": "True", "reason": "AcceptanceAboveFloor",
                                   "message": "", "observedGeneration": 0, "lastTransitionTime": ""}]}
    for _ in range(2):
        reconcile(kube, world(), ledger, b, CONFIG, lambda *e: events.append(e), measure=True, windows=windows)
    written = kube.statuses[-1]["speculation"]
    fallback = written["fallback"]
    assert written["fingerprint"] == autopilot.speculation_fingerprint(DFlashDeployment.model_validate(b))
    assert datetime.datetime.fromisoformat(fallback["since"].replace("Z", "+00:00"))
    assert ("Warning", autopilot.FELL_BACK) in [(t, r) for t, r, _ in events]
    assert metrics.FALLBACK.labels(NS, NAME)._value.get() == 1  # noqa: SLF001
    # The next pass (the status write's own watch event) rolls the pods off the draft.
    kube.objects.clear()
    reconcile(kube, world(), ledger, b, CONFIG, lambda *e: None)
    args, probe, _ = deployment_args(kube)
    assert "--speculative-config" not in args and "--no-speculation" in probe


# The serving image's pair check says vLLM 0.32.0: with no cost model from the chart, the one shipped for 0.26 (the
# newest release measured at or below it), whose K 8 step collapses at batch 64, so K 8 pays only up to batch 35 (every
# token accepted: its all-accepted table's costs);
# the chart's cost model (here 0.23's, which has no batch above 16) wins over the release's.
@pytest.mark.parametrize(("config", "summary", "first_range", "measured_on"), [
    (CONFIG, "1-35:8, 36-1024:4", ("1", "35"), "vLLM 0.26.0"),
    (OperatorConfig(speculation_min_draft_tokens=10, cost_model=shipped_cost_model_for("0.23.0")), "1-1024:8",
     ("1", "1024"), "vLLM 0.23.0"),
])
def test_measured_passes_publish_the_recommendation_once_and_never_touch_the_spec(
        monkeypatch: pytest.MonkeyPatch, config: OperatorConfig, summary: str, first_range: tuple[str, str],
        measured_on: str) -> None:
    # K=8 (the golden input's), every drafted token accepted at every position: the longest measured draft pays
    # wherever its step does not collapse.
    by_position = tuple(float(n) for n in [100] * 8)
    readings = iter([SpecCounters(0, 0, 0, (0.0,) * 8), SpecCounters(100, 800, 800, by_position),
                     SpecCounters(200, 1600, 1600, tuple(2 * x for x in by_position)),
                     SpecCounters(300, 2400, 2400, tuple(3 * x for x in by_position))])
    monkeypatch.setattr(reconcile_module.speculation, "read_pod_metrics",
                        lambda url, timeout: PodMetrics(next(readings)))
    seconds = iter(range(0, 1000, 10))
    kube, ledger, windows = KeepingKube(), Ledger(), Windows()
    spec_before = copy.deepcopy(body(policy="Alert")["spec"])
    for _ in range(4):
        reconcile(kube, world(), ledger, body(policy="Alert"), config, lambda *e: None, measure=True,
                  windows=windows, clock=Clock(monotonic=lambda: float(next(seconds))))
    published = [s["speculation"]["recommendation"] for s in kube.statuses
                 if ((s.get("speculation") or {}).get("recommendation") or {}).get("summary")]
    assert len(published) == 1, "written once: later passes find the same rounded recommendation"
    assert published[0]["summary"] == summary and published[0]["measuredTokens"] == 8
    assert measured_on in published[0]["costModel"]
    assert metrics.RECOMMENDED_TOKENS.labels(NS, NAME, *first_range)._value.get() == 8  # noqa: SLF001
    assert body(policy="Alert")["spec"] == spec_before


def test_the_running_batch_size_read_with_the_counters_weighs_the_recommendation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every drafted token accepted; the pod's one engine runs 16 requests at every read, once with none.
    by_position = (100.0,) * 8
    reads = iter([PodMetrics(SpecCounters(100 * n, 800 * n, 800 * n, tuple(n * x for x in by_position)),
                             (0,) if n == 3 else (16,)) for n in range(14)])
    monkeypatch.setattr(reconcile_module.speculation, "read_pod_metrics", lambda url, timeout: next(reads))
    seconds = iter(range(0, 1000, 10))
    kube, ledger, windows = KeepingKube(), Ledger(), Windows()
    for _ in range(14):
        reconcile(kube, world(), ledger, body(policy="Alert"), CONFIG, lambda *e: None, measure=True,
                  windows=windows, clock=Clock(monotonic=lambda: float(next(seconds))))
    said = [s["speculation"]["recommendation"] for s in kube.statuses
            if ((s.get("speculation") or {}).get("recommendation") or {}).get("summary")]
    # First weighed evenly (fewer than 10 reads of a running batch), then by the reads: all at 16, the idle one apart.
    assert "fewer than 10 reads" in said[0]["message"] and said[0].get("weightedSpeedup") is None
    assert said[-1]["schedule"][0]["trafficShare"] == 1.0 and said[-1].get("message") is None
    # All of it at batch 16: the expected speedup there, E(8) / c(16, 8) of the cost model shipped for the serving
    # vLLM (0.32.0 -> 0.26's), with all 8 tokens accepted (its all-accepted table), not the range's lowest.
    assert said[-1]["weightedSpeedup"] == round(9 / shipped_cost_model_for("0.32.0").at(16, 8, accepted=8), 2) == 2.4
    assert len(said) == 2, "written when the weighting changed, not at every read"
    assert metrics.RECOMMENDED_TRAFFIC_SHARE.labels(NS, NAME, "1", "35")._value.get() == 1.0  # noqa: SLF001
    assert metrics.RECOMMENDED_TRAFFIC_SHARE.labels(NS, NAME, "36", "1024")._value.get() == 0.0  # noqa: SLF001
    assert metrics.RECOMMENDED_WEIGHTED_SPEEDUP.labels(NS, NAME)._value.get() == 2.4  # noqa: SLF001
