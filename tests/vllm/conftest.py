"""Fixtures for the vLLM tier. Stdlib-only at import time: tests/vllm/unit runs under a plain Python too.

The tier tests run under the python of a venv built by build_venv.sh (see run.sh). Each tier module sets
VLLM_SERIES and uses the `vllm_series` fixture, which fails it (never skips it) under any other interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # tiny_models, vllm_proc


@pytest.fixture(scope="module")
def vllm_series(request: pytest.FixtureRequest) -> str:
    """vLLM's version; fails unless the interpreter has the module's VLLM_SERIES (e.g. '0.23')."""
    series = request.module.VLLM_SERIES
    try:
        import vllm
    except ImportError as exc:
        pytest.fail(f"vLLM {series} is not importable from {sys.executable} ({exc}); "
                    f"run tests/vllm/run.sh, which builds the venv with tests/vllm/build_venv.sh", pytrace=False)
    if not vllm.__version__.startswith(series + "."):
        pytest.fail(f"this module needs vLLM {series}.x, {sys.executable} has {vllm.__version__}", pytrace=False)
    return vllm.__version__


@pytest.fixture(scope="session")
def plugin_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin as a wheel: run.sh's (DFLASH_VLLM_WHEEL), else one built here."""
    if os.environ.get("DFLASH_VLLM_WHEEL"):
        return Path(os.environ["DFLASH_VLLM_WHEEL"])
    import vllm_proc

    return vllm_proc.build_wheel(tmp_path_factory.mktemp("plugin-build"))


@pytest.fixture(scope="session")
def plugin_dir(plugin_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed with pip --target (see vllm_proc.install_wheel)."""
    import vllm_proc

    return vllm_proc.install_wheel(plugin_wheel, tmp_path_factory.mktemp("plugin-site"))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """target, target-collapsed, draft-matching (for the collapsed target), draft-random, draft-matching-speculators.

    run.sh makes them once for all sessions (DFLASH_TINY_MODELS); a session run by hand makes its own."""
    shared = os.environ.get("DFLASH_TINY_MODELS")
    if shared:
        return {path.name: path for path in Path(shared).iterdir() if (path / "config.json").is_file()}
    import tiny_models

    return tiny_models.make_all(tmp_path_factory.mktemp("tiny-models"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attaches the log tails of the vLLM processes a failed test used to its report."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    procs = {name: server.proc for name, server in funcargs.get("servers", {}).items()}
    procs |= {name: proc for name, (proc, _) in funcargs.get("engines", {}).items()}
    for name, proc in procs.items():
        report.sections.append((f"vLLM log tail: {name} ({proc.log})", proc.tail()))
