"""The seed's crash and the plugin's cure on the other vLLM lines the fix claims, at the load stage.

run.sh runs this module once per line in LINES (run.sh), each under its own venv with DFLASH_VLLM_LINE=<version>.
Lines before 0.24 lack SupportsEagle3 on Qwen3Next: without the plugin the runner raises the EAGLE-3 error; with it
the runner sets up the draft's aux layers and goes on to warm up. From 0.24 on the plugin logs that it is a no-op
and the bare engine gets as far. Generation is proven on 0.32 (test_v032_probe.py); on these CPU builds the load
stage is the honest proof (FACTS.md: 0.23's CPU backend cannot run a DFlash warm-up).
"""

from __future__ import annotations

import os

import pytest
import vllm_proc
from vllm_proc import AUX_LAYERS, CRASH, WARMUP

LINE = os.environ.get("DFLASH_VLLM_LINE", "")
VLLM_SERIES = ".".join(LINE.split(".")[:2]) or "unset: run this module through run.sh"
pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_series")]
FIXED = tuple(int(part) for part in LINE.split(".")[:2]) >= (0, 24) if LINE else False
PATCHED = f"dflash-vllm: vLLM {LINE} lacks SupportsEagle3 on Qwen3NextForCausalLM; registered"
NOOP = f"dflash-vllm: vLLM {LINE} already declares SupportsEagle3 on Qwen3NextForCausalLM; dflash-vllm is a no-op"


@pytest.fixture(scope="module")
def engines(tiny, plugin_dir, tmp_path_factory):
    results = vllm_proc.start_to_verdict(tiny["target-collapsed"], tiny["draft-matching"], plugin_dir,
                                         tmp_path_factory.mktemp(f"engines-{LINE}"), [CRASH, AUX_LAYERS])
    yield results
    for proc, _ in results.values():
        proc.stop()


def test_without_plugin(engines):
    proc, seen = engines["bare"]
    assert "dflash-vllm:" not in proc.text()  # the plugin's log prefix: it was not loaded
    if FIXED:
        assert seen == AUX_LAYERS, f"vLLM {LINE} should pass the EAGLE-3 check itself; log tail:\n{proc.tail()}"
    else:
        assert seen == CRASH, f"expected the EAGLE-3 interface error on {LINE}; log tail:\n{proc.tail()}"


def test_with_plugin(engines):
    proc, seen = engines["plugin"]
    assert seen == AUX_LAYERS, f"expected the runner to configure aux layers; log tail:\n{proc.tail()}"
    text = proc.text()
    assert CRASH not in text
    assert (NOOP if FIXED else PATCHED) in text, f"the plugin did not log its decision; log tail:\n{proc.tail()}"
    assert proc.wait_for([WARMUP], timeout=180), proc.tail()
