"""What the window's acceptance means: SpeculationHealthy, and when Fallback takes the draft out of service.

Pure: the previous decision comes in from status, the time from the caller.

Hysteresis, so the condition does not flap on a window hovering at the floor: acceptance goes under the floor ->
False at once (the window already averages `windowSeconds` of traffic); it counts as recovered only at floor +
RECOVERY_MARGIN. A window with fewer than the configured draft tokens (a quiet period) decides nothing: the last
verdict and figures stand. Fallback never flaps either: once taken it holds until the fields it fell back from
change or the user asks for speculation back (a new value of the resume annotation), so no measurement can undo it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from dflash_operator.api import GROUP, DFlashDeployment
from dflash_operator.api.models import Condition, SpeculationFallback, SpeculationStatus
from dflash_operator.reconcile.ledger import fingerprint
from dflash_operator.runtime.clock import parse_rfc3339, rfc3339
from dflash_operator.speculation.window import WindowFigures
from dflash_operator.status.conditions import SPECULATION_HEALTHY, condition

RESUME_ANNOTATION = f"{GROUP}/resume-speculation"
RECOVERY_MARGIN = 0.05

# Reasons of SpeculationHealthy.
NO_DRAFT_TOKENS_YET = "NoDraftTokensYet"
ABOVE_FLOOR = "AcceptanceAboveFloor"
BELOW_FLOOR = "AcceptanceBelowFloor"
FELL_BACK = "FellBackToTarget"


@dataclass(frozen=True)
class Verdict:
    figures: SpeculationStatus
    healthy: Condition
    started_fallback: bool


def floor(dfd: DFlashDeployment) -> float:
    spec = dfd.spec
    chosen = spec.speculation.min_acceptance_rate
    return spec.readiness.min_acceptance_rate if chosen is None else chosen


def speculation_fingerprint(dfd: DFlashDeployment) -> str:
    """What the window's figures and verdict judge: the target, draft, image, token count, spec.speculation, the
    floor and the resume annotation. When it changes, figures and verdict start afresh (and a Fallback ends): a new
    draft or a user's request for speculation back is not judged on the old readings. Defaults are left out, so an
    operator release that adds a field does not end every Fallback in force."""
    spec = dfd.spec
    return fingerprint([spec.target.model_dump(exclude_defaults=True), spec.draft.model_dump(exclude_defaults=True),
                        spec.image, spec.num_speculative_tokens, spec.speculation.model_dump(exclude_defaults=True),
                        floor(dfd), resume_token(dfd)])[:16]


def resume_token(dfd: DFlashDeployment) -> str | None:
    return (dfd.metadata.get("annotations") or {}).get(RESUME_ANNOTATION)


def pauses_under_load(dfd: DFlashDeployment) -> bool:
    """spec.speculation.tokensByBatchSize turns speculation off for some batch sizes (a range of 0 tokens)."""
    return any(r.num_speculative_tokens == 0 for r in dfd.spec.speculation.tokens_by_batch_size or [])


def current(dfd: DFlashDeployment, previous: SpeculationStatus | None) -> SpeculationStatus | None:
    """The previous figures, if they judge what the spec asks for now; None when they judged something else."""
    if previous is None or previous.fingerprint != speculation_fingerprint(dfd):
        return None
    return previous


def fallback_in_force(dfd: DFlashDeployment, previous: SpeculationStatus | None) -> SpeculationFallback | None:
    """The Fallback status records, unless the spec moved on or the user asked for speculation back."""
    still = current(dfd, previous)
    if still is None or dfd.spec.speculation.on_low_acceptance != "Fallback":
        return None
    return still.fallback


def fallback_condition(dfd: DFlashDeployment, fallback: SpeculationFallback) -> Condition:
    name = dfd.metadata["name"]
    return condition(SPECULATION_HEALTHY, "False", FELL_BACK, (
        f"serving the target without the draft since {fallback.since}: {fallback.message}. Speculation comes back "
        f"when the draft, target, image or spec.speculation change, or with: kubectl annotate dfd {name} "
        f"{RESUME_ANNOTATION}=\"$(date +%s)\" --overwrite"))


def judge(dfd: DFlashDeployment, window: WindowFigures | None, previous: SpeculationStatus | None,
          previous_healthy: dict | None, now: datetime.datetime, min_draft_tokens: int) -> Verdict:
    """The window's figures and SpeculationHealthy, and whether Fallback starts now."""
    spec = dfd.spec.speculation
    low = floor(dfd)
    judged = speculation_fingerprint(dfd)
    held = fallback_in_force(dfd, previous)
    if held is not None:
        assert previous is not None
        return Verdict(previous, fallback_condition(dfd, held), False)
    if current(dfd, previous) is None:
        previous, previous_healthy = None, None  # a new draft, settings or a resume: judged afresh
    enough = window is not None and window.increase.draft_tokens >= max(1, min_draft_tokens)
    if not enough:
        return _quiet(previous, previous_healthy, spec.window_seconds, window, min_draft_tokens, judged)

    assert window is not None
    counts = window.increase
    rate = counts.acceptance_rate or 0.0
    below_since = previous.below_floor_since if previous is not None else None
    if rate < low:
        below_since = below_since or rfc3339(now)
    elif rate >= low + RECOVERY_MARGIN:
        below_since = None
    figures = SpeculationStatus(
        acceptance_rate=round(rate, 2),
        mean_accepted_length=_round(counts.mean_accepted_length),
        acceptance_by_position=[round(p, 2) for p in counts.acceptance_by_position or []] or None,
        window_seconds=spec.window_seconds,
        pods_measured=window.pods,
        below_floor_since=below_since,
        fingerprint=judged,
    )
    seen = f"acceptance {rate:.2f} over the last {spec.window_seconds} s"
    if below_since is None:
        return Verdict(figures, condition(SPECULATION_HEALTHY, "True", ABOVE_FLOOR, f"{seen}, floor {low:g}"), False)

    held_for = (now - parse_rfc3339(below_since)).total_seconds()
    why = f"{seen} is under the floor {low:g} (recovery at {low + RECOVERY_MARGIN:g}) since {below_since}"
    if spec.on_low_acceptance == "Fallback" and held_for >= spec.fallback_after_seconds:
        fallback = SpeculationFallback(
            since=rfc3339(now), message=f"{why}, for {held_for:.0f} s (fallbackAfterSeconds "
                                         f"{spec.fallback_after_seconds})")
        return Verdict(figures.model_copy(update={"fallback": fallback}), fallback_condition(dfd, fallback), True)
    if spec.on_low_acceptance == "Fallback":
        why += f"; the pods fall back to the target alone after {spec.fallback_after_seconds} s of this"
    return Verdict(figures, condition(SPECULATION_HEALTHY, "False", BELOW_FLOOR, why), False)


def _quiet(previous: SpeculationStatus | None, previous_healthy: dict | None, window_seconds: int,
           window: WindowFigures | None, min_draft_tokens: int, judged: str) -> Verdict:
    """Too little traffic in the window to judge: the last verdict stands (a quiet night is not a bad draft)."""
    if previous is not None and previous_healthy is not None and previous_healthy.get("reason") in (ABOVE_FLOOR,
                                                                                                     BELOW_FLOOR):
        kept = Condition.model_validate(previous_healthy)
        return Verdict(previous, condition(SPECULATION_HEALTHY, kept.status, kept.reason, kept.message), False)
    seen = ("no running pod exposes spec-decode counters yet" if window is None
            else f"fewer than {min_draft_tokens} draft tokens in the last {window_seconds} s, the least a "
                 f"verdict needs")
    return Verdict(SpeculationStatus(fingerprint=judged),
                   condition(SPECULATION_HEALTHY, "Unknown", NO_DRAFT_TOKENS_YET, seen), False)


def _round(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None
