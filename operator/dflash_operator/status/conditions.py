"""Status of a DFlashDeployment, computed purely from what was observed.

Conditions follow kstatus: `Reconciling` and `Stalled` are "abnormal-true" (True means attention), `Ready` is True
once every wanted pod passed the speculative probe. lastTransitionTime moves only when a condition's status changes,
so an unchanged world gives a byte-identical status and no write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from dflash_operator.api.models import Condition, DFlashDeploymentStatus
from dflash_operator.status import trouble
from dflash_operator.status.trouble import Trouble

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
SPECULATION_HEALTHY = "SpeculationHealthy"
CACHE_READY = "CacheReady"
MODELS_COMPATIBLE = "ModelsCompatible"
CONDITION_ORDER = (READY, RECONCILING, STALLED, CACHE_READY, MODELS_COMPATIBLE, SPECULATION_HEALTHY)


ConditionStatus = Literal["True", "False", "Unknown"]


def condition(type_: str, status: ConditionStatus, reason: str, message: str) -> Condition:
    """A condition as a reconcile pass decides it; merge_conditions stamps generation and transition time."""
    return Condition(type=type_, status=status, reason=reason, message=message)


@dataclass(frozen=True)
class Event:
    """An event to post on the DFlashDeployment."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class RolloutFacts:
    """What the serving Deployment reports, reduced to the numbers status needs."""

    desired: int
    replicas: int
    updated: int
    ready: int
    observed_current: bool  # the Deployment controller has seen the Deployment's latest generation


def rollout_facts(deployment: dict[str, Any] | None, desired: int) -> RolloutFacts:
    if deployment is None:
        return RolloutFacts(desired, 0, 0, 0, False)
    status = deployment.get("status") or {}
    generation = deployment.get("metadata", {}).get("generation", 0)
    return RolloutFacts(
        desired=desired,
        replicas=status.get("replicas", 0),
        updated=status.get("updatedReplicas", 0),
        ready=status.get("readyReplicas", 0),
        observed_current=status.get("observedGeneration", -1) >= generation,
    )


SPECULATIVE_PROBE = "the speculative probe"
PLAIN_PROBE = "the completion probe (Fallback: the target alone, no draft)"
UNSCHEDULED_PROBE = "the completion probe (the schedule proposes no draft tokens at batch size 1)"


def rollout_conditions(facts: RolloutFacts, probe: str = SPECULATIVE_PROBE, trouble: Trouble | None = None
                       ) -> list[Condition]:
    done = (
        facts.observed_current
        and facts.updated >= facts.desired
        and facts.ready >= facts.desired
        and facts.replicas == facts.desired
    )
    if done:
        reason, message = ("ScaledToZero", "spec.replicas is 0") if facts.desired == 0 else (
            "AllReplicasReady", f"{facts.ready}/{facts.desired} pods passed {probe}")
        return [
            condition(READY, "True", reason, message),
            condition(RECONCILING, "False", reason, message),
            condition(STALLED, "False", "Reconciled", "the spec is applied"),
        ]
    if trouble is not None:
        return trouble_conditions(trouble)
    if facts.updated < facts.desired or not facts.observed_current:
        reason = "RollingOut"
        message = f"{facts.updated}/{facts.desired} pods run the current spec, {facts.ready} ready"
    else:
        reason = "WaitingForSpeculativeProbe"
        message = f"{facts.ready}/{facts.desired} pods passed {probe}"
    return [
        condition(READY, "False", reason, message),
        condition(RECONCILING, "True", reason, message),
        condition(STALLED, "False", "Reconciling", "the spec is applied; waiting for the pods"),
    ]


def trouble_conditions(trouble: Trouble) -> list[Condition]:
    """What the cluster reports as the reason nothing serves: Ready says it; Stalled too when it will not pass."""
    if trouble.stalled:
        return stalled_conditions(trouble.reason, trouble.message)
    return [
        condition(READY, "False", trouble.reason, trouble.message),
        condition(RECONCILING, "True", trouble.reason, trouble.message),
        condition(STALLED, "False", "Reconciling", "waiting for the cluster: " + trouble.message),
    ]


def stalled_conditions(reason: str, message: str) -> list[Condition]:
    return [
        condition(READY, "False", reason, message),
        condition(RECONCILING, "False", reason, message),
        condition(STALLED, "True", reason, message),
    ]


def cache_ready_conditions() -> list[Condition]:
    return [
        condition(CACHE_READY, "True", "Cached", "target and draft are cached and verified"),
        condition(MODELS_COMPATIBLE, "True", "PairChecked", "the draft fits the target"),
    ]


def waiting_for_cache_conditions(message: str, trouble: Trouble | None = None) -> list[Condition]:
    if trouble is not None:
        return [
            *trouble_conditions(trouble),
            condition(CACHE_READY, "False", trouble.reason, f"{message}; {trouble.message}"),
            condition(MODELS_COMPATIBLE, "Unknown", "WaitingForCache", "checked once both models are cached"),
        ]
    return [
        condition(READY, "False", "CacheNotReady", message),
        condition(RECONCILING, "True", "Downloading", message),
        condition(STALLED, "False", "Downloading", message),
        condition(CACHE_READY, "False", "Downloading", message),
        condition(MODELS_COMPATIBLE, "Unknown", "WaitingForCache", "checked once both models are cached"),
    ]


def cache_failed_conditions(message: str) -> list[Condition]:
    return [
        *stalled_conditions("CacheFailed", message),
        condition(CACHE_READY, "False", "CacheFailed", message),
        condition(MODELS_COMPATIBLE, "Unknown", "WaitingForCache", "checked once both models are cached"),
    ]


def incompatible_pair_conditions(problems: list[str]) -> list[Condition]:
    message = "; ".join(problems)
    return [
        *stalled_conditions("IncompatiblePair", f"no GPU pod is created: {message}"),
        condition(CACHE_READY, "True", "Cached", "target and draft are cached and verified"),
        condition(MODELS_COMPATIBLE, "False", "IncompatiblePair", message),
    ]


def needs_newer_vllm_conditions(problems: list[str]) -> list[Condition]:
    message = "; ".join(problems)
    return [
        *stalled_conditions("NeedsNewerVLLM", f"no GPU pod is created: {message}"),
        *cache_ready_conditions(),
    ]


def merge_conditions(
    old: list[dict[str, Any]], new: list[Condition], generation: int, now: str
) -> list[Condition]:
    """New conditions replace old ones of the same type; types not mentioned are kept as they were."""
    by_type = {}
    for written in old:
        try:
            by_type[written["type"]] = Condition.model_validate(written)
        except (KeyError, ValidationError):
            continue  # not a condition this operator wrote; the new set replaces it
    for decided in new:
        previous = by_type.get(decided.type)
        transition = previous.last_transition_time if previous and previous.status == decided.status else now
        by_type[decided.type] = decided.model_copy(
            update={"observed_generation": generation, "last_transition_time": transition})
    order = {t: i for i, t in enumerate(CONDITION_ORDER)}
    return sorted(by_type.values(), key=lambda c: (order.get(c.type, len(order)), c.type))


def to_wire(status: DFlashDeploymentStatus) -> dict[str, Any]:
    """The status as the merge patch sends it: camelCase, unset fields left out, except in `speculation`, which a
    pass decides whole: its unset fields go as null, so a figure or a fallback that no longer holds is removed."""
    wire = status.model_dump(by_alias=True, exclude_none=True)
    if status.speculation is not None:
        wire["speculation"] = status.speculation.model_dump(by_alias=True)
    return wire


def merge_patched(target: Any, patch: Any) -> Any:
    """`target` after a JSON merge patch (RFC 7386), which is how the status write lands on the server."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patched(result.get(key), value)
    return result


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """True when a write is needed; fields the operator does not own (e.g. kopf's own bookkeeping) are ignored."""
    old = old or {}
    return any(merge_patched(old.get(key), value) != old.get(key) for key, value in new.items())


# Ready reasons that report something wrong in the cluster (status.trouble): their transitions are warnings.
TROUBLE_REASONS = frozenset({trouble.UNSCHEDULABLE, trouble.IMAGE_PULL_BACK_OFF, trouble.CRASH_LOOP_BACK_OFF,
                             trouble.OOM_KILLED, trouble.PODS_REFUSED, trouble.PROBE_FAILING, trouble.CLAIM_PENDING})
# Conditions whose transitions are worth an event on the DFlashDeployment (Reconciling only restates Ready).
_EVENT_CONDITIONS = (READY, STALLED, CACHE_READY, MODELS_COMPATIBLE, SPECULATION_HEALTHY)


def transition_events(old: list[dict[str, Any]], new: list[Condition]) -> list[Event]:
    """One event per condition whose status or reason changed; a warning where the change needs attention.

    A condition's first appearance is not a transition: a new DFlashDeployment posts events only for what needs
    attention (a stall, an incompatible pair), not one per condition it starts with."""
    before = {c["type"]: c for c in old}
    events = []
    for cond in new:
        if cond.type not in _EVENT_CONDITIONS:
            continue
        previous = before.get(cond.type)
        if previous and (previous["status"], previous["reason"]) == (cond.status, cond.reason):
            continue
        bad = (cond.type == STALLED and cond.status == "True") or (
            cond.type in (MODELS_COMPATIBLE, SPECULATION_HEALTHY) and cond.status == "False") or (
            cond.type == READY and cond.status == "False" and cond.reason in TROUBLE_REASONS)
        if previous is None and not bad:
            continue
        events.append(Event("Warning" if bad else "Normal", cond.reason,
                            f"{cond.type}={cond.status}: {cond.message}"))
    return events
