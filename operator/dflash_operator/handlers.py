"""Thin kopf handlers. Each one finds the DFlashDeployment concerned and runs the same level-based reconcile.

`register` adds them to a registry with the configuration's settings (the resync interval is fixed when a timer is
registered), so nothing is read from the environment at import time.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from dflash_operator import metrics
from dflash_operator.api import GROUP, KIND, PLURAL, VERSION
from dflash_operator.config import OperatorConfig
from dflash_operator.kube import Kube, load_client
from dflash_operator.ownership import CHILD_KINDS, MANAGED_BY, MANAGED_BY_LABEL
from dflash_operator.reconcile import RetryLater, reconcile


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 120
    settings.networking.request_timeout = 30
    # No kopf peering objects: one operator replica, chosen by the Deployment, not by a CRD of kopf's.
    settings.peering.standalone = True
    memo.kube = Kube(load_client())
    config: OperatorConfig = memo.config
    metrics.serve(config.metrics_port, config.metrics_address)


def _run(memo: kopf.Memo, body: dict[str, Any], measure: bool = False) -> None:
    # kopf.event reads only apiVersion, kind and metadata (name, namespace, uid): a plain dict serves.
    def emit(kind: str, reason: str, message: str) -> None:
        kopf.event(body, type=kind, reason=reason, message=message)  # type: ignore[arg-type]

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


def reconcile_dfd(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _run(memo, dict(body))


def resync_and_measure(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Periodic pass: repairs anything the child watches missed and reads speculation metrics of ready pods."""
    _run(memo, dict(body), measure=True)


def on_child_event(body: kopf.Body, memo: kopf.Memo, namespace: str | None, **_: Any) -> None:
    """A child changed or vanished: reconcile its owners, which re-apply the child if it drifted.

    A shared cache has one owner per DFlashDeployment using it; serving objects have exactly one."""
    kube: Kube = memo.kube
    for owner in body.metadata.get("ownerReferences", []):
        if owner.get("kind") != KIND:
            continue
        dfd = kube.get_dfd(namespace or "", owner["name"])
        if dfd is None or dfd["metadata"]["uid"] != owner["uid"] or dfd["metadata"].get("deletionTimestamp"):
            continue  # the owner is going away; the garbage collector takes the children with it
        _run(memo, dfd)


def register(config: OperatorConfig) -> kopf.OperatorRegistry:
    """A registry holding every handler, set up for `config`."""
    registry = kopf.OperatorRegistry()
    kopf.on.startup(registry=registry)(configure)
    for decorate in (kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry),
                     kopf.on.create(GROUP, VERSION, PLURAL, registry=registry),
                     kopf.on.update(GROUP, VERSION, PLURAL, field="spec", registry=registry)):
        decorate(reconcile_dfd)
    kopf.timer(GROUP, VERSION, PLURAL, interval=config.resync_seconds, initial_delay=1.0,
               registry=registry)(resync_and_measure)
    for kind in CHILD_KINDS:
        kopf.on.event(*kind.watch_resource, labels={MANAGED_BY_LABEL: MANAGED_BY}, registry=registry)(on_child_event)
    return registry
