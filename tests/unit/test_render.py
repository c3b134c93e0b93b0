"""Renderers against golden files, and the checks that keep a bad spec from being rendered at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from dflash_operator.api import DFlashDeployment
from dflash_operator.render import (
    InvalidSpec, RenderConfig, desired_objects, render_deployment, reserved_flag_collisions, speculative_config,
)

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name.removesuffix(".input.yaml") for p in GOLDEN.glob("*.input.yaml"))


def load(case: str) -> DFlashDeployment:
    return DFlashDeployment.model_validate(yaml.safe_load((GOLDEN / f"{case}.input.yaml").read_text()))


@pytest.mark.parametrize("case", CASES)
def test_rendered_objects_match_golden_file(case: str) -> None:
    rendered = yaml.safe_dump_all(desired_objects(load(case), RenderConfig()), sort_keys=False, width=120)
    golden = GOLDEN / f"{case}.output.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file for {case}; run with UPDATE_GOLDEN=1 and review it"
    assert rendered == golden.read_text(), f"rendering of {case} changed; if intended, UPDATE_GOLDEN=1 and review"


def test_golden_cases_exist() -> None:
    assert {"minimal", "full"} <= set(CASES)


def test_rendering_is_deterministic() -> None:
    dfd = load("full")
    assert desired_objects(dfd, RenderConfig()) == desired_objects(load("full"), RenderConfig())


def test_gpu_limit_and_request_equal_tensor_parallel_size() -> None:
    container = render_deployment(load("full"), RenderConfig())["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["amd.com/gpu"] == "4"
    assert container["resources"]["requests"]["amd.com/gpu"] == "4"
    assert container["resources"]["limits"]["memory"] == "256Gi"


def test_speculative_config_is_compact_json_with_method_dflash() -> None:
    assert speculative_config(load("minimal").spec) == (
        '{"method":"dflash","model":"z-lab/Qwen3-Coder-Next-DFlash","num_speculative_tokens":8,"revision":"main"}'
    )


@pytest.mark.parametrize("args, colliding", [
    (["--port", "9000"], ["--port"]),
    (["--port=9000"], ["--port=9000"]),
    (["--tensor_parallel_size=2"], ["--tensor_parallel_size=2"]),
    (["-tp", "2"], ["-tp"]),
    (["--speculative-config={}"], ["--speculative-config={}"]),
    (["--model-impl", "vllm", "--max-num-seqs=8"], []),
])
def test_reserved_flag_collisions(args: list[str], colliding: list[str]) -> None:
    assert reserved_flag_collisions(args) == colliding


def _with(case: str, **spec: object) -> DFlashDeployment:
    body = yaml.safe_load((GOLDEN / f"{case}.input.yaml").read_text())
    body["spec"].update(spec)
    return DFlashDeployment.model_validate(body)


@pytest.mark.parametrize("spec, reason", [
    ({"extraArgs": ["-tp", "8"]}, "ExtraArgsCollide"),
    ({"resources": {"limits": {"amd.com/gpu": "1"}}}, "GpuInResources"),
    ({"env": [{"name": "HF_HOME", "value": "/tmp"}]}, "EnvCollides"),
])
def test_unrenderable_specs_raise_with_a_reason(spec: dict, reason: str) -> None:
    with pytest.raises(InvalidSpec) as error:
        desired_objects(_with("full", **spec), RenderConfig())
    assert error.value.reason == reason


def test_hub_token_is_passed_by_reference_only() -> None:
    rendered = yaml.safe_dump_all(desired_objects(load("full"), RenderConfig()))
    env = render_deployment(load("full"), RenderConfig())["spec"]["template"]["spec"]["containers"][0]["env"]
    token = next(e for e in env if e["name"] == "HF_TOKEN")
    assert token["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert "value" not in token and "hf-token" in rendered
