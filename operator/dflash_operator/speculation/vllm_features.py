"""Which typed spec fields the serving vLLM supports, by version. Pure.

The version is known twice: declared before anything is downloaded (spec.vllmVersion, else the image tag's leading
vX.Y.Z, as the images built from images/vllm are tagged), and found by the cache Job's pair check, which asks the
image's vLLM itself. A field the version lacks stalls the DFlashDeployment with the field and the version named,
instead of a vLLM that exits at start-up on an unknown flag, on a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel

from dflash_cache.pairing import parse_version
from dflash_operator.api import DFlashDeploymentSpec

NEEDS_NEWER_VLLM = "NeedsNewerVLLM"


@dataclass(frozen=True)
class Feature:
    attribute: str  # the spec model's attribute, dotted for a nested one (speculation.tokens_by_batch_size)
    since: tuple[int, int]  # the first vLLM (major, minor) that has it
    what: str  # what vLLM calls it

    @property
    def field(self) -> str:
        """The field as the user writes it (the models' camelCase aliases)."""
        model: type[BaseModel] = DFlashDeploymentSpec
        names = []
        for part in self.attribute.split("."):
            info = model.model_fields[part]
            names.append(info.alias or part)
            if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
                model = info.annotation
        return ".".join(names)

    def used(self, spec: DFlashDeploymentSpec) -> bool:
        value: object = spec
        for part in self.attribute.split("."):
            value = getattr(value, part)
        return value is not None


# vLLM 0.29 added --per-request-spec-decode-metrics (vllm#48915; not in 0.28.0); 0.24 the speculative config's
# num_speculative_tokens_per_batch_size (vllm/v1/spec_decode/dynamic; not in 0.23.0). draftTensorParallelSize is in
# every release images/vllm supports (0.22+), so it has no entry.
FEATURES = (
    Feature("per_request_speculative_metrics", (0, 29), "--per-request-spec-decode-metrics"),
    Feature("speculation.tokens_by_batch_size", (0, 24), "num_speculative_tokens_per_batch_size"),
)
_TAG_VERSION = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)(?:[-+._].*)?$")


def declared_version(spec: DFlashDeploymentSpec) -> str | None:
    """spec.vllmVersion, else the leading version of the image tag (ghcr.io/x/vllm-dflash:v0.32.0-dflash.1 ->
    0.32.0); None when neither says (a digest, a tag such as `latest`)."""
    if spec.vllm_version:
        return spec.vllm_version.removeprefix("v")
    name = spec.image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    match = _TAG_VERSION.match(last.rsplit(":", 1)[1])
    return match.group(1) if match else None


def missing_features(spec: DFlashDeploymentSpec, version: str | None, source: str) -> list[str]:
    """A message for each field the spec uses that `version` lacks; [] when the version is unknown. `source` says
    where the version came from, for the message."""
    parsed = parse_version(version)
    if parsed is None:
        return []
    return [f"spec.{f.field} needs vLLM {f.since[0]}.{f.since[1]}+ ({f.what}), but {source} is vLLM {version}; "
            f"use an image of a newer vLLM or remove the field"
            for f in FEATURES if f.used(spec) and parsed < f.since]
