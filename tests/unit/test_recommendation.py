"""spec.speculation.tuning: the window and a cost model into status.speculation.recommendation."""

from __future__ import annotations

import copy
import json

import pytest
from test_reconcile import BODY

from dflash_operator.api import DFlashDeployment
from dflash_operator.runtime.config import ConfigError, from_environment
from dflash_operator.speculation.recommendation import recommendation, shipped_cost_model_for

ALL_ACCEPT, USELESS = [1.0] * 8, [0.0] * 8


def _dfd(**speculation) -> DFlashDeployment:
    body = copy.deepcopy(BODY)
    body["spec"]["numSpeculativeTokens"] = 8
    body["spec"]["speculation"] = speculation
    return DFlashDeployment.model_validate(body)


def test_the_shipped_cost_model_is_the_lanes_measurement() -> None:
    cost = shipped_cost_model_for("0.23.0")
    assert (cost.gpu, cost.vllm_version, cost.batch_sizes, cost.ks) == ("NVIDIA H200", "0.23.0", (1, 16), (0, 4, 8))
    # A random draft (acceptance 0) cost 0.39x of no speculation at batch 1 on the lane: c = 1 / 0.39.
    assert 2.5 < cost.at(1, 4) < 2.7


@pytest.mark.parametrize(("serving", "shipped"), [
    ("0.22.1", "0.23.0"),  # older than every release measured: the oldest
    ("0.23.0", "0.23.0"), ("0.25.0", "0.23.0"),  # the newest measured at or below it
    ("0.26.0", "0.26.0"), ("v0.32.0+cpu", "0.26.0"),
    (None, "0.26.0"),  # unknown (a digest, `latest`): the newest
])
def test_the_shipped_cost_model_follows_the_serving_vllm_release(serving: str | None, shipped: str) -> None:
    assert shipped_cost_model_for(serving).vllm_version == shipped


def test_the_shipped_026_model_holds_the_lanes_batch_64_collapse() -> None:
    cost = shipped_cost_model_for("0.26.0")
    assert (cost.batch_sizes, cost.ks) == ((1, 2, 4, 8, 16, 32, 64), (0, 1, 2, 4, 8))
    assert cost.at(64, 8) > 10 > cost.at(32, 8)  # 12.7 vs 2.5: vLLM issue #49548's threshold, seen on the lane
    # An always-right K 8 draft: K 8 while it pays, K 4 past the collapse, never K 8 at batch 64.
    found = recommendation(_dfd(), ALL_ACCEPT, 1000, cost, 200).found
    assert found is not None and [(r.k, r.to_batch_size >= 64) for r in found.ranges] == [(8, False), (4, True)]


def test_a_draft_that_is_always_right_is_recommended_at_its_longest_and_a_useless_one_nowhere() -> None:
    found = recommendation(_dfd(), ALL_ACCEPT, 1000, shipped_cost_model_for("0.23.0"), 200).status
    assert found is not None and found.summary == "1-1024:8" and found.measured_tokens == 8
    assert found.schedule is not None and found.schedule[0].expected_speedup > 3
    assert "NVIDIA H200, vLLM 0.23.0" in (found.cost_model or "")
    useless = recommendation(_dfd(), USELESS, 1000, shipped_cost_model_for("0.23.0"), 200).status
    assert useless is not None and useless.summary == "1-1024:0"


def test_no_recommendation_off_too_few_drafts_or_a_bad_cost_model() -> None:
    assert recommendation(_dfd(tuning="Off"), ALL_ACCEPT, 1000, shipped_cost_model_for("0.23.0"), 200).status is None
    few = recommendation(_dfd(), ALL_ACCEPT, 10, shipped_cost_model_for("0.23.0"), 200).status
    assert few is not None and few.reason == "TooFewDrafts" and few.schedule is None
    bad = _dfd(costModel={"gpu": "x", "vllmVersion": "0.24.0", "model": "m", "batchSizes": [1],
                          "draftLengths": [0, 4], "relativeStepTime": [[1.0, -2.0]]})
    found = recommendation(bad, ALL_ACCEPT, 1000, shipped_cost_model_for("0.23.0"), 200).status
    assert found is not None and found.reason == "InvalidCostModel" and "must be" in (found.message or "")


def test_a_users_schedule_wins_and_status_says_so() -> None:
    dfd = _dfd(tokensByBatchSize=[{"fromBatchSize": 1, "toBatchSize": 1024, "numSpeculativeTokens": 4}])
    found = recommendation(dfd, ALL_ACCEPT, 1000, shipped_cost_model_for("0.23.0"), 200).status
    assert found is not None and "the pods run it" in (found.message or "")


def test_the_chart_can_give_the_default_cost_model_and_a_bad_one_is_refused_at_start() -> None:
    own = {"gpu": "NVIDIA B200", "vllmVersion": "0.26.0", "model": "m", "batchSizes": [1, 64],
           "draftLengths": [0, 2], "relativeStepTime": [[1.0, 1.1], [1.0, 1.9]]}
    assert from_environment({"DFLASH_COST_MODEL": json.dumps(own)}).cost_model.gpu == "NVIDIA B200"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="DFLASH_COST_MODEL"):
        from_environment({"DFLASH_COST_MODEL": "{}"})
