"""Starts the operator: kopf with our handlers, cluster-wide or on the configured namespaces."""

from __future__ import annotations

import logging

import kopf

from dflash_operator.reconcile.handlers import register
from dflash_operator.runtime.config import OperatorConfig
from dflash_operator.runtime.scope import WatchScope


def configure_logging(level: str) -> None:
    kopf.configure(debug=level == "DEBUG", verbose=False)
    logging.getLogger().setLevel(level)
    # kopf logs each handler's success on every watch event at INFO ("Handler 'on_child_event' succeeded."): an
    # indexer's and a handler's line per event, which drowned the operator's own INFO lines at scale. Its warnings
    # and errors stay, and so do the Kubernetes events it posts from them.
    logging.getLogger("kopf.objects").setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)


def run_operator(config: OperatorConfig) -> int:
    configure_logging(config.log_level)
    scope = WatchScope(config.namespaces)
    kopf.run(
        registry=register(config),
        memo=kopf.Memo(config=config),
        clusterwide=scope.clusterwide,
        namespaces=list(scope.exact_namespaces),
        liveness_endpoint=config.liveness_endpoint,
        standalone=True,
    )
    return 0
