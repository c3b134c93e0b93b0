"""The draft-length recommendation's API: the cost model a DFlashDeployment may bring, and what status reports.
The arithmetic is speculation.tuner's; these are only the shapes on the wire."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from dflash_operator.api.base import ApiModel


class CostModelSpec(ApiModel):
    """Relative step time c(b, k) = t(b, k) / t(b, 0) of verifying k draft tokens (and the draft's own pass) at
    running batch size b, measured on one GPU, vLLM release and model (scripts/gpu: bench.py, cost_model.py)."""

    gpu: Annotated[str, Field(description="The GPU it was measured on.", min_length=1, max_length=128)]
    vllm_version: Annotated[str, Field(description="The vLLM release it was measured with.", min_length=1,
                                       max_length=32)]
    model: Annotated[str, Field(description="The target and draft it was measured with.", min_length=1,
                                max_length=256)]
    batch_sizes: Annotated[list[int], Field(description="Measured batch sizes, ascending.", min_length=1,
                                            max_length=32)]
    draft_lengths: Annotated[list[int], Field(description="Measured draft lengths k, ascending, starting at 0.",
                                              min_length=2, max_length=33)]
    relative_step_time: Annotated[list[list[float]], Field(
        description="One row per batch size, one value per draft length; 1.0 at k = 0. Measured with a draft that "
                    "accepts nothing (a random one).", min_length=1, max_length=32)]
    relative_step_time_all_accepted: Annotated[list[list[float]] | None, Field(
        description="Optional, the same shape measured with a draft whose every token is accepted: a step then "
                    "costs relativeStepTime plus (accepted tokens per step / k) of the way to this.", min_length=1,
        max_length=32)] = None


class RecommendedRange(ApiModel):
    from_batch_size: Annotated[int, Field(description="Smallest running batch size of the range.")]
    to_batch_size: Annotated[int, Field(description="Largest running batch size of the range (inclusive).")]
    num_speculative_tokens: Annotated[int, Field(description="The draft length that pays most here; 0: none pays.")]
    expected_speedup: Annotated[float, Field(
        description="Expected output tokens per second against no speculation, the range's lowest.")]
    traffic_share: Annotated[float | None, Field(
        description="Share of the window's reads of the running batch size (vllm:num_requests_running, every "
                    "engine, idle ones left out) that fell in this range, to one decimal; absent while the window has "
                    "too few.")
                             ] = None


class SpeculationRecommendation(ApiModel):
    """The draft length each running batch size should use, from the window and a cost model (spec.speculation
    .tuning). For reference: the pods run spec.numSpeculativeTokens (or spec.speculation.tokensByBatchSize)."""

    schedule: Annotated[list[RecommendedRange] | None, Field(
        description="Ranges covering batch sizes 1 to 1024 (the shape of spec.speculation.tokensByBatchSize).")] = None
    summary: Annotated[str | None, Field(description="The schedule in one line: from-to:k, ...")] = None
    measured_tokens: Annotated[int | None, Field(
        description="Draft positions the window measured: never recommends more (unknown beyond).")] = None
    cost_model: Annotated[str | None, Field(description="The cost model's GPU, vLLM release and model.")] = None
    weighted_speedup: Annotated[float | None, Field(
        description="Expected speedup of the schedule over the window's traffic: each batch size weighted by its "
                    "share of reads. Absent while the window has too few reads (Auto then weighs the cost model's "
                    "batch sizes evenly).")] = None
    reason: Annotated[str | None, Field(description="Why there is no recommendation (TooFewDrafts, ...).")] = None
    message: Annotated[str | None, Field(description="The reason, or a note on the recommendation, for people.")
                       ] = None


class TunedSchedule(ApiModel):
    """The draft length spec.speculation.tuning Auto applied, as one range 1-1024: the pods run it in place of
    spec.numSpeculativeTokens (0: the target alone). The spec is never written."""

    schedule: Annotated[list[RecommendedRange], Field(description="The range the pods run (1-1024).", min_length=1)]
    summary: Annotated[str, Field(description="In one line: 1-1024:k.")]
    since: Annotated[str, Field(description="When it was applied (RFC 3339); the next change waits "
                                            "spec.speculation.tuningIntervalSeconds from here.")]
    expected_speedup: Annotated[float, Field(
        description="Its expected output tokens per second against no speculation when applied, weighted as "
                    "weightedBy says.")]
    replaced: Annotated[str, Field(description="The length it replaced, 1-1024:k.")]
    replaced_expected_speedup: Annotated[float, Field(
        description="The replaced schedule's expected speedup on the same window and cost model.")]
    weighted_by: Annotated[Literal["Traffic", "MeasuredBatchSizes"] | None, Field(
        description="How the batch sizes were weighted: Traffic, by the window's reads of the running batch size; "
                    "MeasuredBatchSizes, evenly over the cost model's batch sizes (too few reads).")] = None
