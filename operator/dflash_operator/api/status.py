"""The DFlashDeployment's status models: what the operator reports (conditions in the kstatus shape, the cache, the
pinned revisions, the pair check, speculation on live traffic). Written only by the operator, through the status
subresource."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from dflash_operator.api.base import ApiModel
from dflash_operator.api.tuning import SpeculationRecommendation, TunedSchedule


class Condition(ApiModel):
    """A kstatus-style condition."""

    type: Annotated[str, Field(description="Ready, Reconciling, Stalled, CacheReady, ModelsCompatible or "
                                           "SpeculationHealthy.")]
    status: Annotated[Literal["True", "False", "Unknown"], Field(description="True, False or Unknown.")]
    reason: Annotated[str, Field(description="One CamelCase word a program can match.")] = ""
    message: Annotated[str, Field(description="What a person should know.")] = ""
    observed_generation: Annotated[int, Field(description="The spec generation this condition describes.")] = 0
    last_transition_time: Annotated[str, Field(description="When status last changed (RFC 3339).")] = ""


class ResolvedRevisions(ApiModel):
    """Commits the revisions in spec resolved to."""

    target_commit: Annotated[str | None, Field(description="Commit of the target model.")] = None
    draft_commit: Annotated[str | None, Field(description="Commit of the draft model.")] = None


class SpeculationFallback(ApiModel):
    """Why and since when the pods serve the target without the draft (spec.speculation.onLowAcceptance)."""

    since: Annotated[str, Field(description="When the operator rolled the pods off speculation (RFC 3339).")]
    message: Annotated[str, Field(description="The measurement that decided it.")]


class SpeculationStatus(ApiModel):
    """Speculative decoding over the recent window, from counter increases in the serving pods' vLLM /metrics.

    Figures are rounded to two decimals, so status is written when a figure visibly changes, not on every read."""

    acceptance_rate: Annotated[float | None, Field(
        description="Accepted / proposed draft tokens over the window.")] = None
    mean_accepted_length: Annotated[float | None, Field(
        description="Tokens produced per target step over the window: 1 + accepted / drafts.")] = None
    acceptance_by_position: Annotated[list[float] | None, Field(
        description="Per draft position: drafts whose token at that position was accepted / drafts.")] = None
    window_seconds: Annotated[int | None, Field(description="The window the figures cover.")] = None
    pods_measured: Annotated[int | None, Field(
        description="Serving pods (running, ready or not) whose counters the window holds.")] = None
    below_floor_since: Annotated[str | None, Field(
        description="Since when the window's acceptance has been under the floor (RFC 3339); cleared once it is "
                    "back above the floor plus a margin.")] = None
    fallback: Annotated[SpeculationFallback | None, Field(
        description="Set while the pods serve the target without the draft.")] = None
    fingerprint: Annotated[str | None, Field(
        description="What the figures judge: a fingerprint of the target, draft, image, numSpeculativeTokens, "
                    "spec.speculation, the floor and the serving.dflash.dev/resume-speculation annotation. When it "
                    "changes, figures and verdict start afresh and a Fallback ends.")] = None
    recommendation: Annotated[SpeculationRecommendation | None, Field(
        description="The draft length each running batch size should use (spec.speculation.tuning).")] = None
    tuned: Annotated[TunedSchedule | None, Field(
        description="Set while spec.speculation.tuning Auto has the pods run a recommended draft length.")] = None


class ModelProgress(ApiModel):
    """Download progress of one model."""

    bytes_done: Annotated[int | None, Field(description="Bytes cached and verified so far.")] = None
    bytes_total: Annotated[int | None, Field(description="Bytes of the model at the resolved commit.")] = None


class PairCheckStatus(ApiModel):
    """Who judged the draft/target pair, once both models were cached."""

    checked_by: Annotated[str | None, Field(
        description="vllm: the serving image's vLLM judged the pair (dflash-check-pair); operator: the operator's "
                    "rules alone, when the image has no dflash-check-pair.")] = None
    vllm_version: Annotated[str | None, Field(description="The serving image's vLLM version, as it reported it.")
                            ] = None
    draft_layout: Annotated[str | None, Field(
        description="The draft config's layout: z-lab (DFlash2 drafts included) or speculators.")] = None
    notes: Annotated[list[str] | None, Field(
        description="Where vLLM read the draft differently from the operator's rules, and which reading won.")
    ] = None


class CacheStatus(ApiModel):
    """The paired cache this deployment uses."""

    name: Annotated[str | None, Field(description="Name of the cache PVC and of its download Job.")] = None
    phase: Annotated[str | None, Field(description="Downloading, Failed or Complete.")] = None
    message: Annotated[str | None, Field(description="What the cache Job reports.")] = None
    percent: Annotated[float | None, Field(description="Bytes done over bytes total of both models, in percent.")
                       ] = None
    target: Annotated[ModelProgress | None, Field(description="Progress of the target model.")] = None
    draft: Annotated[ModelProgress | None, Field(description="Progress of the draft model.")] = None


class DFlashDeploymentStatus(ApiModel):
    """Observed state, written only by the operator."""

    observed_generation: Annotated[int | None, Field(description="The spec generation last reconciled.")] = None
    conditions: Annotated[list[Condition], Field(description="Current conditions.")] = []
    replicas: Annotated[int | None, Field(description="Serving pods that exist.")] = None
    ready_replicas: Annotated[int | None, Field(description="Serving pods that passed the speculative probe.")] = None
    selector: Annotated[str | None, Field(description="Label selector of the serving pods (scale subresource).")] = None
    resolved: Annotated[ResolvedRevisions | None, Field(description="Resolved revisions.")] = None
    endpoint: Annotated[str | None, Field(description="In-cluster URL of the OpenAI-compatible API.")] = None
    speculation: Annotated[SpeculationStatus | None, Field(description="Speculative decoding metrics.")] = None
    cache: Annotated[CacheStatus | None, Field(description="The paired model cache.")] = None
    pair_check: Annotated[PairCheckStatus | None, Field(description="The pair check of the cached models.")] = None
