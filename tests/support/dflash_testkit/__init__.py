"""Test support for dflash-operator: the real control plane (`controlplane`), its PKI (`pki`), polling (`waiting`),
DFlashDeployment helpers (`dfd`) and the cache-Job stand-in (`cachejob`)."""

from pathlib import Path

# The repository this package was installed from (editable), for build scripts, CRDs and stage files.
REPO = Path(__file__).resolve().parents[3]
CLUSTER_TESTS = REPO / "tests" / "cluster"
