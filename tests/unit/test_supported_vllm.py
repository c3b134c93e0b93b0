"""images/vllm/SUPPORTED_VLLM (the tags the vLLM image builds) and docs/gpu-matrix.md (where each release's fix was
proven) say the same thing: a tag is listed exactly when the matrix says it was proven somewhere, and every release
the matrix says was proven on a GPU has its committed result, which agrees with the row."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = REPO / "images" / "vllm" / "SUPPORTED_VLLM"
MATRIX = REPO / "docs" / "gpu-matrix.md"
RESULTS = REPO / "bench" / "results"
PLACES = {"GPU", "CPU"}


def supported() -> list[str]:
    return [line.strip() for line in SUPPORTED.read_text().splitlines() if line.strip() and not line.startswith("#")]


def matrix_rows() -> dict[str, dict[str, str]]:
    """The table under '## Matrix': release -> {column header: cell}."""
    section = MATRIX.read_text().split("\n## Matrix\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        row = dict(zip(header, cells, strict=True))
        assert row["release"] not in rows, f"{row['release']} twice in the matrix"
        rows[row["release"]] = row
    return rows


def proven(row: dict[str, str]) -> set[str]:
    places = {place.strip() for place in row["proven"].split(",") if place.strip()}
    assert places <= PLACES, row["proven"]
    return places


def test_supported_tags_are_exactly_the_releases_the_matrix_proves() -> None:
    tags = supported()
    assert len(tags) == len(set(tags)), "a tag listed twice"
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", tag) for tag in tags), tags
    rows = matrix_rows()
    assert set(tags) == {release for release, row in rows.items() if proven(row)}


def test_every_gpu_row_has_its_committed_result_and_agrees_with_it() -> None:
    for release, row in matrix_rows().items():
        if "GPU" not in proven(row):
            continue
        files = sorted(RESULTS.glob(f"gpu-lane-matrix-{release}-*.json"))
        assert files, f"{release} is proven on a GPU in the matrix but has no bench/results/gpu-lane-matrix file"
        result = json.loads(files[-1].read_text())
        assert result["release"] == result["matrix"]["release"] == release
        assert result["fix_claims_hold"] is True, f"{files[-1].name}: a claim of the fix failed"
        assert row["plugin"] == ("patches" if result["matrix"]["plugin_patches"] else "no-op"), release
        without = row["without the plugin (all-accept pair)"]
        assert without.startswith("crash: seed error") == result["matrix"]["plugin_patches"], release
        assert row["KV-wide draft (KV rule)"].startswith("crash") == result["matrix"]["kv_wide"].startswith("crash")


def test_the_matrix_rows_follow_the_plugins_own_version_bounds() -> None:
    """The plugin patches below FIXED_IN and the KV rule applies below KV_GEOMETRY_FIXED_IN; the matrix rows (measured)
    say the same, so a bound moved in code without a measurement fails here."""
    plugin = (REPO / "images" / "vllm" / "plugin" / "dflash_vllm" / "plugin.py").read_text()
    bound = re.search(r"^FIXED_IN = \((\d+), (\d+)\)", plugin, re.M)
    assert bound, "dflash_vllm/plugin.py no longer spells FIXED_IN = (major, minor)"
    fixed_in = tuple(int(x) for x in bound.groups())
    from dflash_cache.pairing import KV_GEOMETRY_FIXED_IN as kv_fixed_in
    for release, row in matrix_rows().items():
        if "GPU" not in proven(row):
            continue
        version = tuple(int(x) for x in release.split(".")[:2])
        assert (row["plugin"] == "patches") == (version < fixed_in), release
        assert row["KV-wide draft (KV rule)"].startswith("crash") == (version < kv_fixed_in), release
