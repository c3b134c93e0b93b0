"""Status of a DFlashDeployment, computed purely from what was observed.

Conditions follow kstatus: `Reconciling` and `Stalled` are "abnormal-true" (True means attention), `Ready` is True
once every wanted pod passed the speculative probe. lastTransitionTime moves only when a condition's status changes,
so an unchanged world gives a byte-identical status and no write.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
SPECULATION_HEALTHY = "SpeculationHealthy"
CACHE_READY = "CacheReady"
MODELS_COMPATIBLE = "ModelsCompatible"
CONDITION_ORDER = (READY, RECONCILING, STALLED, CACHE_READY, MODELS_COMPATIBLE, SPECULATION_HEALTHY)


@dataclass(frozen=True)
class ConditionSpec:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class RolloutFacts:
    """What the serving Deployment reports, reduced to the numbers status needs."""

    desired: int
    replicas: int
    updated: int
    ready: int
    available: int
    observed_current: bool  # the Deployment controller has seen the Deployment's latest generation


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def rollout_facts(deployment: dict[str, Any] | None, desired: int) -> RolloutFacts:
    if deployment is None:
        return RolloutFacts(desired, 0, 0, 0, 0, False)
    status = deployment.get("status") or {}
    generation = deployment.get("metadata", {}).get("generation", 0)
    return RolloutFacts(
        desired=desired,
        replicas=status.get("replicas", 0),
        updated=status.get("updatedReplicas", 0),
        ready=status.get("readyReplicas", 0),
        available=status.get("availableReplicas", 0),
        observed_current=status.get("observedGeneration", -1) >= generation,
    )


def rollout_conditions(facts: RolloutFacts) -> list[ConditionSpec]:
    done = (
        facts.observed_current
        and facts.updated >= facts.desired
        and facts.ready >= facts.desired
        and facts.replicas == facts.desired
    )
    if done:
        reason, message = ("ScaledToZero", "spec.replicas is 0") if facts.desired == 0 else (
            "AllReplicasReady", f"{facts.ready}/{facts.desired} pods passed the speculative probe")
        return [
            ConditionSpec(READY, "True", reason, message),
            ConditionSpec(RECONCILING, "False", reason, message),
            ConditionSpec(STALLED, "False", "Reconciled", "the spec is applied"),
        ]
    if facts.updated < facts.desired or not facts.observed_current:
        reason = "RollingOut"
        message = f"{facts.updated}/{facts.desired} pods run the current spec, {facts.ready} ready"
    else:
        reason = "WaitingForSpeculativeProbe"
        message = f"{facts.ready}/{facts.desired} pods passed the speculative probe"
    return [
        ConditionSpec(READY, "False", reason, message),
        ConditionSpec(RECONCILING, "True", reason, message),
        ConditionSpec(STALLED, "False", "Reconciling", "the spec is applied; waiting for the pods"),
    ]


def stalled_conditions(reason: str, message: str) -> list[ConditionSpec]:
    return [
        ConditionSpec(READY, "False", reason, message),
        ConditionSpec(RECONCILING, "False", reason, message),
        ConditionSpec(STALLED, "True", reason, message),
    ]


def cache_ready_conditions() -> list[ConditionSpec]:
    return [
        ConditionSpec(CACHE_READY, "True", "Cached", "target and draft are cached and verified"),
        ConditionSpec(MODELS_COMPATIBLE, "True", "PairChecked", "the draft fits the target"),
    ]


def waiting_for_cache_conditions(message: str) -> list[ConditionSpec]:
    return [
        ConditionSpec(READY, "False", "CacheNotReady", message),
        ConditionSpec(RECONCILING, "True", "Downloading", message),
        ConditionSpec(STALLED, "False", "Downloading", message),
        ConditionSpec(CACHE_READY, "False", "Downloading", message),
        ConditionSpec(MODELS_COMPATIBLE, "Unknown", "WaitingForCache", "checked once both models are cached"),
    ]


def cache_failed_conditions(message: str) -> list[ConditionSpec]:
    return [
        *stalled_conditions("CacheFailed", message),
        ConditionSpec(CACHE_READY, "False", "CacheFailed", message),
        ConditionSpec(MODELS_COMPATIBLE, "Unknown", "WaitingForCache", "checked once both models are cached"),
    ]


def incompatible_pair_conditions(problems: list[str]) -> list[ConditionSpec]:
    message = "; ".join(problems)
    return [
        *stalled_conditions("IncompatiblePair", f"no GPU pod is created: {message}"),
        ConditionSpec(CACHE_READY, "True", "Cached", "target and draft are cached and verified"),
        ConditionSpec(MODELS_COMPATIBLE, "False", "IncompatiblePair", message),
    ]


def merge_conditions(
    old: list[dict[str, Any]], new: list[ConditionSpec], generation: int, now: str
) -> list[dict[str, Any]]:
    """New conditions replace old ones of the same type; types not mentioned are kept as they were."""
    by_type = {c["type"]: c for c in old}
    for spec in new:
        previous = by_type.get(spec.type)
        transition = previous["lastTransitionTime"] if previous and previous.get("status") == spec.status else now
        by_type[spec.type] = {
            "type": spec.type,
            "status": spec.status,
            "reason": spec.reason,
            "message": spec.message,
            "observedGeneration": generation,
            "lastTransitionTime": transition,
        }
    order = {t: i for i, t in enumerate(CONDITION_ORDER)}
    return sorted(by_type.values(), key=lambda c: (order.get(c["type"], len(order)), c["type"]))


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """True when a write is needed; fields the operator does not own (e.g. kopf's own bookkeeping) are ignored."""
    old = old or {}
    return any(old.get(key) != value for key, value in new.items())
