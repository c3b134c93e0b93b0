"""Starts the operator: kopf with our handlers, cluster-wide or on the configured namespaces."""

from __future__ import annotations

import dataclasses
import logging

import kopf
from kubernetes.client.rest import ApiException

from dflash_operator.kube.client import load_client, may_watch
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


log = logging.getLogger(__name__)


def with_permitted_node_check(config: OperatorConfig) -> OperatorConfig:
    """The node check needs to watch Nodes cluster-wide. Without that permission it is off, said once here (and in
    each DFlashDeployment's NodeCheckSkipped event), instead of a watch that kopf retries on 403 forever."""
    if not config.node_check:
        return config
    try:
        permitted = may_watch(load_client(), "nodes")
    except (ApiException, OSError) as error:
        log.warning("cannot ask whether Nodes may be watched (%s): the node check is off", error)
        permitted = False
    if not permitted:
        log.warning("this service account may not list and watch Nodes: the node check is off "
                    "(chart value nodeCheck.enabled grants it)")
    return config if permitted else dataclasses.replace(config, node_check=False)


def run_operator(config: OperatorConfig) -> int:
    configure_logging(config.log_level)
    config = with_permitted_node_check(config)
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
