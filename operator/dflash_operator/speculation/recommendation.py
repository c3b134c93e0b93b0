"""spec.speculation.tuning = Recommend: the window's acceptance by draft position and a cost model, through
speculation.tuner, into status.speculation.recommendation. Figures are rounded (two decimals), so the status moves
only when the recommendation does."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from dflash_cache.pairing import parse_version
from dflash_operator.api import DFlashDeployment
from dflash_operator.api.tuning import RecommendedRange, SpeculationRecommendation
from dflash_operator.speculation import tuner

# The cost models shipped (speculation/cost_models/, one per vLLM release the GPU lane measured, all on an H200;
# docs/operations.md, "The cost model", says where each comes from), each named by the release in its own vllmVersion.
# The step cost moves between releases: 0.26's grid has K 8 at batch 64 at 12.7x the no-speculation step (vLLM issue
# #49548's collapse), which 0.23's two batch sizes (1, 16) cannot show.
# The fewest reads of a running batch size (idle engines left out) the window must hold before they weigh the
# batch sizes; fewer and every measured batch size counts the same. Ten reads is 300 s of one busy pod at the default
# resync: coarse, but a measured distribution beats an even one that is certainly wrong.
MIN_BATCH_SIZE_READS = 10


@functools.cache
def shipped_cost_models() -> dict[tuple[int, int], tuner.CostModel]:
    """The shipped cost models by the vLLM (major, minor) each was measured with."""
    by_release: dict[tuple[int, int], tuner.CostModel] = {}
    for file in resources.files("dflash_operator.speculation").joinpath("cost_models").iterdir():
        if file.name.endswith(".json"):
            model = tuner.CostModel.from_dict(json.loads(file.read_text()))
            release = parse_version(model.vllm_version)
            if release is None or release in by_release:
                raise ValueError(f"{file.name}: each shipped cost model needs a vLLM release of its own, "
                                 f"not {model.vllm_version!r}")
            by_release[release] = model
    return by_release


def shipped_cost_model_for(vllm_version: str | None) -> tuner.CostModel:
    """The shipped cost model for the serving vLLM: the newest release measured at or below it (a step's cost is a
    property of the engine's code, which a newer release keeps until it changes it); the oldest measured when the
    serving vLLM is older than all; the newest when its version is unknown (a digest, a `latest` tag), as images
    built today run a recent vLLM."""
    shipped = shipped_cost_models()
    releases = sorted(shipped)
    serving = parse_version(vllm_version)
    if serving is None:
        return shipped[releases[-1]]
    at_or_below = [r for r in releases if r <= serving]
    return shipped[at_or_below[-1] if at_or_below else releases[0]]


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
    traffic: Mapping[int, float] | None = None  # reads per running batch size, when enough to weigh by


def usable_traffic(batch_sizes: Mapping[int, int] | None) -> Mapping[int, float] | None:
    """The window's reads per running batch size as weights, or None when there are too few to mean anything."""
    if not batch_sizes or sum(batch_sizes.values()) < MIN_BATCH_SIZE_READS:
        return None
    return {b: float(n) for b, n in batch_sizes.items()}


def recommendation(dfd: DFlashDeployment, acceptance_by_position: list[float] | None, drafts: float,
                   default: tuner.CostModel, min_draft_tokens: int,
                   batch_sizes: Mapping[int, int] | None = None) -> Advice:
    """Nothing when tuning is Off; otherwise a schedule, or the reason there is none. `batch_sizes`: the window's
    reads per running batch size, which weigh the ranges once there are enough."""
    spec = dfd.spec.speculation
    if spec.tuning == "Off":
        return Advice(None)
    try:
        cost = tuner.CostModel.from_dict(spec.cost_model.model_dump(by_alias=True)) if spec.cost_model else default
    except ValueError as error:
        return Advice(SpeculationRecommendation(reason="InvalidCostModel",
                                                message=f"spec.speculation.costModel: {error}"))
    by_position = list(acceptance_by_position or [])
    measured = min(dfd.spec.num_speculative_tokens, len(by_position))
    # The window's floor is in draft tokens (operator.speculationMinDraftTokens); the tuner counts drafts.
    needed = max(1, min_draft_tokens // max(1, dfd.spec.num_speculative_tokens))
    traffic = usable_traffic(batch_sizes)
    found = tuner.recommend(by_position, int(drafts), cost, measured, min_drafts=needed, traffic=traffic)
    provenance = f"{cost.gpu}, vLLM {cost.vllm_version}, {cost.model}"
    if isinstance(found, tuner.NoRecommendation):
        # Worded without the live count: status is written when it changes, and the count moves every pass.
        message = (f"the window holds fewer than the {needed} drafts a recommendation needs"
                   if found.reason == "TooFewDrafts" else found.message)
        return Advice(SpeculationRecommendation(reason=found.reason, message=message, cost_model=provenance),
                      cost=cost)
    shares = tuner.traffic_shares(found.ranges, traffic) if traffic is not None else [None] * len(found.ranges)
    ranges = [RecommendedRange(from_batch_size=r.from_batch_size, to_batch_size=r.to_batch_size,
                               num_speculative_tokens=r.k, expected_speedup=round(r.expected_speedup_low, 2),
                               traffic_share=None if share is None else round(share, 1))
              for r, share in zip(found.ranges, shares, strict=True)]
    notes = []
    if spec.tokens_by_batch_size and spec.tuning == "Recommend":
        notes.append("spec.speculation.tokensByBatchSize is set: the pods run it; this recommendation is for "
                     "reference")
    if traffic is None:
        notes.append(f"the window holds fewer than {MIN_BATCH_SIZE_READS} reads of a running batch size: batch "
                     f"sizes are weighed evenly")
    weighted = round(found.weighted_speedup, 2) if found.weighted_speedup is not None else None
    return Advice(SpeculationRecommendation(schedule=ranges, summary=_summary(ranges), measured_tokens=measured,
                                            cost_model=provenance,
                                            weighted_speedup=weighted, message="; ".join(notes) or None),
                  found, cost, traffic)
