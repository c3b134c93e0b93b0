"""vLLM general plugin: make Qwen3NextForCausalLM satisfy SupportsEagle3 where the installed vLLM lacks it.

vLLM runs `register()` in every process it starts (API server, EngineCore, workers, the registry's inspection
subprocess), so it must be cheap, idempotent and must not import model code. It therefore reads the upstream
class's bases from the source file with `ast` instead of importing vllm.model_executor.models.qwen3_next (which
pulls in torch kernels and the whole model stack) just to ask `issubclass`. The version only decides when the
source cannot be read (a zipped or stripped install) or no longer defines the class.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import re
from dataclasses import dataclass
from pathlib import Path

ARCH = "Qwen3NextForCausalLM"
INTERFACE = "SupportsEagle3"
PATCHED_CLASS = "dflash_vllm.qwen3_next:Qwen3NextForCausalLM"
# First vLLM release whose Qwen3NextForCausalLM declares SupportsEagle3 itself.
FIXED_IN = (0, 24)

# A child of vLLM's "vllm" logger, so the line goes through vLLM's own handler and format.
logger = logging.getLogger("vllm.dflash_vllm")

_registered = False


@dataclass(frozen=True)
class Decision:
    patch: bool
    reason: str


def class_declares(source: str, class_name: str = ARCH, interface: str = INTERFACE) -> bool | None:
    """Whether `class_name` in `source` lists `interface` among its bases; None when the class is absent."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return any(_base_name(base) == interface for base in node.bases)
    return None


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Subscript):  # Generic[...]-style bases
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # interfaces.SupportsEagle3
        return node.attr
    return None


def version_tuple(version: str) -> tuple[int, int] | None:
    """(major, minor) of a vLLM version string such as '0.23.0', '0.23.1rc1.dev5+cpu'; None if unparseable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def decide(version: str, source: str | None) -> Decision:
    declared = class_declares(source) if source is not None else None
    if declared is True:
        return Decision(False, f"vLLM {version} already declares {INTERFACE} on {ARCH}; dflash-vllm is a no-op")
    if declared is False:
        return Decision(True, f"vLLM {version} lacks {INTERFACE} on {ARCH}; registered {PATCHED_CLASS}")
    parsed = version_tuple(version)
    if parsed is None:
        # Registering a subclass of a class that may not exist would break Qwen3Next; doing nothing breaks nothing.
        return Decision(False, f"vLLM {version}: neither its source nor its version tells whether {ARCH} has "
                               f"{INTERFACE}; dflash-vllm is a no-op")
    if parsed >= FIXED_IN:
        return Decision(False, f"vLLM {version} (>= 0.24, source not inspected) declares {INTERFACE} on {ARCH}; "
                               "dflash-vllm is a no-op")
    return Decision(True, f"vLLM {version} (< 0.24, source not inspected) lacks {INTERFACE} on {ARCH}; "
                          f"registered {PATCHED_CLASS}")


def _upstream_source() -> str | None:
    # find_spec("vllm") does not import anything new: vLLM is already imported when it calls its plugins.
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), "model_executor", "models", "qwen3_next.py")
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def register() -> None:
    """Entry point of the `vllm.general_plugins` group."""
    global _registered
    if _registered:
        return
    _registered = True

    import vllm

    decision = decide(vllm.__version__, _upstream_source())
    if decision.patch:
        from vllm import ModelRegistry

        # The string form keeps the registry lazy: the model module is imported only when Qwen3Next is served.
        ModelRegistry.register_model(ARCH, PATCHED_CLASS)
    logger.info("dflash-vllm: %s", decision.reason)
