"""Starts the operator: kopf with our handlers, cluster-wide or on the configured namespaces."""

from __future__ import annotations

import logging

import kopf

from dflash_operator.config import OperatorConfig
from dflash_operator.handlers import register
from dflash_operator.scope import WatchScope


def run_operator(config: OperatorConfig) -> int:
    kopf.configure(debug=config.log_level == "DEBUG", verbose=False)
    logging.getLogger().setLevel(config.log_level)
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
