"""One reconcile pass: parse -> render -> apply -> status. Called by every handler; level-based and idempotent."""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from dflash_operator import cache_outcome, speculation, status
from dflash_operator.api import DFlashDeployment
from dflash_operator.kube import FIELD_MANAGER, Kube
from dflash_operator.pairing import speculative_tokens_problems
from dflash_operator.render import (
    SERVING_PORT, CacheFacts, InvalidSpec, RenderConfig, endpoint, selector_string, serving_objects, validate,
)
from dflash_operator.render_cache import CacheConfig, cache_field_manager, cache_name, render_cache_job, render_cache_pvc

log = logging.getLogger(__name__)

# (event type, reason, message) -> posted on the DFlashDeployment
EventSink = Callable[[str, str, str], None]


class RetryLater(Exception):
    """A transient API failure (conflict, throttling, server error): the handler retries with backoff."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


@dataclass(frozen=True)
class OperatorConfig:
    render: RenderConfig = field(default_factory=RenderConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    metrics_timeout_seconds: float = 2.0
    # Empty allows every pod address; tests pass 127.0.0.0/8 so nothing but loopback is ever dialled.
    metrics_allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()


def _validation_message(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def _transient(error: ApiException) -> bool:
    return error.status in (409, 429) or (error.status or 0) >= 500


def reconcile(kube: Kube, body: dict[str, Any], config: OperatorConfig, emit: EventSink,
              measure: bool = False) -> None:
    """Brings the children in line with the spec and writes status if anything changed.

    Order matters: the paired cache first; the serving objects only once both models are cached, verified and
    compatible, so no GPU pod is ever created for a pair that cannot work.
    `measure` also reads the ready pods' /metrics (the speculation timer); otherwise the last measurement stays."""
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation", 0)
    old_status = body.get("status") or {}

    try:
        dfd = DFlashDeployment.model_validate(body)
        validate(dfd, config.render)
    except ValidationError as error:
        _stall(kube, body, "InvalidSpec", _validation_message(error), emit)
        return
    except InvalidSpec as error:
        _stall(kube, body, error.reason, str(error), emit)
        return

    job = _apply_all(kube, body, [render_cache_pvc(dfd), render_cache_job(dfd, config.cache)], emit,
                     cache_field_manager(dfd))
    if job is None:
        return  # stalled: the API server rejected a cache object
    outcome = _cache_outcome(kube, namespace, job)
    new_status: dict[str, Any] = {
        "observedGeneration": generation,
        "selector": selector_string(name),
        "cache": _cache_status(dfd, outcome),
    }
    if outcome.target_commit or outcome.draft_commit:
        new_status["resolved"] = {"targetCommit": outcome.target_commit, "draftCommit": outcome.draft_commit}

    gate = _cache_gate(outcome, dfd.spec.num_speculative_tokens)
    if gate is not None:
        _write_status(kube, body, old_status, new_status, gate, emit)
        return

    cache = CacheFacts(claim_name=cache_name(dfd), target_commit=outcome.target_commit,
                       draft_commit=outcome.draft_commit)
    deployment = _apply_all(kube, body, serving_objects(dfd, config.render, cache), emit)
    if deployment is None:
        return
    facts = status.rollout_facts(deployment, dfd.spec.replicas)
    conditions = status.cache_ready_conditions() + status.rollout_conditions(facts)
    new_status.update({"replicas": facts.replicas, "readyReplicas": facts.ready, "endpoint": endpoint(dfd)})
    if measure:
        counters, pods = _measure(kube, namespace, name, config)
        new_status["speculation"], spec_condition = _speculation_status(
            counters, pods, dfd.spec.readiness.min_acceptance_rate)
        conditions.append(spec_condition)
    _write_status(kube, body, old_status, new_status, conditions, emit)


def _apply_all(kube: Kube, body: dict[str, Any], objects: list[dict[str, Any]], emit: EventSink,
               manager: str = FIELD_MANAGER) -> dict[str, Any] | None:
    """Applies in order; returns the last object as the server has it, or None after stalling on a rejection."""
    applied: dict[str, Any] | None = None
    for obj in objects:
        try:
            applied = kube.apply(obj, field_manager=manager)
        except ApiException as error:
            if _transient(error):
                raise RetryLater(f"applying {obj['kind']} {obj['metadata']['name']}: HTTP {error.status}",
                                 delay=2.0) from error
            if error.status in (400, 422):
                _stall(kube, body, "ChildRejected",
                       f"the API server rejected the {obj['kind']}: {_api_message(error)}", emit)
                return None
            raise
    return applied


def _cache_outcome(kube: Kube, namespace: str, job: dict[str, Any]) -> cache_outcome.CacheOutcome:
    pods = kube.pods(namespace, f"job-name={job['metadata']['name']}")
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    # Progress is the last JSON line the download program printed; read only while it runs.
    last_line = kube.last_log_line(namespace, running[0]["metadata"]["name"]) if running else ""
    return cache_outcome.cache_outcome(job, pods, last_line)


def _cache_status(dfd: DFlashDeployment, outcome: cache_outcome.CacheOutcome) -> dict[str, Any]:
    return {"name": cache_name(dfd), "phase": outcome.phase, "message": outcome.message, **outcome.progress}


def _cache_gate(outcome: cache_outcome.CacheOutcome, num_speculative_tokens: int
                ) -> list[status.ConditionSpec] | None:
    """Conditions that hold the serving objects back, or None when the cache is ready and the pair fits."""
    if outcome.phase == cache_outcome.DOWNLOADING:
        return status.waiting_for_cache_conditions(outcome.message)
    if outcome.phase == cache_outcome.FAILED:
        return status.cache_failed_conditions(outcome.message)
    # The pair's own problems come from the Job; the token count is this deployment's, checked here.
    problems = [p["message"] for p in outcome.problems] + [
        p.message for p in speculative_tokens_problems(num_speculative_tokens, outcome.draft_block_size)]
    if problems:
        return status.incompatible_pair_conditions(problems)
    return None


def _api_message(error: ApiException) -> str:
    try:
        return json.loads(error.body).get("message", error.reason)
    except (TypeError, ValueError):
        return str(error.reason)


def _stall(kube: Kube, body: dict[str, Any], reason: str, message: str, emit: EventSink) -> None:
    old_status = body.get("status") or {}
    new_status = {"observedGeneration": body["metadata"].get("generation", 0)}
    _write_status(kube, body, old_status, new_status, status.stalled_conditions(reason, message), emit)


def _write_status(kube: Kube, body: dict[str, Any], old_status: dict[str, Any], new_status: dict[str, Any],
                  conditions: list[status.ConditionSpec], emit: EventSink) -> None:
    meta = body["metadata"]
    old_conditions = old_status.get("conditions") or []
    new_status["conditions"] = status.merge_conditions(
        old_conditions, conditions, meta.get("generation", 0), status.now_rfc3339())
    if not status.status_changed(old_status, new_status):
        return
    kube.patch_dfd_status(meta["namespace"], meta["name"], new_status)
    _emit_transitions(old_conditions, new_status["conditions"], emit)


# Conditions whose transitions are worth an event on the DFlashDeployment (Reconciling only restates Ready).
_EVENT_CONDITIONS = (status.READY, status.STALLED, status.CACHE_READY, status.MODELS_COMPATIBLE,
                     status.SPECULATION_HEALTHY)


def _emit_transitions(old: list[dict[str, Any]], new: list[dict[str, Any]], emit: EventSink) -> None:
    before = {c["type"]: c for c in old}
    for condition in new:
        if condition["type"] not in _EVENT_CONDITIONS:
            continue
        previous = before.get(condition["type"])
        if previous and (previous["status"], previous["reason"]) == (condition["status"], condition["reason"]):
            continue
        bad = (condition["type"] == status.STALLED and condition["status"] == "True") or (
            condition["type"] in (status.MODELS_COMPATIBLE, status.SPECULATION_HEALTHY)
            and condition["status"] == "False")
        emit("Warning" if bad else "Normal", condition["reason"],
             f"{condition['type']}={condition['status']}: {condition['message']}")


def _measure(kube: Kube, namespace: str, name: str, config: OperatorConfig
             ) -> tuple[speculation.SpecCounters | None, int]:
    """Sums the counters of every ready pod since its start; returns them and how many pods answered."""
    total: speculation.SpecCounters | None = None
    pods = 0
    for ip in kube.ready_pod_ips(namespace, selector_string(name)):
        try:
            url = speculation.metrics_url(ip, SERVING_PORT, config.metrics_allowed_networks)
            counters = speculation.read_pod_counters(url, config.metrics_timeout_seconds)
        except (OSError, ValueError) as error:
            log.info("no metrics from pod %s of %s/%s: %s", ip, namespace, name, error)
            continue
        if counters is not None:
            total = counters if total is None else total + counters
            pods += 1
    return total, pods


def _speculation_status(counters: speculation.SpecCounters | None, pods: int, floor: float
                        ) -> tuple[dict[str, Any], status.ConditionSpec]:
    if counters is None or counters.draft_tokens == 0:
        message = ("no ready pod exposes spec-decode counters yet" if counters is None
                   else "the draft has proposed no tokens yet")
        return {}, status.ConditionSpec(status.SPECULATION_HEALTHY, "Unknown", "NoDraftTokensYet", message)
    rate = counters.acceptance_rate or 0.0
    mean = counters.mean_accepted_length
    figures = {
        "acceptanceRate": round(rate, 4),
        "meanAcceptedLength": round(mean, 3) if mean is not None else None,
        "draftTokens": int(counters.draft_tokens),
        "acceptedTokens": int(counters.accepted_tokens),
        "podsMeasured": pods,
    }
    text = f"{int(counters.accepted_tokens)} of {int(counters.draft_tokens)} draft tokens accepted ({rate:.2f})"
    if rate < floor:
        return figures, status.ConditionSpec(status.SPECULATION_HEALTHY, "False", "AcceptanceBelowFloor",
                                             f"{text}, below the floor {floor:g}")
    return figures, status.ConditionSpec(status.SPECULATION_HEALTHY, "True", "AcceptanceAboveFloor",
                                         f"{text}, floor {floor:g}")
