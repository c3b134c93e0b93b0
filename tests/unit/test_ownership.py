"""Ownership facts have one home, and the chart's RBAC grants what that home says the operator touches."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dflash_operator.kube.client import object_path
from dflash_operator.kube.ownership import (
    CHILD_KINDS,
    FIELD_MANAGER,
    cache_field_manager,
    field_manager,
    owner_reference,
)
from dflash_operator.kube.rbac import render_rbac_yaml
from dflash_operator.reconcile.handlers import register
from dflash_operator.runtime.cli import main
from dflash_operator.runtime.config import ConfigError, OperatorConfig, from_environment

CHART = Path(__file__).resolve().parents[2] / "charts" / "dflash-operator"
RBAC_FILE = CHART / "files" / "rbac.yaml"
# What the operator does to its children: server-side apply (create or patch), a POST (Kube.create), and watch them.
CHILD_VERBS = {"get", "list", "watch", "create", "patch"}


def chart_rules() -> list[dict]:
    """The namespaced rules the chart grants (the same list feeds the ClusterRole and each Role)."""
    return yaml.safe_load(RBAC_FILE.read_text())["namespaced"]


def test_the_charts_rbac_is_what_the_code_generates(tmp_path: Path) -> None:
    assert RBAC_FILE.read_text() == render_rbac_yaml(), (
        f"{RBAC_FILE.relative_to(CHART.parents[1])} drifted: run `dflash-operator rbac -o {RBAC_FILE}`")
    out = tmp_path / "rbac.yaml"
    assert main(["rbac", "-o", str(out)]) == 0 and out.read_text() == render_rbac_yaml()
    templates = (CHART / "templates" / "rbac.yaml").read_text()
    for part in ("namespaced", "cluster", "nodes", "namespaces"):
        assert f"$rbac.{part}" in templates, f"the chart does not grant the generated {part} rules"


def granted(rules: list[dict], group: str, resource: str) -> set[str]:
    return {verb for rule in rules if group in rule["apiGroups"] and resource in rule["resources"]
            for verb in rule["verbs"]}


@pytest.mark.parametrize("kind", CHILD_KINDS, ids=lambda k: k.kind)
def test_chart_rbac_covers_every_child_kind(kind) -> None:
    missing = CHILD_VERBS - granted(chart_rules(), kind.group, kind.plural)
    assert not missing, f"the chart's RBAC lacks {sorted(missing)} on {kind.plural}"


def test_chart_rbac_grants_no_child_kind_the_operator_does_not_own() -> None:
    owned = {(k.group, k.plural) for k in CHILD_KINDS}
    # Read-only or the operator's own kinds besides the children.
    others = {("serving.dflash.dev", "dflashdeployments"), ("serving.dflash.dev", "dflashdeployments/status"),
              ("", "pods"), ("", "pods/log"), ("", "events"), ("", "resourcequotas")}
    for rule in chart_rules():
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource) in owned | others, f"the chart grants {group}/{resource}, not in the table"
                if "create" in rule["verbs"] and (group, resource) not in owned:
                    assert resource == "events", f"the operator never creates {resource}"


def test_every_child_kind_is_watched_and_has_an_api_path() -> None:
    registry = register(OperatorConfig(resync_seconds=7))
    watched = {(h.selector.group or "", h.selector.version, h.selector.any_name)
               for h in registry._watching.get_all_handlers()}  # kopf keeps watch handlers here
    for kind in CHILD_KINDS:
        assert (kind.group, kind.version, kind.plural) in watched
        assert object_path(kind.api_version, kind.kind, "ns", "x").endswith(f"/namespaces/ns/{kind.plural}/x")
    indexed = {(h.selector.group or "", h.selector.version, h.selector.any_name)
               for h in registry._indexing.get_all_handlers()}
    facts = {("", "v1", "resourcequotas"), ("storage.k8s.io", "v1", "storageclasses"), ("", "v1", "nodes")}
    assert {(k.group, k.version, k.plural) for k in CHILD_KINDS} | {("", "v1", "pods")} | facts <= indexed
    # Every index and watch has its permission in the generated RBAC (nodes: behind nodeCheck.enabled).
    generated = yaml.safe_load(render_rbac_yaml())
    granted_reads = {(g, r) for part in generated.values() for rule in part for g in rule["apiGroups"]
                     for r in rule["resources"] if {"list", "watch"} <= set(rule["verbs"])}
    assert {(group, plural) for group, _, plural in indexed | watched} <= granted_reads
    without_nodes = register(OperatorConfig(node_check=False))
    assert ("", "v1", "nodes") not in {(h.selector.group or "", h.selector.version, h.selector.any_name)
                                       for h in without_nodes._indexing.get_all_handlers()}
    # No kopf timers or daemons: kopf would put a finalizer on every DFlashDeployment for them.
    assert list(registry._spawning.get_all_handlers()) == []
    # Nor create/update handlers: they would write progress on the object, and the operator's NoDiffBase gives
    # them no diff-base to tell what changed.
    assert not list(registry._changing.get_all_handlers())


def test_the_controller_applies_its_own_objects_and_each_sharer_the_cache() -> None:
    meta = {"name": "coder", "uid": "u1"}
    served = {"metadata": {"ownerReferences": [owner_reference(meta, controller=True)]}}
    shared = {"metadata": {"ownerReferences": [owner_reference({"name": "other", "uid": "u2"}, controller=False),
                                               owner_reference(meta, controller=False)]}}
    kept = {"metadata": {}}  # a cache claim with retainPolicy Keep carries no reference at all
    assert field_manager(served, "u1") == FIELD_MANAGER
    assert field_manager(shared, "u1") == field_manager(kept, "u1") == cache_field_manager("u1") != FIELD_MANAGER
    assert owner_reference(meta, controller=False)["blockOwnerDeletion"] is False


def test_configuration_from_the_environment() -> None:
    config = from_environment({"DFLASH_RESYNC_SECONDS": "5", "DFLASH_METRICS_ALLOWED_NETWORKS": "127.0.0.0/8, ::1/128",
                               "DFLASH_OPERATOR_IMAGE": "local/op:1", "DFLASH_LOG_LEVEL": "debug",
                               "DFLASH_METRICS_PORT": "9090", "DFLASH_HUB_ENDPOINT": "http://10.0.0.7:8090",
                               "DFLASH_WATCH_SILENCE_SECONDS": "120"},
                              namespaces=("a",))
    assert (config.resync_seconds, config.cache.image, config.log_level, config.metrics_port,
            config.watch_silence_seconds) == (5.0, "local/op:1", "DEBUG", 9090, 120.0)
    assert config.cache.hub_endpoint == "http://10.0.0.7:8090"
    assert [str(n) for n in config.metrics_allowed_networks] == ["127.0.0.0/8", "::1/128"]
    assert config.namespaces == ("a",) and from_environment({}) == OperatorConfig()
    assert from_environment({"DFLASH_NODE_CHECK": "false", "DFLASH_NODE_AUTOSCALING": "True"}).node_check is False
    assert from_environment({"DFLASH_NODE_AUTOSCALING": "true"}).node_autoscaling is True


@pytest.mark.parametrize("environ, names", [
    ({"DFLASH_RESYNC_SECONDS": "soon"}, "DFLASH_RESYNC_SECONDS"),
    ({"DFLASH_RESYNC_SECONDS": "0"}, "DFLASH_RESYNC_SECONDS"),
    ({"DFLASH_METRICS_PORT": "-1"}, "DFLASH_METRICS_PORT"),
    ({"DFLASH_WATCH_SILENCE_SECONDS": "0"}, "DFLASH_WATCH_SILENCE_SECONDS"),
    ({"DFLASH_METRICS_ALLOWED_NETWORKS": "10.0.0.0/33"}, "DFLASH_METRICS_ALLOWED_NETWORKS"),
    ({"DFLASH_HUB_ENDPOINT": "hub.internal"}, "DFLASH_HUB_ENDPOINT"),
    ({"DFLASH_NODE_CHECK": "yes"}, "DFLASH_NODE_CHECK"),
    ({"DFLASH_HUB_ENDPOINT": "https://user:secret@hub.internal"}, "DFLASH_HUB_ENDPOINT"),
])
def test_bad_configuration_names_the_variable(environ: dict, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        from_environment(environ)
