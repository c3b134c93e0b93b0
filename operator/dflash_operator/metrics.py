"""The operator's own Prometheus metrics: how often and how fast it reconciles, and how that ends."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

RECONCILES = Counter(
    "dflash_operator_reconciles", "Reconcile passes of DFlashDeployments, by outcome.", ["outcome"])
RECONCILE_SECONDS = Histogram(
    "dflash_operator_reconcile_seconds", "Duration of one reconcile pass.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))


def serve(port: int, address: str = "0.0.0.0") -> None:
    if port > 0:
        start_http_server(port, addr=address)
