"""spec.speculation.tuning = Auto: whether the pods roll onto a new draft length now. Pure: the applied length
comes in from status, the time from the caller.

Auto applies ONE draft length, the recommended schedule's length with the highest expected speedup over the load the
pods carry (the window's reads of the running batch size; the cost model's batch sizes evenly while it has too few),
rendered as a plain num_speculative_tokens (0: the target alone, no draft). Not vLLM's per-batch-size
schedule: on the H200 with vLLM 0.26 (bench/results/gpu-lane-cost-2026-12-05.json) a schedule made the V1 runner drop
to piecewise CUDA graphs and still ran the draft at K = 0, so the recommended schedule served at 0.43-0.63x of the
best static length, and "0 everywhere" at 0.16-0.41x of no speculation. A static length keeps full graphs on every
release, so Auto needs no vLLM feature (and works under data parallelism).

The length is rendered into the pods the operator owns and reported in status.speculation.tuned; the user's spec is
never written, so Auto cannot fight Argo CD or Flux over it. A change rolls the pods the way the Deployment's strategy
rolls any template change (one surge pod, none removed before its successor passes its probe), so it is rationed:
only for a gain of tuningMinGain or more in expected speedup over what runs, at most once per tuningIntervalSeconds.
The window measures acceptance only up to the length that runs, so Auto can lower a length but never raise it past
what runs (a change of the speculation settings starts over); at 0 nothing is measured, and 0 holds like a Fallback.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dflash_operator.api import DFlashDeployment
from dflash_operator.api.models import BatchSizeTokens
from dflash_operator.api.status import SpeculationStatus
from dflash_operator.api.tuning import RecommendedRange, TunedSchedule
from dflash_operator.runtime.clock import parse_rfc3339, rfc3339
from dflash_operator.speculation import autopilot, tuner

# Event reason of a draft-length change.
SPECULATION_TUNED = "SpeculationTuned"
# The one range Auto's length covers (the API's largest batch size).
_ALL_SIZES = (1, 1024)


@dataclass(frozen=True)
class TuningDecision:
    tuned: TunedSchedule | None  # what the pods run from now on (None: spec.numSpeculativeTokens everywhere)
    note: str | None = None  # why Auto holds back, for people (status.speculation.recommendation.message)
    event: str | None = None  # the SpeculationTuned event's message when the schedule changes now


def in_force(dfd: DFlashDeployment, previous: SpeculationStatus | None) -> TunedSchedule | None:
    """The schedule Auto applied, while it still applies: the same target, draft and speculation settings (the
    window's fingerprint), tuning still Auto and no schedule of the user's own."""
    still = autopilot.current(dfd, previous)
    spec = dfd.spec.speculation
    if still is None or spec.tuning != "Auto" or spec.tokens_by_batch_size:
        return None
    return still.tuned


def tuned_length(tuned: TunedSchedule | None) -> int | None:
    """The one draft length Auto applied, or None (none applied, or a schedule of several lengths, which this
    operator never applies)."""
    if tuned is None or len({r.num_speculative_tokens for r in tuned.schedule}) != 1:
        return None
    return tuned.schedule[0].num_speculative_tokens


def as_served(dfd: DFlashDeployment, tuned: TunedSchedule | None) -> DFlashDeployment:
    """The DFlashDeployment as the pods should run it: Auto's length as spec.numSpeculativeTokens, or for 0 a
    schedule of 0 at every batch size (rendered as the target alone, render.serving.drafts_anywhere), so the same
    code renders it. Only for rendering; never written."""
    k = tuned_length(tuned)
    if k is None:
        return dfd
    if k > 0:
        return dfd.model_copy(update={"spec": dfd.spec.model_copy(update={"num_speculative_tokens": k})})
    off = [BatchSizeTokens(from_batch_size=_ALL_SIZES[0], to_batch_size=_ALL_SIZES[1], num_speculative_tokens=0)]
    speculation = dfd.spec.speculation.model_copy(update={"tokens_by_batch_size": off})
    return dfd.model_copy(update={"spec": dfd.spec.model_copy(update={"speculation": speculation})})


def best_length(found: tuner.Recommendation, acceptance_by_position: Sequence[float], cost: tuner.CostModel,
                weights: Mapping[int, float]) -> tuple[int, float]:
    """Of the recommended schedule's lengths, the one with the highest expected speedup when run at every batch size
    (ties: the shorter); with its speedup."""
    best_k, best = 0, 1.0
    for k in sorted({r.k for r in found.ranges} - {0}):
        speedup = tuner.schedule_speedup(k, acceptance_by_position, cost, weights)
        if speedup > best * (1 + 1e-9):
            best_k, best = k, speedup
    return best_k, best


def decide(dfd: DFlashDeployment, tuned: TunedSchedule | None, found: tuner.Recommendation | None,
           acceptance_by_position: Sequence[float], cost: tuner.CostModel | None, now: datetime.datetime,
           traffic: Mapping[int, float] | None = None) -> TuningDecision:
    """What the pods should run after this window: `tuned` kept, replaced by `found`, or nothing (Auto off or
    unable). `found` is this window's recommendation, None when there is none. `traffic`: the window's reads per
    running batch size, which weigh the lengths by the load the pods carry; None (too few reads): the cost model's
    batch sizes count evenly."""
    spec = dfd.spec
    if spec.speculation.tuning != "Auto":
        return TuningDecision(None)
    if spec.speculation.tokens_by_batch_size:
        return TuningDecision(None, "spec.speculation.tokensByBatchSize is set: the pods run it, Auto leaves it")
    if found is None or cost is None:
        return TuningDecision(tuned)  # nothing new measured: what runs stays
    waited = (now - parse_rfc3339(tuned.since)).total_seconds() if tuned is not None else None
    if waited is not None and waited < spec.speculation.tuning_interval_seconds:
        return TuningDecision(tuned)
    running = tuned_length(tuned)
    if running is None:
        running = spec.num_speculative_tokens
    weights = found.weights(traffic)
    try:
        before = tuner.schedule_speedup(running, acceptance_by_position, cost, weights)
    except ValueError as unknown:  # a running draft length the cost model or the window never measured
        return TuningDecision(tuned, f"Auto cannot judge what runs: {unknown}")
    k, after = best_length(found, acceptance_by_position, cost, weights)
    if k == running or after < before * (1 + spec.speculation.tuning_min_gain):
        return TuningDecision(tuned)
    summary, replaced = (f"{_ALL_SIZES[0]}-{_ALL_SIZES[1]}:{length}" for length in (k, running))
    applied = TunedSchedule(
        schedule=[RecommendedRange(from_batch_size=_ALL_SIZES[0], to_batch_size=_ALL_SIZES[1],
                                   num_speculative_tokens=k, expected_speedup=round(after, 2))],
        summary=summary, since=rfc3339(now), expected_speedup=round(after, 2), replaced=replaced,
        replaced_expected_speedup=round(before, 2),
        weighted_by="Traffic" if traffic is not None else "MeasuredBatchSizes")
    what = "the target alone, no draft length pays" if k == 0 else f"{k} draft tokens"
    return TuningDecision(applied, event=(
        f"the pods roll onto {summary} (from-to:k; {what}): expected {after:.2f}x of no speculation "
        f"{_over(weights, traffic is not None)}, against {before:.2f}x with {replaced}; next change no sooner than "
        f"{spec.speculation.tuning_interval_seconds} s from now"))


def _over(weights: Mapping[int, float], traffic: bool) -> str:
    """What the expected speedups were averaged over, for the event."""
    if not traffic:
        sizes = ", ".join(str(b) for b in weights)
        return f"over batch sizes {sizes} (evenly: too few reads of the running batch size)"
    total = sum(weights.values())
    busiest = sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:3]
    shares = ", ".join(f"{b} ({w / total:.0%})" for b, w in busiest)
    return f"over the window's traffic ({total:.0f} reads of the running batch size; most at {shares})"
