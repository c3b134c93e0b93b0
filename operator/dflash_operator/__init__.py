"""dflash-operator: reconciles DFlashDeployment resources into vLLM pods serving a target model with a DFlash draft.

Packages by concern: api (the CRD's models), kube (the API server), render (pure object builders), reconcile (the
pass and its indexes), status (conditions), speculation (acceptance on live traffic), runtime (the process). The pair
rules and the cache Job's program are the separate distribution dflash-cache.
"""

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def _version() -> str:
    """The one version is pyproject's (tests/unit/test_versions.py holds the chart, dflash-cache and the plugin to
    it): from the installed distribution, or from the checkout when the package is imported from source (the GPU
    lane puts operator/ on PYTHONPATH)."""
    try:
        return version("dflash-operator")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])


__version__ = _version()
