"""The operator's per-DFlashDeployment series: they follow status, and go for good with the DFlashDeployment."""

from __future__ import annotations

from prometheus_client import REGISTRY

from dflash_operator.api.models import SpeculationStatus
from dflash_operator.runtime import metrics
from dflash_operator.status.conditions import condition


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_a_changed_condition_replaces_its_series() -> None:
    metrics.publish_conditions("u1", "ns", "a", [condition("CacheReady", "False", "Downloading", "")])
    metrics.publish_conditions("u1", "ns", "a", [condition("CacheReady", "True", "Cached", "")])
    base = {"namespace": "ns", "dflashdeployment": "a", "type": "CacheReady"}
    assert value("dflash_deployment_condition", **base, status="True", reason="Cached") == 1
    assert value("dflash_deployment_condition", **base, status="False", reason="Downloading") is None


def test_a_pass_that_ends_after_the_delete_does_not_bring_the_series_back() -> None:
    figures = SpeculationStatus(acceptance_rate=0.1)
    metrics.publish_speculation("u2", "ns", "b", figures, 0.5, False)
    metrics.forget("u2")
    metrics.publish_speculation("u2", "ns", "b", figures, 0.5, False)  # the in-flight pass
    assert value("dflash_speculation_acceptance_rate", namespace="ns", dflashdeployment="b") is None


def test_the_old_uids_delete_leaves_a_new_namesakes_series() -> None:
    metrics.publish_speculation("old", "ns", "c", SpeculationStatus(acceptance_rate=0.2), 0.5, False)
    metrics.publish_speculation("new", "ns", "c", SpeculationStatus(acceptance_rate=0.9), 0.5, False)
    metrics.forget("old")
    assert value("dflash_speculation_acceptance_rate", namespace="ns", dflashdeployment="c") == 0.9
