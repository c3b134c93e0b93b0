"""The operator's own Prometheus metrics: how it reconciles, and what it knows about each DFlashDeployment.

Per-DFlashDeployment series carry the labels `namespace` and `dflashdeployment`; they follow status (the same
rounded figures, the same conditions) and go when the DFlashDeployment goes. The chart's alert rules and dashboard
read them (charts/dflash-operator/files/).
"""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from dflash_operator.api.models import Condition, SpeculationStatus

RECONCILES = Counter(
    "dflash_operator_reconciles", "Reconcile passes of DFlashDeployments, by outcome.", ["outcome"])
RECONCILE_SECONDS = Histogram(
    "dflash_operator_reconcile_seconds", "Duration of one reconcile pass.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
STATUS_WRITES = Counter("dflash_operator_status_writes", "Status writes to DFlashDeployments.")

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

_lock = threading.Lock()
_exposed: dict[tuple[str, str], set[tuple[Gauge, tuple[str, ...]]]] = {}  # per DFlashDeployment: series it has


def _set(gauge: Gauge, labels: tuple[str, ...], value: float, keep: set[tuple[Gauge, tuple[str, ...]]]) -> None:
    gauge.labels(*labels).set(value)
    keep.add((gauge, labels))


def _replace(owner: tuple[str, str], gauges: tuple[Gauge, ...], keep: set[tuple[Gauge, tuple[str, ...]]]) -> None:
    """Removes the owner's series of these gauges that `keep` does not hold any more (a condition changed reason)."""
    with _lock:
        exposed = _exposed.setdefault(owner, set())
        for gauge, labels in [s for s in exposed if s[0] in gauges and s not in keep]:
            gauge.remove(*labels)
            exposed.discard((gauge, labels))
        exposed |= keep


def publish_conditions(namespace: str, name: str, conditions: list[Condition]) -> None:
    owner: tuple[str, str] = (namespace, name)
    keep: set[tuple[Gauge, tuple[str, ...]]] = set()
    for cond in conditions:
        _set(CONDITION, (namespace, name, cond.type, cond.status, cond.reason), 1, keep)
    _replace(owner, (CONDITION,), keep)


def publish_speculation(namespace: str, name: str, figures: SpeculationStatus, floor: float) -> None:
    owner: tuple[str, str] = (namespace, name)
    keep: set[tuple[Gauge, tuple[str, ...]]] = set()
    labels = (namespace, name)
    _set(ACCEPTANCE_FLOOR, labels, floor, keep)
    _set(FALLBACK, labels, 1 if figures.fallback is not None else 0, keep)
    if figures.acceptance_rate is not None:
        _set(ACCEPTANCE_RATE, labels, figures.acceptance_rate, keep)
    if figures.mean_accepted_length is not None:
        _set(MEAN_ACCEPTED_LENGTH, labels, figures.mean_accepted_length, keep)
    for position, rate in enumerate(figures.acceptance_by_position or []):
        _set(ACCEPTANCE_BY_POSITION, (namespace, name, str(position)), rate, keep)
    _replace(owner, (ACCEPTANCE_FLOOR, FALLBACK, ACCEPTANCE_RATE, MEAN_ACCEPTED_LENGTH, ACCEPTANCE_BY_POSITION), keep)


def forget(namespace: str, name: str) -> None:
    """The DFlashDeployment is gone: so are its series."""
    with _lock:
        for gauge, labels in _exposed.pop((namespace, name), set()):
            gauge.remove(*labels)


def serve(port: int, address: str = "0.0.0.0") -> None:
    if port > 0:
        start_http_server(port, addr=address)
