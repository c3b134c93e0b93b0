"""Conditions and the no-churn rule: unchanged observations give an unchanged status."""

from __future__ import annotations

from dflash_operator.status import conditions as status


def _facts(**kw: object) -> status.RolloutFacts:
    base = dict(desired=2, replicas=2, updated=2, ready=2, observed_current=True)
    return status.RolloutFacts(**{**base, **kw})


def _by_type(conditions: list[status.Condition]) -> dict[str, status.Condition]:
    return {c.type: c for c in conditions}


def test_all_pods_ready_is_ready_and_not_reconciling() -> None:
    conditions = _by_type(status.rollout_conditions(_facts()))
    assert (conditions["Ready"].status, conditions["Reconciling"].status, conditions["Stalled"].status) == (
        "True", "False", "False")
    assert conditions["Ready"].message == "2/2 pods passed the speculative probe"


def test_waiting_for_the_probe_and_rolling_out_have_distinct_reasons() -> None:
    waiting = _by_type(status.rollout_conditions(_facts(ready=1)))
    assert waiting["Ready"].reason == "WaitingForSpeculativeProbe" and waiting["Reconciling"].status == "True"
    rolling = _by_type(status.rollout_conditions(_facts(updated=1)))
    assert rolling["Ready"].reason == "RollingOut"
    stale = _by_type(status.rollout_conditions(_facts(observed_current=False)))
    assert stale["Ready"].status == "False", "a Deployment controller lagging behind must not count as ready"


def test_scaled_to_zero_is_ready() -> None:
    conditions = _by_type(status.rollout_conditions(_facts(desired=0, replicas=0, updated=0, ready=0)))
    assert conditions["Ready"].status == "True" and conditions["Ready"].reason == "ScaledToZero"


def test_rollout_facts_from_a_deployment() -> None:
    deployment = {"metadata": {"generation": 3}, "status": {"observedGeneration": 2, "replicas": 1}}
    facts = status.rollout_facts(deployment, 1)
    assert not facts.observed_current and facts.ready == 0
    assert status.rollout_facts(None, 1) == status.RolloutFacts(1, 0, 0, 0, False)


def test_transition_time_moves_only_when_status_changes() -> None:
    first = status.merge_conditions([], status.rollout_conditions(_facts(ready=1)), 1, "T1")
    same = status.merge_conditions([c.model_dump(by_alias=True) for c in first],
                                   status.rollout_conditions(_facts(ready=1)), 1, "T2")
    assert same == first
    flipped = status.merge_conditions([c.model_dump(by_alias=True) for c in same],
                                      status.rollout_conditions(_facts()), 1, "T3")
    ready = next(c for c in flipped if c.type == "Ready")
    stalled = next(c for c in flipped if c.type == "Stalled")
    assert ready.last_transition_time == "T3" and stalled.last_transition_time == "T1"


def test_conditions_not_mentioned_are_kept_and_order_is_stable() -> None:
    old = [{"type": "SpeculationHealthy", "status": "True", "reason": "X", "message": "", "observedGeneration": 1,
            "lastTransitionTime": "T0"}]
    merged = status.merge_conditions(old, status.stalled_conditions("InvalidSpec", "bad"), 2, "T1")
    assert [c.type for c in merged] == ["Ready", "Reconciling", "Stalled", "SpeculationHealthy"]
    assert merged[-1].last_transition_time == "T0"


def test_status_changed_ignores_fields_it_does_not_own() -> None:
    new = {"observedGeneration": 1, "replicas": 2}
    assert not status.status_changed({"observedGeneration": 1, "replicas": 2, "kopf": {"x": 1}}, new)
    assert status.status_changed({"observedGeneration": 1, "replicas": 1}, new)
    assert status.status_changed(None, new)
