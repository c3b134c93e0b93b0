"""The plugin's decision (patch or no-op) from vLLM's source and version, without vLLM."""

from __future__ import annotations

import pytest
from _load import load

plugin = load("plugin")

BEFORE_FIX = """
class Qwen3NextModel(nn.Module, EagleModelMixin):
    pass

class Qwen3NextForCausalLM(nn.Module, HasInnerState, SupportsLoRA, SupportsPP, QwenNextMixtureOfExperts, IsHybrid):
    pass
"""
AFTER_FIX = BEFORE_FIX.replace("IsHybrid):", "IsHybrid,\n    SupportsEagle3,\n):")
QUALIFIED = BEFORE_FIX.replace("IsHybrid):", "IsHybrid, interfaces.SupportsEagle3):")


def test_class_declares_reads_the_bases():
    assert plugin.class_declares(BEFORE_FIX) is False
    assert plugin.class_declares(AFTER_FIX) is True
    assert plugin.class_declares(QUALIFIED) is True
    assert plugin.class_declares("class Other(SupportsEagle3): pass") is None


@pytest.mark.parametrize("version, source, patch", [
    ("0.23.0", BEFORE_FIX, True),
    ("0.32.0", AFTER_FIX, False),
    # The source wins over the version, both ways (a backport, or a fork that dropped it).
    ("0.23.0+cpu", AFTER_FIX, False),
    ("0.25.0", BEFORE_FIX, True),
    # Source unreadable or class gone: the version decides.
    ("0.20.1", None, True),
    ("0.24.0", None, False),
    ("1.0.0rc1", "class Unrelated: pass", False),
])
def test_decide(version, source, patch):
    decision = plugin.decide(version, source)
    assert decision.patch is patch
    assert f"vLLM {version} " in decision.reason
    assert decision.reason.endswith("registered dflash_vllm.qwen3_next:Qwen3NextForCausalLM" if patch
                                    else "dflash-vllm is a no-op")


def test_an_unknowable_case_is_a_no_op_not_a_guess():
    decision = plugin.decide("main", None)
    assert decision.patch is False and "neither its source nor its version" in decision.reason
