"""Typed fields the serving vLLM must have: the declared version (spec or image tag) before any download, the
version the image's own check found after it, and what the fields render to."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from dflash_operator.api import DFlashDeploymentSpec
from dflash_operator.render import speculative_config, vllm_args
from dflash_operator.vllm_features import declared_version, missing_features

PAIR = {"target": {"repo": "Qwen/Qwen3-Coder-Next"}, "draft": {"repo": "z-lab/Qwen3-Coder-Next-DFlash"}}


def spec(**fields: object) -> DFlashDeploymentSpec:
    return DFlashDeploymentSpec.model_validate({**PAIR, **fields})


@pytest.mark.parametrize("image, version", [
    ("ghcr.io/dflash-dev/vllm-dflash:v0.32.0-dflash.1", "0.32.0"),
    ("registry.example:5000/team/vllm:0.28.1", "0.28.1"),
    ("vllm-dflash:v0.30", "0.30"),
    ("registry.example:5000/team/vllm", None),            # the port is not a tag
    ("vllm-dflash:latest", None),
    ("vllm-dflash@sha256:" + "0" * 64, None),
    ("vllm-dflash:v0.29.0-dflash.1@sha256:" + "0" * 64, "0.29.0"),
])
def test_the_declared_version_is_the_image_tags_leading_version(image: str, version: str | None) -> None:
    assert declared_version(spec(image=image)) == version


def test_spec_vllm_version_speaks_for_an_image_whose_tag_does_not() -> None:
    assert declared_version(spec(image="vllm-dflash:latest", vllmVersion="v0.31.0")) == "0.31.0"
    with pytest.raises(ValidationError, match="vllmVersion"):
        spec(vllmVersion="latest")


def test_per_request_metrics_need_vllm_0_29() -> None:
    wants = spec(perRequestSpeculativeMetrics="Summary")
    assert missing_features(wants, "0.32.0", "x") == [] and missing_features(wants, "0.29.0", "x") == []
    (message,) = missing_features(wants, "0.28.1", "spec.image (vllm:0.28.1)")
    assert message.startswith("spec.perRequestSpeculativeMetrics needs vLLM 0.29+ (--per-request-spec-decode-metrics)")
    assert "spec.image (vllm:0.28.1) is vLLM 0.28.1" in message
    assert missing_features(wants, None, "x") == [], "an unknown version is judged later, by the image's check"
    assert missing_features(spec(), "0.22.1", "x") == []


def test_typed_fields_render_as_vllm_reads_them() -> None:
    from dflash_operator.api import DFlashDeployment

    plain = DFlashDeployment(metadata={"name": "a", "namespace": "n"}, spec=spec())
    assert "--per-request-spec-decode-metrics" not in vllm_args(plain)
    assert "draft_tensor_parallel_size" not in json.loads(speculative_config(plain.spec))
    tuned = DFlashDeployment(metadata={"name": "a", "namespace": "n"}, spec=spec(
        tensorParallelSize=4, draftTensorParallelSize=1, perRequestSpeculativeMetrics="Detailed"))
    args = vllm_args(tuned)
    assert args[args.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert json.loads(speculative_config(tuned.spec))["draft_tensor_parallel_size"] == 1
