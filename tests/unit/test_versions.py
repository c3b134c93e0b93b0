"""One release version: pyproject's. Every other place that names it must agree, or a release ships mismatched parts
(an operator image whose cache Job pins another dflash-cache, a chart whose appVersion tags another image)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from dflash_operator import __version__
from dflash_operator.render.cache import CacheConfig

REPO = Path(__file__).resolve().parents[2]


def _project(path: str) -> dict:
    return tomllib.loads((REPO / path).read_text())["project"]


def test_every_distribution_and_the_chart_carry_the_operators_version() -> None:
    version = _project("pyproject.toml")["version"]
    assert __version__ == version
    assert _project("dflash-cache/pyproject.toml")["version"] == version
    assert _project("images/vllm/plugin/pyproject.toml")["version"] == version
    chart = yaml.safe_load((REPO / "charts/dflash-operator/Chart.yaml").read_text())
    assert chart["version"] == version and chart["appVersion"] == version
    assert CacheConfig().image.endswith(f":{version}")


def test_dflash_cache_is_required_at_exactly_that_version() -> None:
    version = _project("pyproject.toml")["version"]
    for path in ("pyproject.toml", "images/vllm/plugin/pyproject.toml"):
        pins = [d for d in _project(path)["dependencies"] if d.startswith("dflash-cache")]
        pinned = rf"dflash-cache(\[\w+\])?=={re.escape(version)}"
        assert pins and all(re.fullmatch(pinned, p) for p in pins), (path, pins)
