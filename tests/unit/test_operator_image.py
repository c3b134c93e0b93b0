"""What the operator image installs: the paths it copies exist, and the wheels it builds carry the packages."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from dflash_testkit.dockerimages import dockerfile_instructions

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "images" / "operator" / "Dockerfile"


def test_every_copied_path_exists() -> None:
    sources = []
    for op, args in dockerfile_instructions(DOCKERFILE):
        if op == "COPY" and "--from=" not in args:
            sources += [word for word in args.split()[:-1] if not word.startswith("--")]  # not --chown= and such
    assert sources, "the Dockerfile copies nothing from the repository"
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: no such path in the repository"


def test_image_runs_as_non_root_with_the_console_script() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^USER 65532", text, re.M)
    assert 'ENTRYPOINT ["dflash-operator"]' in text


def test_the_wheel_it_installs_carries_the_package_and_the_console_script(tmp_path: Path) -> None:
    # Build from a copy: the backend writes egg-info and build/ next to the sources.
    source, dist = tmp_path / "src", tmp_path / "dist"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", "bench-results"))
    # The same PEP 517 backend pip runs in the image's build stage, without pip's network-hungry isolation.
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                    "build_meta.build_wheel(sys.argv[1])", str(dist)], cwd=source, check=True,
                   capture_output=True)
    wheel = next(dist.glob("dflash_operator-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "dflash_operator/reconcile/handlers.py" in names and "dflash_operator/render/cache.py" in names
    requires = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "Requires-Dist: dflash-cache[fetch]==" in requires, "the operator no longer requires the cache library"
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "dflash-operator = dflash_operator.runtime.cli:main" in entry_points
