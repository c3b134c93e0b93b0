"""Imports the plugin's modules by path, so these tests need neither vLLM nor the package installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parents[3] / "images" / "vllm" / "plugin" / "dflash_vllm"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"dflash_vllm_under_test.{name}", PACKAGE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module
