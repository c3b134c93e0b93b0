"""The draft-length recommender: synthetic acceptance profiles against synthetic cost tables."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from dflash_operator.api.models import BatchSizeTokens
from dflash_operator.speculation.tuner import (
    CostModel,
    NoRecommendation,
    Recommendation,
    ScheduleRange,
    expected_speedup,
    expected_tokens,
    gain_over,
    recommend,
    traffic_shares,
)

BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]
KS = [0, 1, 2, 4, 8]


def table(cost: Callable[[int, int], float], batch_sizes: list[int] | None = None,
          ks: list[int] | None = None) -> dict[str, Any]:
    batch_sizes, ks = batch_sizes or BATCH_SIZES, ks or KS
    return {"gpu": "H200", "vllmVersion": "0.24.0", "model": "qwen3next-4b-random",
            "batchSizes": batch_sizes, "draftLengths": ks,
            "relativeStepTime": [[1.0 if k == 0 else cost(b, k) for k in ks] for b in batch_sizes]}


def model(cost: Callable[[int, int], float], **kw: Any) -> CostModel:
    return CostModel.from_dict(table(cost, **kw))


CHEAP = model(lambda b, k: 1 + 0.05 * k)  # speculation nearly free at every batch size


def ok(result: Recommendation | NoRecommendation) -> Recommendation:
    assert isinstance(result, Recommendation), result
    return result


def test_expected_tokens_and_speedup() -> None:
    p = [0.9, 0.5, 0.25]
    assert expected_tokens(p, 0) == 1.0
    assert expected_tokens(p, 2) == pytest.approx(2.4)
    assert expected_speedup(p, CHEAP, 1, 2) == pytest.approx(2.4 / 1.1)
    with pytest.raises(ValueError, match="known for 3 draft positions, not 4"):
        expected_tokens(p, 4)


def test_all_accept_drafts_as_far_as_the_table_goes() -> None:
    rec = ok(recommend([1.0] * 8, drafts=1000, cost=CHEAP, measured_k=8))
    assert [(r.from_batch_size, r.to_batch_size, r.k) for r in rec.ranges] == [(1, 1024, 8)]
    assert rec.ranges[0].expected_speedup_low == rec.ranges[0].expected_speedup_high == pytest.approx(9 / 1.4)
    assert (rec.measured_k, rec.drafts, rec.gpu, rec.vllm_version, rec.model) == (
        8, 1000, "H200", "0.24.0", "qwen3next-4b-random")
    assert rec.weighted_speedup is None


def test_a_useless_draft_gets_no_speculation_anywhere() -> None:
    rec = ok(recommend([0.0] * 8, drafts=1000, cost=CHEAP, measured_k=8))
    assert rec.ranges == (ScheduleRange(1, 1024, 0, 1.0, 1.0),)


def test_a_decaying_profile_stops_where_the_next_positions_no_longer_pay() -> None:
    p = [0.8 ** i for i in range(1, 9)]
    cost = model(lambda b, k: 1 + 0.15 * k)
    speedups = {k: (1 + sum(p[:k])) / (1 + 0.15 * k) for k in KS}
    assert max(speedups, key=lambda k: speedups[k]) == 4  # the table is built so that 4 beats 8 and 2
    rec = ok(recommend(p, drafts=1000, cost=cost, measured_k=8))
    assert [(r.from_batch_size, r.to_batch_size, r.k) for r in rec.ranges] == [(1, 1024, 4)]
    assert rec.ranges[0].expected_speedup_low == pytest.approx(speedups[4])


def _a(b: int) -> float:
    """Per-token verify cost that explodes between batch 16 and 32, as verification turns compute-bound."""
    return {1: 0.05, 2: 0.05, 4: 0.05, 8: 0.05, 16: 0.2, 32: 1.5, 64: 3.0}[b]


LOADED = model(lambda b, k: 1 + k * _a(b))


def test_under_load_speculation_stops_and_the_schedule_is_two_ranges() -> None:
    # All-accept up to 4: (1 + k) / (1 + k a) grows with k while a < 1, so 4 wins until it no longer pays 5%.
    # Between 16 and 32, a = 0.2 + 1.3 log2(b / 16); 5 / (1 + 4a) >= 1.05 while b <= 16 * 2**0.5696 = 23.7.
    rec = ok(recommend([1.0] * 4, drafts=1000, cost=LOADED, measured_k=4))
    assert [(r.from_batch_size, r.to_batch_size, r.k) for r in rec.ranges] == [(1, 23, 4), (24, 1024, 0)]
    low, high = rec.ranges[0].expected_speedup_low, rec.ranges[0].expected_speedup_high
    assert high == pytest.approx(5 / 1.2) and low == pytest.approx(5 / (1 + 4 * (0.2 + 1.3 * math.log2(23 / 16))))
    assert expected_speedup([1.0] * 4, LOADED, 24, 4) < 1.05  # the first batch size left without speculation
    assert rec.ranges[1].expected_speedup_low == rec.ranges[1].expected_speedup_high == 1.0


def test_the_margin_keeps_a_break_even_draft_off() -> None:
    # 1.04x at every batch size: not worth drafting with the default 5% margin, worth it with none.
    cost = model(lambda b, k: (1 + k) / 1.04)
    assert ok(recommend([1.0] * 8, 1000, cost, 8)).ranges[0].k == 0
    assert ok(recommend([1.0] * 8, 1000, cost, 8, margin=0.0)).ranges[0].k == 1  # ties between ks: the smallest


def test_exact_ties_go_to_the_smaller_k() -> None:
    # E(1) / c = 2 / 1.25 = 1.6 and E(2) / c = 3 / 1.875 = 1.6 at every batch size.
    cost = model(lambda b, k: {1: 1.25, 2: 1.875}.get(k, 10.0))
    rec = ok(recommend([1.0, 1.0, 0.0, 0.0], drafts=1000, cost=cost, measured_k=4))
    assert [(r.from_batch_size, r.to_batch_size, r.k) for r in rec.ranges] == [(1, 1024, 1)]
    # A draft exactly at break-even against no speculation loses the tie too, even with no margin.
    even = model(lambda b, k: 1.0 + k)
    assert ok(recommend([1.0] * 8, 1000, even, 8, margin=0.0)).ranges[0].k == 0


def test_too_few_drafts_give_no_recommendation_and_say_why() -> None:
    result = recommend([1.0] * 8, drafts=199, cost=CHEAP, measured_k=8)
    assert isinstance(result, NoRecommendation) and result.reason == "TooFewDrafts"
    assert "199" in result.message and "200" in result.message
    assert isinstance(recommend([1.0] * 8, drafts=200, cost=CHEAP, measured_k=8), Recommendation)
    assert isinstance(recommend([1.0] * 8, drafts=50, cost=CHEAP, measured_k=8, min_drafts=50), Recommendation)


def test_no_acceptance_by_position_gives_no_recommendation() -> None:
    for p, measured_k in (([], 8), ([1.0], 0)):
        result = recommend(p, drafts=1000, cost=CHEAP, measured_k=measured_k)
        assert isinstance(result, NoRecommendation) and result.reason == "NoAcceptanceByPosition"


def test_never_more_than_the_measured_k() -> None:
    # Positions 5..8 look perfect but were never proposed at measured_k 4: the table's k=8 is not a candidate.
    rec = ok(recommend([1.0] * 8, drafts=1000, cost=CHEAP, measured_k=4))
    assert {r.k for r in rec.ranges} == {4}
    # A measured_k between the table's ks: the largest measured k under it.
    assert {r.k for r in ok(recommend([1.0] * 8, 1000, CHEAP, 3)).ranges} == {2}
    with pytest.raises(ValueError, match="given for 2 positions, fewer than the measured 4"):
        recommend([1.0, 1.0], drafts=1000, cost=CHEAP, measured_k=4)
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        recommend([1.0, 1.2], drafts=1000, cost=CHEAP, measured_k=2)


def test_cost_between_measured_batch_sizes_is_linear_in_log2_and_clamped_beyond() -> None:
    cost = model(lambda b, k: {2: 1.2, 8: 2.4}[b] * (1 + k), batch_sizes=[2, 8])
    assert cost.at(4, 1) == pytest.approx(2 * 1.8)                       # halfway in log2 between 2 and 8
    assert cost.at(3, 1) == pytest.approx(2 * (1.2 + math.log2(1.5) / 2 * 1.2))
    assert cost.at(1, 1) == cost.at(2, 1) == 2.4                          # below the table: its first row
    assert cost.at(500, 4) == cost.at(8, 4) == 12.0                       # above it: its last row
    assert cost.at(5, 0) == 1.0
    with pytest.raises(ValueError, match="no measurement for draft length 3"):
        cost.at(4, 3)


def test_tokens_by_batch_size_is_the_operators_schedule_shape() -> None:
    rec = ok(recommend([1.0] * 4, drafts=1000, cost=LOADED, measured_k=4, max_batch=256))
    schedule = rec.to_tokens_by_batch_size()
    assert schedule == [{"fromBatchSize": 1, "toBatchSize": 23, "numSpeculativeTokens": 4},
                        {"fromBatchSize": 24, "toBatchSize": 256, "numSpeculativeTokens": 0}]
    assert [BatchSizeTokens.model_validate(r).num_speculative_tokens for r in schedule] == [4, 0]


def test_ranges_cover_every_batch_size_without_gaps() -> None:
    p = [0.8 ** i for i in range(1, 9)]
    rec = ok(recommend(p, drafts=1000, cost=model(lambda b, k: 1 + k * _a(b) ** 0.5), measured_k=8, max_batch=100))
    assert len(rec.ranges) > 2 and rec.ranges[0].from_batch_size == 1 and rec.ranges[-1].to_batch_size == 100
    pairs = zip(rec.ranges, rec.ranges[1:], strict=False)
    assert all(b.from_batch_size == a.to_batch_size + 1 and b.k != a.k for a, b in pairs)
    ks = [r.k for r in rec.ranges]
    assert ks == sorted(ks, reverse=True)  # more load, fewer tokens


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["relativeStepTime"][2].pop(), "row for batch size 4 must have one value per draft length"),
    (lambda d: d["relativeStepTime"].pop(), "one row per batch size"),
    (lambda d: d.update(batchSizes=[1, 2, 8, 4, 16, 32, 64]), "batchSizes must be strictly ascending"),
    (lambda d: d.update(draftLengths=[0, 1, 1, 4, 8]), "draftLengths must be strictly ascending"),
    (lambda d: [row.pop(0) for row in d["relativeStepTime"]] and d.update(draftLengths=[1, 2, 4, 8]),
     "draftLengths must include 0"),
    (lambda d: d["relativeStepTime"][1].__setitem__(3, 0.0), "batch size 2, draft length 4 must be a positive"),
    (lambda d: d["relativeStepTime"][1].__setitem__(3, -1.5), "batch size 2, draft length 4 must be a positive"),
    (lambda d: d["relativeStepTime"][0].__setitem__(0, 1.3), "batch size 1, draft length 0 must be 1.0"),
    (lambda d: d["relativeStepTime"][0].__setitem__(1, "fast"), "must be a number"),
    (lambda d: d.pop("vllmVersion"), "missing vllmVersion"),
    (lambda d: d.update(batchSizes=[0, 1, 2, 4, 8, 16, 32]), "batchSizes must be at least 1"),
    (lambda d: d.update(relativeStepTimeAllAccepted=d["relativeStepTime"][:3]),
     "relativeStepTimeAllAccepted must have one row per batch size"),
    (lambda d: d.update(relativeStepTimeAllAccepted=[[1.0, 2.0, 2.0, 2.0, float("nan")]] * 7),
     "relativeStepTimeAllAccepted at batch size 1, draft length 8 must be a positive"),
])
def test_a_bad_cost_model_is_refused_with_what_is_wrong(change: Callable[[dict[str, Any]], Any], message: str) -> None:
    data = table(lambda b, k: 1 + 0.1 * k)
    CostModel.from_dict(data)  # the unchanged table is fine
    change(data)
    with pytest.raises(ValueError, match=message):
        CostModel.from_dict(data)


def test_the_cost_model_round_trips() -> None:
    data = table(lambda b, k: 1 + k * _a(b))
    assert CostModel.from_dict(data).to_dict() == data
    assert CostModel.from_dict(data) == LOADED
    data["relativeStepTimeAllAccepted"] = table(lambda b, k: 1.5 + k * _a(b))["relativeStepTime"]
    assert CostModel.from_dict(data).to_dict() == data


# The random draft's table (nothing accepted) and the all-accept draft's: a step costs more the more it accepts.
TWO_ENDS = CostModel.from_dict({**table(lambda b, k: 1 + 0.1 * k),
                                "relativeStepTimeAllAccepted": table(lambda b, k: 1 + 0.3 * k)["relativeStepTime"]})


def test_a_step_costs_between_the_two_tables_by_the_tokens_it_accepts() -> None:
    assert TWO_ENDS.at(16, 4) == TWO_ENDS.at(16, 4, accepted=0) == pytest.approx(1.4)   # as the random table
    assert TWO_ENDS.at(16, 4, accepted=4) == pytest.approx(2.2)                         # as the all-accept table
    assert TWO_ENDS.at(16, 4, accepted=1) == pytest.approx(1.4 + 0.25 * 0.8)
    assert TWO_ENDS.at(16, 4, accepted=9) == pytest.approx(2.2)   # never past the measured end
    assert TWO_ENDS.at(16, 0, accepted=0) == 1.0
    # Without the all-accept table, acceptance changes nothing: the random table alone.
    assert CHEAP.at(16, 4, accepted=4) == CHEAP.at(16, 4)


def test_with_both_tables_an_accepting_draft_is_charged_its_accepted_tokens() -> None:
    p = [1.0] * 8
    assert expected_speedup(p, TWO_ENDS, 16, 8) == pytest.approx(9 / 3.4)
    only_random = CostModel.from_dict(table(lambda b, k: 1 + 0.1 * k))
    assert expected_speedup(p, only_random, 16, 8) == pytest.approx(9 / 1.8)
    # A draft accepted half the time at each of 2 positions: E(2) = 2.0, one token accepted per step of two.
    assert expected_speedup([0.5, 0.5], TWO_ENDS, 16, 2) == pytest.approx(2.0 / (1.2 + 0.5 * 0.4))


def test_gain_over_a_static_k() -> None:
    useless = [0.0] * 4
    rec = ok(recommend(useless, drafts=1000, cost=LOADED, measured_k=4))
    assert rec.to_tokens_by_batch_size() == [{"fromBatchSize": 1, "toBatchSize": 1024, "numSpeculativeTokens": 0}]
    # Unweighted: the mean over the table's batch sizes of 1.0, against the mean of 1 / c(b, 4) under static K=4.
    static = sum(1 / (1 + 4 * _a(b)) for b in BATCH_SIZES) / len(BATCH_SIZES)
    assert gain_over(4, rec, useless, LOADED) == pytest.approx(1 / static)
    # All traffic at batch 64: the static K=4 runs at 1/13 of no speculation.
    assert gain_over(4, rec, useless, LOADED, traffic={64: 1.0}) == pytest.approx(13.0)
    assert gain_over(0, rec, useless, LOADED) == 1.0
    assert gain_over(rec.ranges, rec, useless, LOADED) == 1.0


def test_gain_over_a_running_schedule_weighs_by_traffic() -> None:
    p = [1.0] * 4
    rec = ok(recommend(p, drafts=1000, cost=LOADED, measured_k=4, traffic={1: 3.0, 64: 1.0}))
    after = (3 * 5 / 1.2 + 1 * 1.0) / 4
    assert rec.weighted_speedup == pytest.approx(after)
    running = [ScheduleRange(1, 8, 2, 0, 0), ScheduleRange(32, 64, 4, 0, 0)]  # 9..31 carry on k=2; above 64, k=4
    before = (3 * 3 / 1.1 + 1 * 5 / 13) / 4
    assert gain_over(running, rec, p, LOADED, traffic={1: 3.0, 64: 1.0}) == pytest.approx(after / before)
    assert gain_over(running, rec, p, LOADED, traffic={20: 1.0}) == pytest.approx(
        expected_speedup(p, LOADED, 20, 4) / expected_speedup(p, LOADED, 20, 2))
    with pytest.raises(ValueError, match="no range for batch size 1"):
        gain_over([ScheduleRange(2, 8, 2, 0, 0)], rec, p, LOADED)
    with pytest.raises(ValueError, match="traffic carries no steps"):
        gain_over(4, rec, p, LOADED, traffic={1: 0.0})


def test_traffic_shares_follow_the_ranges_and_a_batch_past_the_last_runs_in_it() -> None:
    ranges = (ScheduleRange(1, 8, 4, 2.0, 2.5), ScheduleRange(9, 64, 0, 1.0, 1.0))
    assert traffic_shares(ranges, {1: 1.0, 8: 1.0, 9: 1.0, 2048: 1.0}) == [0.5, 0.5]
    with pytest.raises(ValueError, match="no steps"):
        traffic_shares(ranges, {4: 0.0})
