"""spec.speculation.tuning = Recommend: the window's acceptance by draft position and a cost model, through
speculation.tuner, into status.speculation.recommendation. Figures are rounded (two decimals), so the status moves
only when the recommendation does."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from dflash_operator.api import DFlashDeployment
from dflash_operator.api.tuning import RecommendedRange, SpeculationRecommendation
from dflash_operator.speculation import tuner

# The default for the one hardware class measured so far; speculation/cost_models/ says where each comes from.
DEFAULT_COST_MODEL = "h200-vllm0.23-qwen3next-3.9b-random.json"


@functools.cache
def shipped_cost_model(name: str = DEFAULT_COST_MODEL) -> tuner.CostModel:
    text = resources.files("dflash_operator.speculation").joinpath("cost_models", name).read_text()
    return tuner.CostModel.from_dict(json.loads(text))


def parse_cost_model(text: str) -> tuner.CostModel:
    """The operator's default from the chart (JSON); ValueError with the reason when it is not a cost model."""
    return tuner.CostModel.from_dict(json.loads(text))


def _summary(ranges: list[RecommendedRange]) -> str:
    return ", ".join(f"{r.from_batch_size}-{r.to_batch_size}:{r.num_speculative_tokens}" for r in ranges)


@dataclass(frozen=True)
class Advice:
    status: SpeculationRecommendation | None  # what status.speculation.recommendation says; None when tuning is Off
    found: tuner.Recommendation | None = None  # the schedule, when there is one (what Auto may apply)
    cost: tuner.CostModel | None = None  # the cost model it came from


def recommendation(dfd: DFlashDeployment, acceptance_by_position: list[float] | None, drafts: float,
                   default: tuner.CostModel | None, min_draft_tokens: int) -> Advice:
    """Nothing when tuning is Off; otherwise a schedule, or the reason there is none."""
    spec = dfd.spec.speculation
    if spec.tuning == "Off":
        return Advice(None)
    try:
        cost = tuner.CostModel.from_dict(spec.cost_model.model_dump(by_alias=True)) if spec.cost_model else default
    except ValueError as error:
        return Advice(SpeculationRecommendation(reason="InvalidCostModel",
                                                message=f"spec.speculation.costModel: {error}"))
    if cost is None:
        return Advice(SpeculationRecommendation(reason="NoCostModel", message="no cost model for this hardware: set "
                                                                              "spec.speculation.costModel"))
    by_position = list(acceptance_by_position or [])
    measured = min(dfd.spec.num_speculative_tokens, len(by_position))
    # The window's floor is in draft tokens (operator.speculationMinDraftTokens); the tuner counts drafts.
    needed = max(1, min_draft_tokens // max(1, dfd.spec.num_speculative_tokens))
    found = tuner.recommend(by_position, int(drafts), cost, measured, min_drafts=needed)
    provenance = f"{cost.gpu}, vLLM {cost.vllm_version}, {cost.model}"
    if isinstance(found, tuner.NoRecommendation):
        # Worded without the live count: status is written when it changes, and the count moves every pass.
        message = (f"the window holds fewer than the {needed} drafts a recommendation needs"
                   if found.reason == "TooFewDrafts" else found.message)
        return Advice(SpeculationRecommendation(reason=found.reason, message=message, cost_model=provenance),
                      cost=cost)
    ranges = [RecommendedRange(from_batch_size=r.from_batch_size, to_batch_size=r.to_batch_size,
                               num_speculative_tokens=r.k, expected_speedup=round(r.expected_speedup_low, 2))
              for r in found.ranges]
    note = None
    if spec.tokens_by_batch_size and spec.tuning == "Recommend":
        note = "spec.speculation.tokensByBatchSize is set: the pods run it; this recommendation is for reference"
    return Advice(SpeculationRecommendation(schedule=ranges, summary=_summary(ranges), measured_tokens=measured,
                                            cost_model=provenance, message=note), found, cost)
