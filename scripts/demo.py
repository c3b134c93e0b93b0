"""The main job on its embedded default: a real control plane, the operator, and examples/qwen3-coder-next.yaml.

Shows what a user sees: the CRD admitted, the paired cache PVC and download Job created first, no GPU pod before the
pair is cached and checked, and the status conditions explaining why. (The download itself needs a hub and a
container runtime, neither of which exists on this machine; the test tiers cover it against a local hub.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dflash_testkit.controlplane import (
    ControlPlane,
    build_binaries,
    default_crds,
    free_port,
    http_ok,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "qwen3-coder-next.yaml"


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="dflash-demo-"))
    with ControlPlane(workdir=workdir, bin_dir=build_binaries(), crd_files=default_crds()) as plane:
        print(f"control plane up in {plane.start_seconds:.1f} s at {plane.server} (kubeconfig {plane.kubeconfig})")
        print(plane.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/gpu.count").stdout)
        port = free_port()
        log = (workdir / "logs" / "operator.log").open("wb")
        operator = subprocess.Popen(
            [sys.executable, "-m", "dflash_operator", "run", "--liveness", f"http://127.0.0.1:{port}/healthz"],
            env={**os.environ, "KUBECONFIG": str(plane.kubeconfig), "DFLASH_RESYNC_SECONDS": "2",
                 "DFLASH_METRICS_ALLOWED_NETWORKS": "127.0.0.0/8"},
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not http_ok(f"http://127.0.0.1:{port}/healthz"):
                if operator.poll() is not None or time.monotonic() > deadline:
                    print((workdir / "logs" / "operator.log").read_text()[-3000:], file=sys.stderr)
                    return 1
                time.sleep(0.5)
            print(f"$ kubectl apply -f {EXAMPLE.relative_to(REPO)}")
            print(plane.kubectl("apply", "-f", str(EXAMPLE)).stdout)
            time.sleep(6)
            for args in (["get", "dfd", "-o", "wide"], ["get", "pvc,jobs,deployments,pods"],
                         ["get", "dfd", "coder", "-o",
                          "jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{'\\n'}{end}"]):
                print(f"$ kubectl {' '.join(args)}")
                print(plane.kubectl(*args).stdout)
        finally:
            operator.terminate()
            operator.wait(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
