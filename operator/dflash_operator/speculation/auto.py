"""spec.speculation.tuning = Auto: whether the pods roll onto the recommended schedule now. Pure: the applied
schedule comes in from status, the time from the caller.

The schedule is rendered into the pods the operator owns (vLLM's num_speculative_tokens_per_batch_size) and reported
in status.speculation.tuned; the user's spec is never written, so Auto cannot fight Argo CD or Flux over it. A change
rolls the pods the way the Deployment's strategy rolls any template change (one surge pod, none removed before its
successor passes the speculative probe), so it is rationed: only for a gain of tuningMinGain or more in expected
speedup over what runs, at most once per tuningIntervalSeconds.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass

from dflash_cache.pairing import parse_version
from dflash_operator.api import DFlashDeployment
from dflash_operator.api.models import BatchSizeTokens
from dflash_operator.api.status import SpeculationStatus
from dflash_operator.api.tuning import RecommendedRange, TunedSchedule
from dflash_operator.runtime.clock import parse_rfc3339, rfc3339
from dflash_operator.speculation import autopilot, tuner

# Event reason of a schedule change.
SPECULATION_TUNED = "SpeculationTuned"
# vLLM's num_speculative_tokens_per_batch_size (vllm_features.FEATURES, the same field for a user's schedule).
PER_BATCH_SIZE_SINCE = (0, 24)
# vLLM turns the per-batch-size schedule off under data parallelism.
_DATA_PARALLEL = re.compile(r"^--data-parallel-size(?:=(\d+))?$")


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


def as_served(dfd: DFlashDeployment, tuned: TunedSchedule | None) -> DFlashDeployment:
    """The DFlashDeployment as the pods should run it: with Auto's schedule where a user's tokensByBatchSize would
    be, so it is rendered by the same code (and vLLM takes it the same way). Only for rendering; never written."""
    if tuned is None:
        return dfd
    schedule = [BatchSizeTokens(from_batch_size=r.from_batch_size, to_batch_size=r.to_batch_size,
                                num_speculative_tokens=r.num_speculative_tokens) for r in tuned.schedule]
    speculation = dfd.spec.speculation.model_copy(update={"tokens_by_batch_size": schedule})
    return dfd.model_copy(update={"spec": dfd.spec.model_copy(update={"speculation": speculation})})


def decide(dfd: DFlashDeployment, tuned: TunedSchedule | None, found: tuner.Recommendation | None,
           acceptance_by_position: Sequence[float], cost: tuner.CostModel | None, vllm_version: str | None,
           now: datetime.datetime) -> TuningDecision:
    """What the pods should run after this window: `tuned` kept, replaced by `found`, or nothing (Auto off or
    unable). `found` is this window's recommendation, None when there is none."""
    spec = dfd.spec
    if spec.speculation.tuning != "Auto":
        return TuningDecision(None)
    if spec.speculation.tokens_by_batch_size:
        return TuningDecision(None, "spec.speculation.tokensByBatchSize is set: the pods run it, Auto leaves it")
    version = parse_version(vllm_version)
    if version is None or version < PER_BATCH_SIZE_SINCE:
        return TuningDecision(None, f"Auto needs vLLM {PER_BATCH_SIZE_SINCE[0]}.{PER_BATCH_SIZE_SINCE[1]}+ "
                                    f"(num_speculative_tokens_per_batch_size); the serving image is "
                                    f"{'vLLM ' + vllm_version if vllm_version else 'of an unknown vLLM'}: "
                                    f"recommending only")
    if _data_parallel(spec.extra_args):
        return TuningDecision(None, "vLLM turns the per-batch-size schedule off under data parallelism "
                                    "(--data-parallel-size in extraArgs): recommending only")
    if found is None or cost is None:
        return TuningDecision(tuned)  # nothing new measured: what runs stays
    waited = (now - parse_rfc3339(tuned.since)).total_seconds() if tuned is not None else None
    if waited is not None and waited < spec.speculation.tuning_interval_seconds:
        return TuningDecision(tuned)
    running: Sequence[tuner.ScheduleRange] | int = (
        _ranges(tuned.schedule) if tuned is not None else spec.num_speculative_tokens)
    weights = dict.fromkeys(found.batch_sizes, 1.0)
    try:
        before = tuner.schedule_speedup(running, acceptance_by_position, cost, weights)
    except ValueError as unknown:  # a running draft length the cost model or the window never measured
        return TuningDecision(tuned, f"Auto cannot judge what runs: {unknown}")
    after = tuner.schedule_speedup(found.ranges, acceptance_by_position, cost, weights)
    new_summary = _summary(found.ranges)
    running_summary = _summary(running) if not isinstance(running, int) else f"1-1024:{running}"
    if new_summary == running_summary or after < before * (1 + spec.speculation.tuning_min_gain):
        return TuningDecision(tuned)
    applied = TunedSchedule(
        schedule=[RecommendedRange(from_batch_size=r.from_batch_size, to_batch_size=r.to_batch_size,
                                   num_speculative_tokens=r.k, expected_speedup=round(r.expected_speedup_low, 2))
                  for r in found.ranges],
        summary=new_summary, since=rfc3339(now), expected_speedup=round(after, 2), replaced=running_summary,
        replaced_expected_speedup=round(before, 2))
    sizes = ", ".join(str(b) for b in found.batch_sizes)
    return TuningDecision(applied, event=(
        f"the pods roll onto draft lengths {new_summary} (from-to:k): expected {after:.2f}x of no speculation over "
        f"batch sizes {sizes}, against {before:.2f}x with {running_summary}; next change no sooner than "
        f"{spec.speculation.tuning_interval_seconds} s from now"))


def _ranges(schedule: Sequence[RecommendedRange]) -> list[tuner.ScheduleRange]:
    return [tuner.ScheduleRange(r.from_batch_size, r.to_batch_size, r.num_speculative_tokens, r.expected_speedup,
                                r.expected_speedup) for r in schedule]


def _summary(ranges: Sequence[tuner.ScheduleRange]) -> str:
    return ", ".join(f"{r.from_batch_size}-{r.to_batch_size}:{r.k}" for r in ranges)


def _data_parallel(extra_args: Sequence[str]) -> bool:
    for i, arg in enumerate(extra_args):
        match = _DATA_PARALLEL.match(arg)
        if match:
            size = match.group(1) or (extra_args[i + 1] if i + 1 < len(extra_args) else "1")
            return size.isdigit() and int(size) > 1
    return False
