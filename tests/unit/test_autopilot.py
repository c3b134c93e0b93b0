"""SpeculationHealthy on the window, its hysteresis, and the Fallback policy's start, hold and end."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path

import yaml

from dflash_operator.api import DFlashDeployment
from dflash_operator.api.models import SpeculationStatus
from dflash_operator.speculation.autopilot import (
    ABOVE_FLOOR,
    BELOW_FLOOR,
    FELL_BACK,
    NO_DRAFT_TOKENS_YET,
    RESUME_ANNOTATION,
    Verdict,
    fallback_in_force,
    judge,
)
from dflash_operator.speculation.counters import SpecCounters
from dflash_operator.speculation.window import WindowFigures

BODY = yaml.safe_load((Path(__file__).parent / "golden" / "minimal.input.yaml").read_text())
T0 = datetime.datetime(2026, 12, 3, 10, 0, tzinfo=datetime.UTC)
MIN_TOKENS = 100


def dfd(policy: str = "Fallback", after: int = 600, floor: float = 0.5, **metadata: object) -> DFlashDeployment:
    body = copy.deepcopy(BODY)
    body["spec"]["speculation"] = {"onLowAcceptance": policy, "fallbackAfterSeconds": after,
                                   "minAcceptanceRate": floor, "windowSeconds": 300}
    body["metadata"].update(metadata)
    return DFlashDeployment.model_validate(body)


def window(rate: float, draft_tokens: float = 1000) -> WindowFigures:
    return WindowFigures(SpecCounters(draft_tokens / 4, draft_tokens, rate * draft_tokens), pods=1)


class Run:
    """Feeds verdicts back as the next pass's previous state, the way status carries them."""

    def __init__(self, deployment: DFlashDeployment) -> None:
        self.dfd, self.figures, self.healthy = deployment, None, None

    def at(self, minutes: float, figures: WindowFigures | None) -> Verdict:
        verdict = judge(self.dfd, figures, self.figures, self.healthy, T0 + datetime.timedelta(minutes=minutes),
                        MIN_TOKENS)
        self.figures = SpeculationStatus.model_validate(verdict.figures.model_dump())
        self.healthy = verdict.healthy.model_dump(by_alias=True)
        return verdict


def test_hysteresis_false_under_the_floor_true_only_above_floor_plus_margin() -> None:
    run = Run(dfd(policy="Alert"))
    seen = [(run.at(m, window(rate)).healthy.status) for m, rate in
            [(0, 0.8), (1, 0.45), (2, 0.52), (3, 0.49), (4, 0.54), (5, 0.56), (6, 0.51), (7, 0.49)]]
    # 0.52 and 0.54 sit in the band [0.5, 0.55): still False; 0.56 recovers; 0.51 stays True; 0.49 falls again.
    assert seen == ["True", "False", "False", "False", "False", "True", "True", "False"]


def test_figures_are_rounded_so_small_moves_write_nothing() -> None:
    run = Run(dfd(policy="Alert"))
    first = run.at(0, window(0.801)).figures
    second = run.at(1, window(0.8012)).figures
    assert first == second and first.acceptance_rate == 0.8 and first.mean_accepted_length == 4.2


def test_a_quiet_window_keeps_the_last_verdict_and_figures() -> None:
    run = Run(dfd(policy="Alert"))
    before = run.at(0, window(0.3))
    quiet = run.at(5, window(0.0, draft_tokens=MIN_TOKENS - 1))
    assert (quiet.healthy.status, quiet.healthy.reason, quiet.healthy.message) == (
        "False", BELOW_FLOOR, before.healthy.message)
    assert quiet.figures == before.figures


def test_no_traffic_at_all_yet_is_unknown() -> None:
    verdict = Run(dfd()).at(0, None)
    assert (verdict.healthy.status, verdict.healthy.reason) == ("Unknown", NO_DRAFT_TOKENS_YET)


def test_alert_only_reports_however_long_it_lasts() -> None:
    run = Run(dfd(policy="Alert", after=0))
    for minute in range(0, 120, 10):
        verdict = run.at(minute, window(0.0))
        assert not verdict.started_fallback and verdict.figures.fallback is None
    assert verdict.healthy.reason == BELOW_FLOOR and verdict.figures.below_floor_since == "2026-12-03T10:00:00Z"


def test_fallback_starts_after_the_set_time_under_the_floor_and_says_why() -> None:
    run = Run(dfd(after=600))
    assert not run.at(0, window(0.1)).started_fallback
    waiting = run.at(9, window(0.1))
    assert not waiting.started_fallback and "fall back to the target alone after 600 s" in waiting.healthy.message
    fell = run.at(10, window(0.1))
    assert fell.started_fallback and fell.healthy.reason == FELL_BACK and fell.healthy.status == "False"
    assert fell.figures.fallback is not None and fell.figures.fallback.since == "2026-12-03T10:10:00Z"
    assert "under the floor 0.5" in fell.healthy.message and RESUME_ANNOTATION in fell.healthy.message


def test_a_recovery_before_the_deadline_resets_the_clock() -> None:
    run = Run(dfd(after=600))
    run.at(0, window(0.1))
    run.at(8, window(0.9))       # recovered: the clock stops
    run.at(9, window(0.1))       # under again: a new clock
    assert not run.at(18, window(0.1)).started_fallback
    assert run.at(19, window(0.1)).started_fallback


def test_fallback_holds_whatever_is_measured_and_never_restarts_itself() -> None:
    run = Run(dfd(after=0))
    assert run.at(0, window(0.0)).started_fallback
    for minute, figures in [(1, None), (2, window(0.9)), (3, window(0.0))]:
        held = run.at(minute, figures)
        assert held.healthy.reason == FELL_BACK and not held.started_fallback
        assert held.figures.fallback is not None and held.figures.fallback.since == "2026-12-03T10:00:00Z"


def test_fallback_ends_on_a_new_resume_annotation_or_a_speculation_change_not_on_scaling() -> None:
    run = Run(dfd(after=0, annotations={RESUME_ANNOTATION: "1"}))
    run.at(0, window(0.0))
    assert fallback_in_force(run.dfd, run.figures) is not None
    scaled = dfd(after=0, annotations={RESUME_ANNOTATION: "1"})
    scaled.spec.replicas = 7
    assert fallback_in_force(scaled, run.figures) is not None
    assert fallback_in_force(dfd(after=0, annotations={RESUME_ANNOTATION: "2"}), run.figures) is None
    assert fallback_in_force(dfd(after=0, floor=0.4, annotations={RESUME_ANNOTATION: "1"}), run.figures) is None
    assert fallback_in_force(dfd(policy="Alert", annotations={RESUME_ANNOTATION: "1"}), run.figures) is None


def test_after_a_resume_the_draft_is_judged_afresh() -> None:
    run = Run(dfd(after=0))
    run.at(0, window(0.0))
    run.dfd = dfd(after=0, annotations={RESUME_ANNOTATION: "again"})
    fresh = run.at(1, window(0.0, draft_tokens=10))
    assert fresh.healthy.reason == NO_DRAFT_TOKENS_YET and fresh.figures.fallback is None
    assert fresh.figures.below_floor_since is None
    assert run.at(2, window(0.9)).healthy.reason == ABOVE_FLOOR


def test_the_floor_defaults_to_the_readiness_floor() -> None:
    body = copy.deepcopy(BODY)
    body["spec"]["readiness"] = {"minAcceptanceRate": 0.7}
    verdict = judge(DFlashDeployment.model_validate(body), window(0.65), None, None, T0, MIN_TOKENS)
    assert verdict.healthy.reason == BELOW_FLOOR and "floor 0.7" in verdict.healthy.message


def test_a_spec_change_starts_the_verdict_afresh_so_a_new_fallback_gets_its_full_grace() -> None:
    # An hour under the floor in Alert mode; then the user turns Fallback on with 30 minutes of grace.
    run = Run(dfd(policy="Alert"))
    run.at(0, window(0.0))
    run.at(60, window(0.0))
    run.dfd = dfd(policy="Fallback", after=1800)
    switched = run.at(61, window(0.0))
    assert not switched.started_fallback and switched.figures.below_floor_since == "2026-12-03T11:01:00Z"
    assert not run.at(90, window(0.0)).started_fallback
    assert run.at(91, window(0.0)).started_fallback


def test_a_quiet_window_after_a_spec_change_claims_no_old_verdict() -> None:
    run = Run(dfd(policy="Alert"))
    run.at(0, window(0.9))
    run.dfd = dfd(policy="Alert", floor=0.95)
    quiet = run.at(1, window(0.0, draft_tokens=MIN_TOKENS - 1))
    assert quiet.healthy.reason == NO_DRAFT_TOKENS_YET and quiet.figures.acceptance_rate is None
