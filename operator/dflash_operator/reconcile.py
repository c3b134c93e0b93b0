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

from dflash_operator import speculation, status
from dflash_operator.api import DFlashDeployment
from dflash_operator.kube import Kube
from dflash_operator.render import InvalidSpec, RenderConfig, SERVING_PORT, desired_objects, endpoint, selector_string

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

    `measure` also reads the ready pods' /metrics (the speculation timer); otherwise the last measurement stays."""
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation", 0)
    old_status = body.get("status") or {}

    try:
        dfd = DFlashDeployment.model_validate(body)
        objects = desired_objects(dfd, config.render)
    except ValidationError as error:
        _stall(kube, body, "InvalidSpec", _validation_message(error), emit)
        return
    except InvalidSpec as error:
        _stall(kube, body, error.reason, str(error), emit)
        return

    deployment = None
    for obj in objects:
        try:
            applied = kube.apply(obj)
        except ApiException as error:
            if _transient(error):
                raise RetryLater(f"applying {obj['kind']} {name}: HTTP {error.status}", delay=2.0) from error
            if error.status in (400, 422):
                _stall(kube, body, "ChildRejected",
                       f"the API server rejected the {obj['kind']}: {_api_message(error)}", emit)
                return
            raise
        if obj["kind"] == "Deployment":
            deployment = applied

    facts = status.rollout_facts(deployment, dfd.spec.replicas)
    conditions = status.rollout_conditions(facts)
    new_status: dict[str, Any] = {
        "observedGeneration": generation,
        "replicas": facts.replicas,
        "readyReplicas": facts.ready,
        "selector": selector_string(name),
        "endpoint": endpoint(dfd),
    }
    if measure:
        counters, pods = _measure(kube, namespace, name, config)
        new_status["speculation"], spec_condition = _speculation_status(
            counters, pods, dfd.spec.readiness.min_acceptance_rate)
        conditions.append(spec_condition)
    _write_status(kube, body, old_status, new_status, conditions, emit)


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


def _emit_transitions(old: list[dict[str, Any]], new: list[dict[str, Any]], emit: EventSink) -> None:
    before = {c["type"]: c for c in old}
    for condition in new:
        previous = before.get(condition["type"])
        if previous and (previous["status"], previous["reason"]) == (condition["status"], condition["reason"]):
            continue
        bad = (condition["type"] in (status.STALLED,) and condition["status"] == "True") or (
            condition["type"] == status.SPECULATION_HEALTHY and condition["status"] == "False")
        if condition["type"] in (status.READY, status.STALLED, status.SPECULATION_HEALTHY):
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
