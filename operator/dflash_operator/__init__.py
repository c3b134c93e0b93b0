"""dflash-operator: reconciles DFlashDeployment resources into vLLM pods serving a target model with a DFlash draft.

Packages by concern: api (the CRD's models), kube (the API server), render (pure object builders), reconcile (the
pass and its indexes), status (conditions), speculation (acceptance on live traffic), runtime (the process). The pair
rules and the cache Job's program are the separate distribution dflash-cache.
"""

from importlib.metadata import version

# The one version is pyproject's; tests/unit/test_versions.py holds the chart, dflash-cache and the plugin to it.
__version__ = version("dflash-operator")
