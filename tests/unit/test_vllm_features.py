"""Typed fields the serving vLLM must have: the declared version (spec or image tag) before any download, the
version the image's own check found after it, and what the fields render to."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from dflash_operator.api import DFlashDeployment, DFlashDeploymentSpec
from dflash_operator.reconcile.validation import spec_problems
from dflash_operator.render.serving import speculative_config, vllm_args
from dflash_operator.speculation.vllm_features import declared_version, missing_features

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



SCHEDULE = [{"fromBatchSize": 1, "toBatchSize": 4, "numSpeculativeTokens": 8},
            {"fromBatchSize": 5, "toBatchSize": 32, "numSpeculativeTokens": 2},
            {"fromBatchSize": 33, "toBatchSize": 1024, "numSpeculativeTokens": 0}]


def test_a_batch_schedule_needs_vllm_024_and_is_named_by_its_full_path() -> None:
    scheduled = spec(speculation={"tokensByBatchSize": SCHEDULE})
    [message] = missing_features(scheduled, "0.23.0", "spec.vllmVersion")
    assert message.startswith("spec.speculation.tokensByBatchSize needs vLLM 0.24+ "
                              "(num_speculative_tokens_per_batch_size)")
    assert missing_features(scheduled, "0.24.0", "spec.vllmVersion") == []


def test_a_batch_schedule_renders_into_the_speculative_config_as_vllm_reads_it() -> None:
    config = json.loads(speculative_config(spec(speculation={"tokensByBatchSize": SCHEDULE})))
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 4, 8], [5, 32, 2], [33, 1024, 0]]
    assert "num_speculative_tokens_per_batch_size" not in json.loads(speculative_config(spec()))


@pytest.mark.parametrize("schedule, problem", [
    ([{"fromBatchSize": 2, "toBatchSize": 8, "numSpeculativeTokens": 2}], "must start at fromBatchSize 1"),
    ([{"fromBatchSize": 1, "toBatchSize": 8, "numSpeculativeTokens": 2},
      {"fromBatchSize": 4, "toBatchSize": 9, "numSpeculativeTokens": 1}], "must not overlap"),
    ([{"fromBatchSize": 1, "toBatchSize": 8, "numSpeculativeTokens": 9}], "more than spec.numSpeculativeTokens (8)"),
    ([{"fromBatchSize": 1, "toBatchSize": 1, "numSpeculativeTokens": 2},
      {"fromBatchSize": 9, "toBatchSize": 3, "numSpeculativeTokens": 1}], "fromBatchSize 9 exceeds toBatchSize 3"),
])
def test_a_schedule_vllm_would_refuse_is_a_spec_problem_without_the_api_server(schedule: list, problem: str) -> None:
    dfd = DFlashDeployment.model_validate({"metadata": {"name": "x", "namespace": "n"},
                                           "spec": {**PAIR, "speculation": {"tokensByBatchSize": schedule}}})
    problems = spec_problems(dfd)
    assert [p.reason for p in problems] == ["InvalidBatchSchedule"] and problem in problems[0].message
