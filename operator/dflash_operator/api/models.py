"""The DFlashDeployment API: pydantic models that are the single source of the CRD schema.

Descriptions become `kubectl explain` text, defaults become schema defaults the API server applies, and
`x-kubernetes-validations` entries become CEL rules checked at apply time. Field names are camelCase on the wire.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator

from dflash_operator.api.base import ApiModel, cel
from dflash_operator.api.status import (
    CacheStatus,
    Condition,
    DFlashDeploymentStatus,
    ModelProgress,
    PairCheckStatus,
    ResolvedRevisions,
    SpeculationFallback,
    SpeculationStatus,
)
from dflash_operator.api.tuning import CostModelSpec

GROUP = "serving.dflash.dev"
VERSION = "v1alpha1"
KIND = "DFlashDeployment"
PLURAL = "dflashdeployments"
SINGULAR = "dflashdeployment"
SHORT_NAMES = ["dfd"]

# The image built from images/vllm at the newest tag of images/vllm/SUPPORTED_VLLM (a unit test holds them together;
# the image build refuses tags outside that list). The "-dflash.N" suffix counts builds of our plugin on one tag.
DEFAULT_VLLM_VERSION = "0.32.0"
DEFAULT_IMAGE = f"ghcr.io/dflash-dev/vllm-dflash:v{DEFAULT_VLLM_VERSION}-dflash.1"
DEFAULT_PROBE_PROMPT = "def fibonacci(n):"

# Flags the operator sets itself from the spec. Letting extraArgs repeat them would make the pod's behaviour depend
# on argument order inside vLLM, so they are rejected at apply time (CEL) and again before rendering.
RESERVED_VLLM_FLAGS = (
    "model", "served-model-name", "revision", "tokenizer", "tokenizer-revision", "speculative-config",
    "tensor-parallel-size", "max-model-len", "host", "port", "download-dir", "per-request-spec-decode-metrics",
)
_RESERVED_FLAG_REGEX = "^--(" + "|".join(f.replace("-", "[-_]") for f in RESERVED_VLLM_FLAGS) + ")(=.*)?$"

# Names of Services, and so of DFlashDeployments.
DNS_1035 = "[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
# A Hugging Face repo id: owner/name, letters, digits, '-', '_', '.'.
_REPO_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$"
# A vLLM release as users write it: 0.32, 0.32.0, v0.32.1.
VLLM_VERSION_PATTERN = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?$"
# A branch, tag or 40-hex commit; no whitespace, no '..', as git refs allow.
_REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,254}$"


# git check-ref-format's rules that the pattern above cannot say (RE2 has no lookahead): the hub resolves branches and
# tags by git ref name, and a name git refuses can never resolve.
_GIT_REF_RULE = ("!self.contains('..') && !self.contains('//') && !self.contains('/.') && !self.endsWith('/') "
                 "&& !self.endsWith('.') && !self.endsWith('.lock') && !self.contains('.lock/')")
_GIT_REF_MESSAGE = ("revision must follow git's ref-name rules: no '..' or '//', no part starting with '.' or "
                    "ending with '.lock', no trailing '/' or '.'")


def git_ref_problem(revision: str) -> bool:
    """True when `revision` breaks a rule of _GIT_REF_RULE (kept word for word in Python)."""
    return (".." in revision or "//" in revision or "/." in revision or revision.endswith(("/", ".", ".lock"))
            or ".lock/" in revision)




def immutable(what: str) -> dict[str, Any]:
    return cel("self == oldSelf", f"{what} is immutable: create a new DFlashDeployment to change it")


# http(s)://host[:port][/path], no query, fragment, credentials or spaces: the hub client appends its own paths.
HUB_ENDPOINT_PATTERN = r"^https?://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~\-/]*)?$"


class ModelRef(ApiModel):
    """A model on the Hugging Face hub, pinned by revision."""

    repo: Annotated[str, Field(
        description="Hub repository id, owner/name (e.g. Qwen/Qwen3-Coder-Next).",
        pattern=_REPO_ID_PATTERN,
    )]
    revision: Annotated[str, Field(
        description="Branch, tag or commit. Branches and tags are resolved to a commit before download; "
                    "the commit is recorded in status and never changes until this field does. Follows git's "
                    "ref-name rules (git check-ref-format): letters, digits and _ . / -, no '..' or '//', no part "
                    "starting with '.' or ending with '.lock', no trailing '/' or '.'.",
        pattern=_REVISION_PATTERN,
        json_schema_extra={"x-kubernetes-validations": [cel(_GIT_REF_RULE, _GIT_REF_MESSAGE)]},
    )] = "main"

    @field_validator("revision")
    @classmethod
    def _git_ref_name(cls, value: str) -> str:
        # The same rule as the CEL one, for specs that do not come through the API server (dflash-operator render).
        if git_ref_problem(value):
            raise ValueError(_GIT_REF_MESSAGE)
        return value


class SecretKeyRef(ApiModel):
    """A key of a Secret in the DFlashDeployment's namespace."""

    name: Annotated[str, Field(description="Secret name.", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")]
    key: Annotated[str, Field(description="Key inside the Secret.", min_length=1, max_length=253)] = "token"


class CacheSpec(ApiModel):
    """The paired model cache: one PersistentVolumeClaim holding target and draft, shared by replicas."""

    storage_class_name: Annotated[str | None, Field(
        description="StorageClass of the cache PVC; unset uses the cluster default.",
        json_schema_extra={"x-kubernetes-validations": [immutable("cache.storageClassName")]},
    )] = None
    size: Annotated[str, Field(
        description="Requested size of the cache PVC, a Kubernetes quantity (e.g. 200Gi). It may grow, never shrink.",
        json_schema_extra={"x-kubernetes-validations": [
            cel("isQuantity(self)", "cache.size must be a quantity such as 200Gi"),
            cel("!isQuantity(self) || !isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0",
                "cache.size may grow but not shrink: a PVC cannot be made smaller"),
        ]},
    )] = "200Gi"
    access_mode: Annotated[Literal["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"], Field(
        description="Access mode of the cache PVC. ReadWriteMany lets replicas on different nodes, and other "
                    "DFlashDeployments with the same pair, share one cache.",
        json_schema_extra={"x-kubernetes-validations": [immutable("cache.accessMode")]},
    )] = "ReadWriteMany"
    retain_policy: Annotated[Literal["Keep", "Delete"], Field(
        description="What happens to the cache when the last DFlashDeployment using it is deleted.",
    )] = "Keep"


class ReadinessSpec(ApiModel):
    """How readiness proves that speculation works: the probe runs a real speculative generation."""

    min_acceptance_rate: Annotated[float, Field(
        description="A pod is ready only when the fraction of draft tokens accepted during the probe is at least "
                    "this. 0 only requires that speculation is active.",
        ge=0.0, le=1.0,
    )] = 0.1
    probe_prompt: Annotated[str, Field(
        description="Prompt of the probe's short completion.", min_length=1, max_length=2000,
    )] = DEFAULT_PROBE_PROMPT
    probe_max_tokens: Annotated[int, Field(
        description="Tokens the probe generates; a few suffice to see drafts accepted.", ge=1, le=256,
    )] = 16
    probe_timeout_seconds: Annotated[int, Field(
        description="Timeout of one probe run, in seconds.", ge=1, le=600,
    )] = 10
    startup_timeout_seconds: Annotated[int, Field(
        description="How long a pod may take to load the models and pass its first probe before it is restarted.",
        ge=60, le=86400,
    )] = 3600


class BatchSizeTokens(ApiModel):
    """How many tokens the draft proposes while the running batch is within [fromBatchSize, toBatchSize]."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel("self.fromBatchSize <= self.toBatchSize", "fromBatchSize must not exceed toBatchSize"),
    ]})

    from_batch_size: Annotated[int, Field(description="Smallest batch size of the range.", ge=1, le=65536)]
    to_batch_size: Annotated[int, Field(description="Largest batch size of the range (inclusive).", ge=1, le=65536)]
    num_speculative_tokens: Annotated[int, Field(
        description="Tokens proposed per step in this range; 0 turns speculation off for it. At most "
                    "spec.numSpeculativeTokens.", ge=0, le=32)]


class SpeculationSpec(ApiModel):
    """How the operator watches speculation on live traffic, and what it does when the draft stops paying."""

    min_acceptance_rate: Annotated[float | None, Field(
        description="The floor for the acceptance rate over the window (SpeculationHealthy, and onLowAcceptance). "
                    "Unset: spec.readiness.minAcceptanceRate.",
        ge=0.0, le=1.0,
    )] = None
    window_seconds: Annotated[int, Field(
        description="Length of the window the acceptance figures are taken over, from counter increases of every "
                    "serving pod (pods restarted or removed within it included).",
        ge=30, le=86400,
    )] = 300
    on_low_acceptance: Annotated[Literal["Alert", "Fallback"], Field(
        description="Alert: SpeculationHealthy=False, an event and a metric, nothing else. Fallback: once the "
                    "window's acceptance has stayed under the floor for fallbackAfterSeconds, the pods roll (one "
                    "surge pod at a time, none removed before its successor is ready) to serve the target without "
                    "the draft. Speculation comes back when the draft, target, image or speculation settings change, "
                    "or when the annotation serving.dflash.dev/resume-speculation is given a new value.",
    )] = "Alert"
    fallback_after_seconds: Annotated[int, Field(
        description="How long the acceptance must stay under the floor before Fallback acts.", ge=0, le=604800,
    )] = 600
    tokens_by_batch_size: Annotated[list[BatchSizeTokens] | None, Field(
        description="Speculation that backs off under load (vLLM num_speculative_tokens_per_batch_size, vLLM "
                    "0.24+): the draft tokens per step for ranges of the running batch size, e.g. 8 up to 4 "
                    "sequences, 2 up to 32, 0 above. One range starts at 1; ranges do not overlap; a gap carries the "
                    "range below it on. Unset: spec.numSpeculativeTokens at every batch size.",
        min_length=1, max_length=16,
        json_schema_extra={"x-kubernetes-validations": [
            cel("self.exists(r, r.fromBatchSize == 1)",
                "one range of tokensByBatchSize must start at fromBatchSize 1, so every batch size has a count"),
            # Each range meets exactly one range (itself): two equal ranges overlap too.
            cel("self.all(a, self.filter(b, !(a.toBatchSize < b.fromBatchSize || b.toBatchSize < a.fromBatchSize))"
                ".size() == 1)", "the ranges of tokensByBatchSize must not overlap"),
        ]},
    )] = None
    tuning: Annotated[Literal["Off", "Recommend", "Auto"], Field(
        description="Recommend: from the window's acceptance by draft position and a cost model of verifying k "
                    "draft tokens at each running batch size, the operator publishes the draft length each batch "
                    "size should use (status.speculation.recommendation; 0 where no length pays). Auto: it also "
                    "rolls the pods onto the schedule's best single length, as a plain draft length (0: the target "
                    "alone), one surge pod at a time, none removed before its successor passes the probe, when its "
                    "expected speedup beats the running one by tuningMinGain, at most once per "
                    "tuningIntervalSeconds, never during a Fallback; the applied length is "
                    "status.speculation.tuned. spec.speculation.tokensByBatchSize, when set, always "
                    "wins. The operator never writes the spec. Off: no recommendation.",
    )] = "Recommend"
    tuning_interval_seconds: Annotated[int, Field(
        description="Auto: the least time between two draft-length changes (each one rolls the pods).",
        ge=60, le=604800,
    )] = 3600
    tuning_min_gain: Annotated[float, Field(
        description="Auto: the least relative gain in expected speedup (0.05: 5%) a new draft length must promise "
                    "over the running one before the pods roll onto it.",
        ge=0.0, le=10.0,
    )] = 0.05
    cost_model: Annotated[CostModelSpec | None, Field(
        description="The cost model the recommendation uses, measured on this deployment's hardware and vLLM. "
                    "Unset: the operator's default (the chart's operator.costModel, else the one shipped for the "
                    "serving vLLM release: status.speculation.recommendation.costModel names it).",
    )] = None


def _power_of_two_rule() -> dict[str, Any]:
    powers = ", ".join(str(2**i) for i in range(8))
    return cel(f"self in [{powers}]", "tensorParallelSize must be a power of two between 1 and 128")


class DFlashDeploymentSpec(ApiModel):
    """Desired state: a target model served by vLLM with a DFlash draft model for speculative decoding."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [
            cel("self.draft.repo != self.target.repo",
                "spec.draft.repo must differ from spec.target.repo: a model cannot be its own DFlash draft",
                fieldPath=".draft.repo"),
            cel("!has(self.speculation) || !has(self.speculation.tokensByBatchSize) || "
                "self.speculation.tokensByBatchSize.all(r, r.numSpeculativeTokens <= self.numSpeculativeTokens)",
                "spec.speculation.tokensByBatchSize may not propose more tokens than spec.numSpeculativeTokens",
                fieldPath=".speculation.tokensByBatchSize"),
            cel("!has(self.draftTensorParallelSize) || self.draftTensorParallelSize == 1 "
                "|| self.draftTensorParallelSize == self.tensorParallelSize",
                "spec.draftTensorParallelSize must be 1 or spec.tensorParallelSize: vLLM runs the draft on one GPU "
                "or across the target's", fieldPath=".draftTensorParallelSize"),
        ]},
    )

    target: Annotated[ModelRef, Field(description="The model that is served (the verifier).")]
    draft: Annotated[ModelRef, Field(description="The DFlash draft model that proposes tokens for the target.")]
    num_speculative_tokens: Annotated[int, Field(
        description="Tokens the draft proposes per step (vLLM num_speculative_tokens).", ge=1, le=32,
    )] = 8
    draft_tensor_parallel_size: Annotated[int | None, Field(
        description="GPUs the draft runs on (vLLM speculative config draft_tensor_parallel_size): 1, or "
                    "spec.tensorParallelSize. Unset: vLLM's default, the target's tensor parallel size.",
        ge=1, le=128,
    )] = None
    per_request_speculative_metrics: Annotated[Literal["Summary", "Detailed"] | None, Field(
        description="Adds speculative-decoding figures to each single-sequence completion response, under "
                    "metrics.speculative_decoding (vLLM --per-request-spec-decode-metrics): Summary gives acceptance "
                    "rate, mean accepted length and a histogram, Detailed also the per-step arrays. Needs vLLM 0.29+; "
                    "unset: off.",
    )] = None
    vllm_version: Annotated[str | None, Field(
        description="The vLLM version of spec.image, for images whose tag does not start with it (vX.Y.Z...). It "
                    "decides, before anything is downloaded, which typed fields the spec may use; the cache Job's "
                    "pair check then reports the version the image really has (status.pairCheck.vllmVersion), "
                    "which wins.",
        pattern=VLLM_VERSION_PATTERN, max_length=32,
    )] = None
    replicas: Annotated[int, Field(description="Number of serving pods.", ge=0, le=1000)] = 1
    tensor_parallel_size: Annotated[int, Field(
        description="GPUs per pod; vLLM --tensor-parallel-size. A power of two.",
        json_schema_extra={"x-kubernetes-validations": [_power_of_two_rule()]},
    )] = 1
    gpu_resource_name: Annotated[str, Field(
        description="Extended resource that requests one GPU.",
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$",
    )] = "nvidia.com/gpu"
    image: Annotated[str, Field(
        description="vLLM image carrying the DFlash plugin and the speculative probe.", min_length=1,
    )] = DEFAULT_IMAGE
    extra_args: Annotated[list[Annotated[str, Field(
        json_schema_extra={"x-kubernetes-validations": [cel(
            f"!self.matches('{_RESERVED_FLAG_REGEX}')",
            "extraArgs may not set a flag the operator sets from the spec: "
            + ", ".join(f"--{f}" for f in RESERVED_VLLM_FLAGS),
        )]},
        # The API server bounds a CEL rule's cost by its input's size x how often it can run (maxItems): with the
        # reserved-flag regex, 4096 characters x 128 arguments exceeded that budget.
        max_length=2048,
    )]], Field(description="Extra vLLM command-line arguments, appended after the operator's own.", max_length=128,
    )] = []
    max_model_len: Annotated[int | None, Field(
        description="vLLM --max-model-len; unset lets vLLM take the model's own.", ge=16,
    )] = None
    env: Annotated[list[dict[str, Any]], Field(
        description="Extra environment variables of the vLLM container (core/v1 EnvVar).",
        json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    )] = []
    node_selector: Annotated[dict[str, str], Field(description="Node labels the pods must run on.")] = {}
    tolerations: Annotated[list[dict[str, Any]], Field(
        description="Tolerations of the pods (core/v1 Toleration).",
        json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    )] = []
    affinity: Annotated[dict[str, Any] | None, Field(
        description="Affinity of the pods (core/v1 Affinity).",
        json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    )] = None
    resources: Annotated[dict[str, Any] | None, Field(
        description="CPU and memory requests/limits of the vLLM container; the GPU limit is set from "
                    "tensorParallelSize and may not be given here.",
        json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    )] = None
    hub_endpoint: Annotated[str | None, Field(
        description="Base URL of the hub the cache job downloads from, e.g. a company's hub mirror "
                    "(HF_ENDPOINT). Default: the operator's setting (chart value hub.endpoint), else huggingface.co.",
        pattern=HUB_ENDPOINT_PATTERN, max_length=2048,
    )] = None
    hub_token_secret_ref: Annotated[SecretKeyRef | None, Field(
        description="Secret with a Hugging Face token, for gated or private models. Read only by the cache job.",
    )] = None
    cache: Annotated[CacheSpec, Field(
        description="The paired model cache.", default_factory=CacheSpec, json_schema_extra={"default": {}},
    )]
    readiness: Annotated[ReadinessSpec, Field(
        description="Readiness gating on a real speculative generation.",
        default_factory=ReadinessSpec, json_schema_extra={"default": {}},
    )]
    speculation: Annotated[SpeculationSpec, Field(
        description="Watching acceptance on live traffic: the window, the floor, and what low acceptance does.",
        default_factory=SpeculationSpec, json_schema_extra={"default": {}},
    )]


class DFlashDeployment(ApiModel):
    """The whole resource, as the operator reads it."""

    model_config = ConfigDict(extra="ignore")

    api_version: str = f"{GROUP}/{VERSION}"
    kind: str = KIND
    metadata: dict[str, Any] = {}
    spec: DFlashDeploymentSpec
    status: DFlashDeploymentStatus | None = None


__all__ = [  # the status models live in api.status; importing them from here keeps working
    "CacheStatus", "Condition", "DFlashDeploymentStatus", "ModelProgress", "PairCheckStatus", "ResolvedRevisions",
    "SpeculationFallback", "SpeculationStatus",
]
