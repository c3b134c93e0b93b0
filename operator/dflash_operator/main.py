"""Starts the operator: kopf with our handlers, cluster-wide or on the given namespaces."""

from __future__ import annotations

import logging
import os

import kopf


def run_operator(namespaces: list[str], liveness: str) -> int:
    import dflash_operator.handlers  # noqa: F401 - registers the handlers with kopf

    level = os.environ.get("DFLASH_LOG_LEVEL", "INFO").upper()
    kopf.configure(debug=level == "DEBUG", verbose=False)
    logging.getLogger().setLevel(level)
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
        standalone=True,
    )
    return 0
