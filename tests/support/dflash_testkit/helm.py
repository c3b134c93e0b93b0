"""The real Helm binary (built by setup) against a test control plane, with its caches inside the plane's workdir."""

from __future__ import annotations

import os
import subprocess

from dflash_testkit import REPO
from dflash_testkit.controlplane import ControlPlane

CHART = REPO / "charts" / "dflash-operator"


def helm(plane: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([plane.binary("helm"), f"--kubeconfig={plane.kubeconfig}", *args],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HELM_CACHE_HOME": str(plane.workdir / "helm-cache"),
                                 "HELM_CONFIG_HOME": str(plane.workdir / "helm-config"),
                                 "HELM_DATA_HOME": str(plane.workdir / "helm-data")})
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result
