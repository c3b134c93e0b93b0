"""Starts the operator: kopf with our handlers, cluster-wide or on the configured namespaces."""

from __future__ import annotations

import logging

import kopf

from dflash_operator.config import OperatorConfig
from dflash_operator.handlers import register


def run_operator(config: OperatorConfig) -> int:
    kopf.configure(debug=config.log_level == "DEBUG", verbose=False)
    logging.getLogger().setLevel(config.log_level)
    kopf.run(
        registry=register(config),
        memo=kopf.Memo(config=config),
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        liveness_endpoint=config.liveness_endpoint,
        standalone=True,
    )
    return 0
