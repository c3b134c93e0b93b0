"""What the API server admitted but no pod could run with: each problem with a reason for the Stalled condition.

Checked before anything is created, even the cache, so a spec that cannot work spends no download and no GPU.
The renderers assume a spec without problems and never raise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dflash_operator.api import RESERVED_VLLM_FLAGS, DFlashDeployment, DFlashDeploymentSpec
from dflash_operator.api.models import DNS_1035
from dflash_operator.render.serving import OPERATOR_ENV
from dflash_operator.speculation.vllm_features import NEEDS_NEWER_VLLM, declared_version, missing_features

# vLLM short forms of reserved flags; `-tp 2` would otherwise slip past the long-name check.
_RESERVED_SHORT = frozenset({"-tp"})  # --tensor-parallel-size


@dataclass(frozen=True)
class SpecProblem:
    reason: str  # one CamelCase word, the Stalled condition's reason
    message: str


def reserved_flag_collisions(extra_args: list[str]) -> list[str]:
    """The extra args that would override a flag the operator sets (long or short form, `--x=v` or `--x v`)."""
    reserved = {f"--{f}" for f in RESERVED_VLLM_FLAGS}
    found = []
    for arg in extra_args:
        flag = arg.split("=", 1)[0].replace("_", "-")
        if flag in reserved or flag in _RESERVED_SHORT:
            found.append(arg)
    return found


def spec_problems(dfd: DFlashDeployment) -> list[SpecProblem]:
    """Every reason this admitted DFlashDeployment cannot be rendered; empty when it can."""
    spec, name = dfd.spec, dfd.metadata["name"]
    problems = []
    if not re.fullmatch(DNS_1035, name):
        problems.append(SpecProblem("InvalidName", f"name {name!r} is not a valid Service name (DNS-1035)"))
    collisions = reserved_flag_collisions(spec.extra_args)
    if collisions:
        problems.append(SpecProblem(
            "ExtraArgsCollide",
            f"spec.extraArgs {collisions} would override flags the operator sets from the spec; "
            f"remove them and use the spec fields instead"))
    given = spec.resources or {}
    for part in ("limits", "requests"):
        if spec.gpu_resource_name in (given.get(part) or {}):
            problems.append(SpecProblem(
                "GpuInResources",
                f"spec.resources.{part} sets {spec.gpu_resource_name}; the GPU count comes from "
                f"spec.tensorParallelSize ({spec.tensor_parallel_size})"))
            break
    clashing = sorted({e["name"] for e in OPERATOR_ENV} & {e.get("name") for e in spec.env})
    if clashing:
        problems.append(SpecProblem("EnvCollides", f"spec.env sets {clashing}, which the operator sets itself"))
    names = [e.get("name") for e in spec.env]
    repeated = sorted({n for n in names if names.count(n) > 1}, key=str)
    if repeated:
        # Found by the fuzz test: server-side apply cannot merge a list keyed by name that repeats a key; the API
        # server answers 500 ("duplicate entries for key"), which looks transient and would be retried forever.
        problems.append(SpecProblem("EnvRepeated", f"spec.env sets {repeated} more than once; give each name once"))
    problems += [SpecProblem("InvalidBatchSchedule", m) for m in batch_schedule_problems(spec)]
    source = "spec.vllmVersion" if spec.vllm_version else f"spec.image ({spec.image})"
    problems += [SpecProblem(NEEDS_NEWER_VLLM, m) for m in missing_features(spec, declared_version(spec), source)]
    return problems


def batch_schedule_problems(spec: DFlashDeploymentSpec) -> list[str]:
    """The CRD's CEL rules for spec.speculation.tokensByBatchSize, again for specs that did not come through the
    API server (`dflash-operator render`): vLLM refuses the same at start-up, on a GPU."""
    ranges = spec.speculation.tokens_by_batch_size
    if ranges is None:
        return []
    where = "spec.speculation.tokensByBatchSize"
    found = [f"{where}[{i}]: fromBatchSize {r.from_batch_size} exceeds toBatchSize {r.to_batch_size}"
             for i, r in enumerate(ranges) if r.from_batch_size > r.to_batch_size]
    found += [f"{where}[{i}] proposes {r.num_speculative_tokens} tokens, more than spec.numSpeculativeTokens "
              f"({spec.num_speculative_tokens})" for i, r in enumerate(ranges)
              if r.num_speculative_tokens > spec.num_speculative_tokens]
    if not any(r.from_batch_size == 1 for r in ranges):
        found.append(f"one range of {where} must start at fromBatchSize 1, so every batch size has a count")
    ordered = sorted(ranges, key=lambda r: r.from_batch_size)
    if any(b.from_batch_size <= a.to_batch_size for a, b in zip(ordered, ordered[1:], strict=False)):
        found.append(f"the ranges of {where} must not overlap")
    return found
