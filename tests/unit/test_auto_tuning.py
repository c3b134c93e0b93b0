"""spec.speculation.tuning = Auto: when the pods roll onto a recommended schedule, and what holds Auto back."""

from __future__ import annotations

import copy
import datetime
import importlib.util
import json
from pathlib import Path

import pytest
from test_reconcile import BODY
from test_reconcile_speculation import KeepingKube, deployment_args, world

from dflash_operator.api import DFlashDeployment
from dflash_operator.api.status import SpeculationStatus
from dflash_operator.reconcile import passes as reconcile_module
from dflash_operator.reconcile.ledger import Ledger
from dflash_operator.reconcile.passes import reconcile
from dflash_operator.runtime.clock import Clock
from dflash_operator.runtime.config import OperatorConfig
from dflash_operator.speculation import auto, autopilot, tuner
from dflash_operator.speculation.counters import PodMetrics, SpecCounters
from dflash_operator.speculation.recommendation import recommendation, shipped_cost_model_for
from dflash_operator.speculation.window import Windows

REPO = Path(__file__).resolve().parents[2]
NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)
USELESS, ALL_ACCEPT = [0.0] * 8, [1.0] * 8


def _dfd(extra_args: list[str] | None = None, **speculation) -> DFlashDeployment:
    body = copy.deepcopy(BODY)
    body["spec"]["numSpeculativeTokens"] = 8
    body["spec"]["speculation"] = {"tuning": "Auto", **speculation}
    if extra_args is not None:
        body["spec"]["extraArgs"] = extra_args
    return DFlashDeployment.model_validate(body)


def _decide(dfd: DFlashDeployment, p: list[float], tuned=None, now: datetime.datetime = NOW) -> auto.TuningDecision:
    advice = recommendation(dfd, p, 1000, shipped_cost_model_for("0.23.0"), 200)
    return auto.decide(dfd, tuned, advice.found, p, advice.cost, now)


def test_a_useless_draft_is_scheduled_off_everywhere_with_the_gain_in_the_event() -> None:
    decision = _decide(_dfd(), USELESS)
    assert decision.tuned is not None and decision.tuned.summary == "1-1024:0"
    assert decision.tuned.replaced == "1-1024:8" and decision.tuned.since == "2026-12-04T12:00:00Z"
    # K=8 with nothing accepted costs c(b, 8) for one token: 1/2.637 at b=1, 1/2.162 at b=16 on the shipped table.
    assert decision.tuned.replaced_expected_speedup == pytest.approx((1 / 2.637 + 1 / 2.162) / 2, abs=0.005)
    assert decision.tuned.expected_speedup == 1.0
    assert decision.event is not None and "1-1024:0" in decision.event and "0.42x with 1-1024:8" in decision.event


def test_what_runs_already_or_gains_too_little_stays() -> None:
    assert _decide(_dfd(), ALL_ACCEPT).tuned is None, "K=8 everywhere is what runs: nothing to roll"
    applied = _decide(_dfd(), USELESS).tuned
    # The same recommendation again, long after the interval: no second roll onto the same schedule.
    later = NOW + datetime.timedelta(days=1)
    again = _decide(_dfd(), USELESS, tuned=applied, now=later)
    assert again.tuned == applied and again.event is None
    # A gain under tuningMinGain: a draft that pays a little more at K=8 than nothing does not move a 0 schedule
    # unless the gain clears the threshold.
    slight = [0.26] * 8  # E(8) = 3.08; 3.08 / 2.637 = 1.17 at b=1, 3.08 / 2.119 = 1.45 at b=16
    assert _decide(_dfd(tuningMinGain=2.0), slight, tuned=applied, now=later).tuned == applied
    moved = _decide(_dfd(tuningMinGain=0.05), slight, tuned=applied, now=later).tuned
    assert moved is not None and moved.summary == "1-1024:8" and moved.replaced == "1-1024:0"


def test_no_second_change_within_the_interval() -> None:
    applied = _decide(_dfd(tuningIntervalSeconds=600), USELESS).tuned
    soon = _decide(_dfd(tuningIntervalSeconds=600), ALL_ACCEPT, tuned=applied, now=NOW + datetime.timedelta(
        seconds=599))
    assert soon.tuned == applied and soon.event is None
    after = _decide(_dfd(tuningIntervalSeconds=600), ALL_ACCEPT, tuned=applied, now=NOW + datetime.timedelta(
        seconds=600))
    assert after.tuned is not None and after.tuned.summary == "1-1024:8" and after.event is not None


def test_a_users_own_schedule_holds_auto_back_and_says_so() -> None:
    dfd = _dfd(tokensByBatchSize=[{"fromBatchSize": 1, "toBatchSize": 1024, "numSpeculativeTokens": 4}])
    decision = _decide(dfd, USELESS)
    assert decision.tuned is None and decision.event is None and "tokensByBatchSize is set" in (decision.note or "")


@pytest.mark.parametrize("extra_args", [[], ["--data-parallel-size", "2"], ["--data-parallel-size=4"]])
def test_auto_applies_a_plain_length_under_data_parallelism_too(extra_args: list[str]) -> None:
    # One static length (here 0: the target alone), not vLLM's schedule, which data parallelism turns off.
    decision = _decide(_dfd(extra_args=extra_args), USELESS)
    assert decision.tuned is not None and decision.tuned.summary == "1-1024:0"


def test_a_schedule_of_several_lengths_is_applied_as_its_best_single_length() -> None:
    # The lane's 0.26.0 table: K=8 collapses at batch 64, so the tuner recommends 8 up to 36 and 4 above.
    measured = json.loads((Path(__file__).resolve().parents[2] / "bench/results/gpu-lane-cost-2026-12-05.json")
                          .read_text())["cost_model"]
    cost = tuner.CostModel.from_dict(measured)
    found = tuner.recommend(ALL_ACCEPT, 1000, cost, 8, max_batch=64)
    assert isinstance(found, tuner.Recommendation) and {r.k for r in found.ranges} == {4, 8}
    # Run at every batch size, 8 expects 3.47x over the measured sizes (its collapse at 64 included) against 2.16x
    # for 4: the best single length is 8, which runs already.
    assert auto.decide(_dfd(), None, found, ALL_ACCEPT, cost, NOW).tuned is None
    # Half the positions accepted: 4 pays more than 8 everywhere (E is the same, 8 costs more), so Auto lowers K.
    half = [1.0] * 4 + [0.0] * 4
    lower = auto.decide(_dfd(), None, tuner.recommend(half, 1000, cost, 8, max_batch=64), half, cost, NOW)
    assert lower.tuned is not None and lower.tuned.summary == "1-1024:4" and lower.tuned.replaced == "1-1024:8"
    served = auto.as_served(_dfd(), lower.tuned).spec
    # A plain num_speculative_tokens, not vLLM's per-batch-size rows (piecewise graphs on vLLM 0.26's V1 runner).
    assert served.num_speculative_tokens == lower.tuned.schedule[0].num_speculative_tokens > 0
    assert served.speculation.tokens_by_batch_size is None


def test_recommend_and_off_never_apply() -> None:
    for mode in ("Recommend", "Off"):
        decision = _decide(_dfd(tuning=mode), USELESS)
        assert decision == auto.TuningDecision(None)


def test_a_running_length_the_cost_model_never_measured_is_not_judged() -> None:
    dfd = _dfd()
    cost = tuner.CostModel.from_dict({"gpu": "g", "vllmVersion": "0.26.0", "model": "m", "batchSizes": [1],
                                      "draftLengths": [0, 4], "relativeStepTime": [[1.0, 1.2]]})
    found = tuner.recommend(USELESS, 1000, cost, 8)
    assert isinstance(found, tuner.Recommendation)
    decision = auto.decide(dfd, None, found, USELESS, cost, NOW)
    assert decision.tuned is None and "no measurement for draft length 8" in (decision.note or "")


def test_the_schedule_stays_in_force_only_for_the_spec_it_was_applied_to() -> None:
    dfd = _dfd()
    applied = _decide(dfd, USELESS).tuned
    status = SpeculationStatus(fingerprint=autopilot.speculation_fingerprint(dfd), tuned=applied)
    assert auto.in_force(dfd, status) == applied
    # A new draft length (or target, draft, image, speculation settings): the spec's own K again.
    changed = _dfd(tuningIntervalSeconds=7200)
    assert auto.in_force(changed, status) is None
    served = auto.as_served(dfd, applied).spec  # 0: a schedule of 0 everywhere, rendered as the target alone
    assert served.speculation.tokens_by_batch_size is not None and dfd.spec.speculation.tokens_by_batch_size is None


def test_auto_rolls_the_pods_onto_the_schedule_and_never_writes_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    # K=8, the draft never right: Auto's schedule turns speculation off at every batch size.
    zeros = (0.0,) * 8
    readings = iter([SpecCounters(0, 0, 0, zeros), SpecCounters(100, 800, 0, zeros),
                     SpecCounters(200, 1600, 0, zeros), SpecCounters(300, 2400, 0, zeros)])
    monkeypatch.setattr(reconcile_module.speculation, "read_pod_metrics",
                        lambda url, timeout: PodMetrics(next(readings)))
    seconds = iter(range(0, 1000, 10))
    clock = Clock(monotonic=lambda: float(next(seconds)), now=lambda: NOW)
    body = copy.deepcopy(BODY)
    body["spec"].update(numSpeculativeTokens=8, speculation={"tuning": "Auto", "minAcceptanceRate": 0.0})
    spec_before = copy.deepcopy(body["spec"])
    kube, ledger, windows, events = KeepingKube(), Ledger(), Windows(), []
    config = OperatorConfig(speculation_min_draft_tokens=10)
    for _ in range(2):  # a first reading, then a window with 100 drafts
        reconcile(kube, world(), ledger, body, config, lambda *e: events.append(e), measure=True, windows=windows,
                  clock=clock)
    tuned = [e for e in events if e[1] == auto.SPECULATION_TUNED]
    assert len(tuned) == 1 and "1-1024:0" in tuned[0][2]
    assert kube.statuses[-1]["speculation"]["tuned"]["summary"] == "1-1024:0"
    # The next pass (the status write's own watch event) renders the schedule into the pods: vLLM's per-batch-size
    # rows, K=8 still the config's cap; and a later window does not roll them onto the same schedule again.
    kube.objects.clear()
    for _ in range(2):
        reconcile(kube, world(), ledger, body, config, lambda *e: events.append(e), measure=True, windows=windows,
                  clock=clock)
    args, probe, _ = deployment_args(kube)
    # 0 at every batch size is served as the target alone (vLLM 0.26 would still run the draft at K=0), and the
    # probe asks for a completion, not for accepted drafts (which would fail every pod).
    assert "--speculative-config" not in args
    assert "--no-speculation" in probe and "--min-acceptance" not in probe
    assert body["spec"] == spec_before
    assert len([e for e in events if e[1] == auto.SPECULATION_TUNED]) == 1, "no second roll onto the same schedule"


def test_the_probe_asks_for_drafts_only_where_the_schedule_drafts_at_batch_size_one() -> None:
    from dflash_operator.render.serving import probe_speculates

    drafting = _dfd(tokensByBatchSize=[{"fromBatchSize": 1, "toBatchSize": 8, "numSpeculativeTokens": 4},
                                       {"fromBatchSize": 9, "toBatchSize": 1024, "numSpeculativeTokens": 0}])
    silent_at_one = _dfd(tokensByBatchSize=[{"fromBatchSize": 1, "toBatchSize": 1, "numSpeculativeTokens": 0},
                                            {"fromBatchSize": 2, "toBatchSize": 1024, "numSpeculativeTokens": 4}])
    assert probe_speculates(drafting.spec) and not probe_speculates(drafting.spec, speculate=False)
    assert not probe_speculates(silent_at_one.spec)
    assert probe_speculates(_dfd().spec), "no schedule: the static K drafts at every batch size"


# A card where K=8 pays most at small batches and collapses at 64 (the lane saw 0.20x there on the H100 with a partly
# accepting draft), while K=2 holds up: which single length is best depends on where the traffic runs.
COLLAPSE = tuner.CostModel("test", "0.26.0", "test", (1, 8, 64), (0, 2, 8), {
    (1, 0): 1.0, (1, 2): 1.1, (1, 8): 1.5, (8, 0): 1.0, (8, 2): 1.1, (8, 8): 1.5,
    (64, 0): 1.0, (64, 2): 1.3, (64, 8): 10.0})


def _decide_on(cost: tuner.CostModel, traffic: dict[int, float] | None) -> auto.TuningDecision:
    dfd = _dfd(tuningMinGain=0.05)
    found = tuner.recommend(ALL_ACCEPT, 1000, cost, 8, traffic=traffic)
    assert isinstance(found, tuner.Recommendation)
    return auto.decide(dfd, None, found, ALL_ACCEPT, cost, NOW, traffic)


def test_auto_weighs_the_lengths_by_the_batch_sizes_the_pods_run() -> None:
    # Evenly over the measured sizes (1, 8, 64) K=8, which runs, is best: (6 + 6 + 0.9) / 3 = 4.3 against K=2's 2.6.
    assert _decide_on(COLLAPSE, None).tuned is None
    # Traffic that runs at batch 64 nine reads in ten: K=2 (0.9 x 2.31 + 0.1 x 2.73 = 2.35) beats K=8 (1.41).
    busy = _decide_on(COLLAPSE, {64: 9.0, 1: 1.0})
    assert busy.tuned is not None and busy.tuned.summary == "1-1024:2" and busy.tuned.weighted_by == "Traffic"
    assert busy.tuned.expected_speedup == pytest.approx(0.9 * 3 / 1.3 + 0.1 * 3 / 1.1, abs=0.005)
    assert busy.tuned.replaced_expected_speedup == pytest.approx(0.9 * 9 / 10 + 0.1 * 9 / 1.5, abs=0.005)
    assert busy.event is not None and "10 reads of the running batch size; most at 64 (90%), 1 (10%)" in busy.event
    # The same traffic at small batches: K=8 stays.
    assert _decide_on(COLLAPSE, {1: 5.0, 8: 5.0}).tuned is None


def test_the_recommendation_reports_each_ranges_share_of_the_traffic() -> None:
    dfd = _dfd(costModel=COLLAPSE.to_dict())
    few = recommendation(dfd, ALL_ACCEPT, 1000, None, 200, {64: 9})
    assert few.traffic is None and few.status is not None and few.status.weighted_speedup is None
    assert all(r.traffic_share is None for r in few.status.schedule or [])
    assert "fewer than 10 reads of a running batch size" in (few.status.message or "")
    advice = recommendation(dfd, ALL_ACCEPT, 1000, None, 200, {1: 2, 8: 1, 40: 3, 300: 4})
    assert advice.status is not None and advice.traffic is not None
    by_range = {(r.from_batch_size, r.to_batch_size, r.num_speculative_tokens): r.traffic_share
                for r in advice.status.schedule or []}
    # K=8 below the crossing between 8 and 64, K=2 above; batch 300 is past 64, so it runs the last range.
    crossing = next(r.to_batch_size for r in advice.status.schedule or [] if r.num_speculative_tokens == 8)
    assert 8 < crossing < 40
    assert by_range == {(1, crossing, 8): 0.3, (crossing + 1, 1024, 2): 0.7}
    assert advice.status.weighted_speedup is not None and advice.status.message is None


def test_on_the_lanes_grid_traffic_weighting_picks_the_best_measured_length_where_the_even_mean_did_not() -> None:
    # bench/auto_traffic.py: the operator's own Auto on the H200 grid of 2026-12-05, traffic at one batch size each.
    spec = importlib.util.spec_from_file_location("auto_traffic", REPO / "bench" / "auto_traffic.py")
    assert spec is not None and spec.loader is not None
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    rows = replay.replay(json.loads(replay.DEFAULT_GRID.read_text()))
    single = [(row, cell) for row in rows if row["traffic"].startswith("all at") for cell in row["cells"]]
    assert len(single) == 14
    assert all(cell["x_best_static"] >= 0.95 for _, cell in single), single
    # At batch 64 K = 8 collapsed (0.54x): weighed by where the traffic runs Auto picks 4; the even mean kept 8.
    at_64 = next(cell for row, cell in single if row["draft"] == "all-accept" and cell["batch"] == 64)
    assert at_64["best_static_k"] == 4 and at_64["even_weighting_k"] == 8
    assert at_64["even_weighting_x_best_static"] < 0.5
