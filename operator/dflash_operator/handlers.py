"""Thin kopf handlers. Each one finds the DFlashDeployment concerned and runs the same level-based reconcile."""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf

from dflash_operator import metrics
from dflash_operator.api import GROUP, KIND, PLURAL, VERSION
from dflash_operator.kube import Kube, load_client
from dflash_operator.reconcile import OperatorConfig, RetryLater, reconcile
from dflash_operator.render import MANAGED_BY
from dflash_operator.render_cache import CacheConfig
from dflash_operator.speculation import parse_networks

# Read at import because kopf fixes timer intervals when the handler is registered.
RESYNC_SECONDS = float(os.environ.get("DFLASH_RESYNC_SECONDS", "30"))
CHILDREN = (
    ("apps", "v1", "deployments"), ("v1", "services"), ("policy", "v1", "poddisruptionbudgets"),
    ("batch", "v1", "jobs"), ("v1", "persistentvolumeclaims"),
)


def config_from_env() -> OperatorConfig:
    return OperatorConfig(
        cache=CacheConfig(image=os.environ.get("DFLASH_OPERATOR_IMAGE", CacheConfig().image)),
        metrics_timeout_seconds=float(os.environ.get("DFLASH_METRICS_TIMEOUT_SECONDS", "2")),
        metrics_allowed_networks=tuple(parse_networks(os.environ.get("DFLASH_METRICS_ALLOWED_NETWORKS", ""))),
    )


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 120
    settings.networking.request_timeout = 30
    # No kopf peering objects: one operator replica, chosen by the Deployment, not by a CRD of kopf's.
    settings.peering.standalone = True
    memo.kube = Kube(load_client())
    memo.config = config_from_env()
    metrics.serve(int(os.environ.get("DFLASH_METRICS_PORT", "0")), os.environ.get("DFLASH_METRICS_ADDRESS", "0.0.0.0"))


def _run(memo: kopf.Memo, body: dict[str, Any], measure: bool = False) -> None:
    def emit(kind: str, reason: str, message: str) -> None:
        kopf.event(body, type=kind, reason=reason, message=message)

    with metrics.RECONCILE_SECONDS.time():
        try:
            reconcile(memo.kube, body, memo.config, emit, measure=measure)
        except RetryLater as error:
            metrics.RECONCILES.labels("retry").inc()
            raise kopf.TemporaryError(str(error), delay=error.delay) from error
        except Exception:
            metrics.RECONCILES.labels("error").inc()
            raise
    metrics.RECONCILES.labels("ok").inc()


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile_dfd(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _run(memo, dict(body))


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=1.0)
def resync_and_measure(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Periodic pass: repairs anything the child watches missed and reads speculation metrics of ready pods."""
    _run(memo, dict(body), measure=True)


def _on_child_event(event: dict[str, Any], body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A child changed or vanished: reconcile its owners, which re-apply the child if it drifted.

    A shared cache has one owner per DFlashDeployment using it; serving objects have exactly one."""
    kube: Kube = memo.kube
    for owner in body.metadata.get("ownerReferences", []):
        if owner.get("kind") != KIND:
            continue
        dfd = kube.get_dfd(body.metadata.namespace, owner["name"])
        if dfd is None or dfd["metadata"]["uid"] != owner["uid"] or dfd["metadata"].get("deletionTimestamp"):
            continue  # the owner is going away; the garbage collector takes the children with it
        _run(memo, dfd)


for _resource in CHILDREN:
    kopf.on.event(*_resource, labels={"app.kubernetes.io/managed-by": MANAGED_BY})(_on_child_event)
