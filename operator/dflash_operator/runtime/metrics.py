"""The operator's own Prometheus metrics: how it reconciles, and what it knows about each DFlashDeployment.

Per-DFlashDeployment series carry the labels `namespace` and `dflashdeployment`; they follow status (the same
rounded figures, the same conditions) and go when the DFlashDeployment goes. The chart's alert rules and dashboard
read them (charts/dflash-operator/files/).
"""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from dflash_operator.api.models import Condition, SpeculationStatus
from dflash_operator.runtime.recent import RecentSet

RECONCILES = Counter(
    "dflash_operator_reconciles", "Reconcile passes of DFlashDeployments, by outcome.", ["outcome"])
RECONCILE_SECONDS = Histogram(
    "dflash_operator_reconcile_seconds", "Duration of one reconcile pass.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
STATUS_WRITES = Counter("dflash_operator_status_writes", "Status writes to DFlashDeployments.")
# The API server counts every client's event lists alike (the namespace controller lists a terminating namespace's
# events too): this is the operator's own share, for objects in trouble (at most one a minute per object).
EVENT_READS = Counter(
    "dflash_operator_event_reads", "Event lists read for a child in trouble (a pod failing its probe, a claim its "
    "provisioner refuses), by the child's kind.", ["kind"])

_OWNER = ["namespace", "dflashdeployment"]
CONDITION = Gauge(
    "dflash_deployment_condition", "1 for each current condition of a DFlashDeployment, with its status and reason.",
    _OWNER + ["type", "status", "reason"])
ACCEPTANCE_RATE = Gauge(
    "dflash_speculation_acceptance_rate", "Accepted / proposed draft tokens over the window (status.speculation).",
    _OWNER)
MEAN_ACCEPTED_LENGTH = Gauge(
    "dflash_speculation_mean_accepted_length", "Tokens per target step over the window: 1 + accepted / drafts.",
    _OWNER)
ACCEPTANCE_BY_POSITION = Gauge(
    "dflash_speculation_acceptance_by_position", "Drafts whose token at this position was accepted / drafts.",
    _OWNER + ["position"])
ACCEPTANCE_FLOOR = Gauge(
    "dflash_speculation_acceptance_floor", "The floor the window's acceptance is judged against.", _OWNER)
FALLBACK = Gauge(
    "dflash_speculation_fallback", "1 while the pods serve the target without the draft (onLowAcceptance Fallback).",
    _OWNER)
PAUSES_UNDER_LOAD = Gauge(
    "dflash_speculation_pauses_under_load",
    "1 when the schedule the pods run (spec.speculation.tokensByBatchSize, or tuning Auto's) turns speculation off "
    "(0 tokens) for some batch sizes.", _OWNER)
RECOMMENDED_TOKENS = Gauge(
    "dflash_speculation_recommended_tokens",
    "The draft length the window and the cost model recommend for a range of running batch sizes "
    "(status.speculation.recommendation); 0: none pays.", _OWNER + ["from_batch_size", "to_batch_size"])
TUNED_TOKENS = Gauge(
    "dflash_speculation_tuned_tokens",
    "The draft length the pods run for a range of running batch sizes because spec.speculation.tuning Auto applied "
    "it (status.speculation.tuned); absent while the spec's own length runs.", _OWNER + ["from_batch_size",
                                                                                         "to_batch_size"])
RECOMMENDED_SPEEDUP = Gauge(
    "dflash_speculation_recommended_speedup",
    "Expected speedup over no speculation of the recommended draft length, the range's lowest.",
    _OWNER + ["from_batch_size", "to_batch_size"])
RECOMMENDED_TRAFFIC_SHARE = Gauge(
    "dflash_speculation_recommended_traffic_share",
    "Share of the window's reads of the running batch size (every engine's vllm:num_requests_running, idle ones left "
    "out) in a range of the recommendation; absent while the window has too few reads.",
    _OWNER + ["from_batch_size", "to_batch_size"])
RECOMMENDED_WEIGHTED_SPEEDUP = Gauge(
    "dflash_speculation_recommended_weighted_speedup",
    "Expected speedup over no speculation of the recommended schedule over the window's traffic (each batch size "
    "weighted by its share of reads); absent while the window has too few reads.", _OWNER)

_lock = threading.Lock()
Series = tuple[Gauge, tuple[str, ...]]
_exposed: dict[str, set[Series]] = {}  # per DFlashDeployment uid: the series it has
_gone = RecentSet()  # deleted uids: a pass that began before the delete must not bring their series back


def _publish(uid: str, gauges: tuple[Gauge, ...], values: dict[Series, float]) -> None:
    """Sets `values` and removes the uid's other series of these gauges (a condition that changed its reason)."""
    with _lock:
        if uid in _gone:
            return
        exposed = _exposed.setdefault(uid, set())
        for series in [s for s in exposed if s[0] in gauges and s not in values]:
            _remove(series, uid)
            exposed.discard(series)
        for (gauge, labels), value in values.items():
            gauge.labels(*labels).set(value)
            exposed.add((gauge, labels))


def _remove(series: Series, uid: str) -> None:
    # A DFlashDeployment deleted and created again under its name shares its label values: keep what the new one set.
    if not any(series in mine for owner, mine in _exposed.items() if owner != uid):
        series[0].remove(*series[1])


def publish_conditions(uid: str, namespace: str, name: str, conditions: list[Condition]) -> None:
    values: dict[Series, float] = {(CONDITION, (namespace, name, c.type, str(c.status), c.reason)): 1.0
                                   for c in conditions}
    _publish(uid, (CONDITION,), values)


def publish_speculation(uid: str, namespace: str, name: str, figures: SpeculationStatus, floor: float,
                        pauses_under_load: bool) -> None:
    labels = (namespace, name)
    values: dict[Series, float] = {
        (ACCEPTANCE_FLOOR, labels): floor,
        (FALLBACK, labels): 1.0 if figures.fallback is not None else 0.0,
        (PAUSES_UNDER_LOAD, labels): 1.0 if pauses_under_load else 0.0,
    }
    if figures.acceptance_rate is not None:
        values[(ACCEPTANCE_RATE, labels)] = figures.acceptance_rate
    if figures.mean_accepted_length is not None:
        values[(MEAN_ACCEPTED_LENGTH, labels)] = figures.mean_accepted_length
    for position, rate in enumerate(figures.acceptance_by_position or []):
        values[(ACCEPTANCE_BY_POSITION, (namespace, name, str(position)))] = rate
    for step in (figures.recommendation.schedule if figures.recommendation else None) or []:
        span = (namespace, name, str(step.from_batch_size), str(step.to_batch_size))
        values[(RECOMMENDED_TOKENS, span)] = step.num_speculative_tokens
        values[(RECOMMENDED_SPEEDUP, span)] = step.expected_speedup
        if step.traffic_share is not None:
            values[(RECOMMENDED_TRAFFIC_SHARE, span)] = step.traffic_share
    if figures.recommendation is not None and figures.recommendation.weighted_speedup is not None:
        values[(RECOMMENDED_WEIGHTED_SPEEDUP, labels)] = figures.recommendation.weighted_speedup
    for step in (figures.tuned.schedule if figures.tuned else None) or []:
        values[(TUNED_TOKENS, (namespace, name, str(step.from_batch_size), str(step.to_batch_size)))] = (
            step.num_speculative_tokens)
    _publish(uid, (ACCEPTANCE_FLOOR, FALLBACK, PAUSES_UNDER_LOAD, ACCEPTANCE_RATE, MEAN_ACCEPTED_LENGTH,
                   ACCEPTANCE_BY_POSITION, RECOMMENDED_TOKENS, RECOMMENDED_SPEEDUP, RECOMMENDED_TRAFFIC_SHARE,
                   RECOMMENDED_WEIGHTED_SPEEDUP, TUNED_TOKENS), values)


def forget(uid: str) -> None:
    """The DFlashDeployment is gone: so are its series, for good."""
    with _lock:
        _gone.add(uid)
        for series in _exposed.get(uid, set()):
            _remove(series, uid)
        _exposed.pop(uid, None)


def serve(port: int, address: str = "0.0.0.0") -> None:
    if port > 0:
        start_http_server(port, addr=address)
