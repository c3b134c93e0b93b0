"""Starts the operator: kopf with our handlers, cluster-wide or on the given namespaces."""

from __future__ import annotations

import kopf


def run_operator(namespaces: list[str], liveness: str) -> int:
    import dflash_operator.handlers  # noqa: F401 - registers the handlers with kopf

    kopf.configure(verbose=False)
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
        standalone=True,
    )
    return 0
