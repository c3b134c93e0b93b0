"""The Argo CD health check, run by a real Lua interpreter on status fixtures shaped like the operator's."""

from __future__ import annotations

from pathlib import Path

import pytest
from lupa import LuaRuntime

from dflash_operator.status import conditions as status

SCRIPT = (Path(__file__).resolve().parents[2] / "gitops" / "argocd" / "dflashdeployment-health.lua").read_text()


def health(obj: dict) -> tuple[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)
    # Argo CD hands the object to the script as the global `obj` and runs the script body as a chunk.
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(SCRIPT)
    return result["status"], result["message"]


def dfd(generation: int, observed: int | None, conditions: list[status.Condition]) -> dict:
    obj: dict = {"metadata": {"name": "coder", "generation": generation}, "spec": {}}
    if observed is not None:
        obj["status"] = {"observedGeneration": observed,
                         "conditions": [c.model_dump(by_alias=True) for c in
                                                      status.merge_conditions([], conditions, observed, "T")]}
    return obj


def rollout(**kw: int) -> list[status.Condition]:
    base = dict(desired=2, replicas=2, updated=2, ready=2)
    return status.cache_ready_conditions() + status.rollout_conditions(
        status.RolloutFacts(**{**base, **kw}, observed_current=True))


def test_all_pods_ready_is_healthy() -> None:
    assert health(dfd(3, 3, rollout())) == ("Healthy", "AllReplicasReady: 2/2 pods passed the speculative probe")


@pytest.mark.parametrize("obj, message", [
    (dfd(1, None, []), "Waiting for the operator to report status"),
    (dfd(4, 3, rollout()), "Waiting for the operator to observe generation 4"),
    (dfd(2, 2, rollout(ready=1)), "WaitingForSpeculativeProbe: 1/2 pods passed the speculative probe"),
    (dfd(2, 2, status.waiting_for_cache_conditions("downloading target and draft: 40%")),
     "CacheNotReady: downloading target and draft: 40%"),
])
def test_progressing(obj: dict, message: str) -> None:
    assert health(obj) == ("Progressing", message)


@pytest.mark.parametrize("conditions, message", [
    (status.incompatible_pair_conditions(["target hidden_size 128 != draft target_hidden_size 256"]),
     "IncompatiblePair: no GPU pod is created: target hidden_size 128 != draft target_hidden_size 256"),
    (status.stalled_conditions("ExtraArgsCollide", "spec.extraArgs ['-tp'] ..."),
     "ExtraArgsCollide: spec.extraArgs ['-tp'] ..."),
    (rollout() + [status.condition("SpeculationHealthy", "False", "AcceptanceBelowFloor", "3 of 80")],
     "AcceptanceBelowFloor: 3 of 80"),
])
def test_degraded(conditions: list, message: str) -> None:
    assert health(dfd(5, 5, conditions)) == ("Degraded", message)
