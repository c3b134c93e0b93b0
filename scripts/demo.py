"""The main job: the whole product on this machine, from `kubectl apply` to a speculative completion.

A real control plane and one real node (containerd + kubelet, no GPU), a hub mirror with tiny models made here, and
the operator configured as the chart configures it. Then, as a user: apply a DFlashDeployment, watch the cache Job
download and check the pair, watch the vLLM pod start and pass its speculative probe, read the acceptance rate from
status, and send a completion through `kubectl port-forward`. Everything stops and the machine is put back at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dflash_testkit import kindpath
from dflash_testkit.flow import Stack, complete_through_port_forward, conditions, dfd, real_stack, stopped_reason
from dflash_testkit.kindpath import kind_hub

NAME = "tiny"
TIMEOUT = 900


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


Kubectl = Callable[..., subprocess.CompletedProcess]


def where_logs_are(stack: Stack) -> str:
    return (f"logs: {stack.plane.workdir / 'logs'} (operator.log, kubelet.log, ...); "
            f"kubectl --kubeconfig {stack.plane.kubeconfig} logs deploy/{NAME}")


def wait_serving(kubectl: Kubectl, verdict: bool = True) -> str | None:
    """Progress lines until the DFlashDeployment is Ready (and, with `verdict`, SpeculationHealthy: the operator
    judged the acceptance window); returns a one-line reason if it stops short."""
    deadline, last = time.monotonic() + TIMEOUT, ""
    while time.monotonic() < deadline:
        obj = json.loads(kubectl("get", "dfd", NAME, "-o", "json").stdout)
        found = conditions(obj)
        # Ready comes from the kubelet's probes; the figures from the operator's next read of the pod's /metrics.
        if found.get("Ready", {}).get("status") == "True" and (not verdict or found.get(
                "SpeculationHealthy", {}).get("status") == "True"):
            return None
        reason = stopped_reason(obj)
        if reason:
            return reason
        ready = found.get("Ready", {})
        cache = (obj.get("status") or {}).get("cache") or {}
        line = (f"Ready={ready.get('status')} ({ready.get('reason')}): {ready.get('message')}; "
                f"cache {cache.get('phase')}")
        if line != last:
            say(line)
            last = line
        time.sleep(2)
    return f"not Ready after {TIMEOUT} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, PKI, models) at the end")
    parser.add_argument("--kind", action="store_true",
                        help="on the kind cluster scripts/kind/with-cluster.sh brings up (scripts/demo.sh --kind)")
    args = parser.parse_args()
    # demo.sh passes when it started, so the total counts the setup too.
    started = float(os.environ.get("DFLASH_DEMO_STARTED") or time.time())
    workdir = Path(tempfile.mkdtemp(prefix="dflash-demo-"))
    code = 1
    try:
        code = _run_kind(workdir) if args.kind else _run(workdir)
    finally:
        # The work folder holds the run's PKI (its CA key included): removed unless asked for or needed to debug.
        if args.keep or code != 0:
            say(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        say(f"done in {time.time() - started:.0f} s, setup included")
    return code


def _run(workdir: Path) -> int:
    with real_stack(workdir, progress=say) as stack:
        manifest = workdir / f"{NAME}.yaml"
        manifest.write_text(json.dumps(dfd(NAME, stack.vllm_image), indent=2))
        say(f"$ kubectl apply -f {manifest}")
        print(stack.kubectl("apply", "-f", str(manifest)).stdout, end="")
        applied = time.monotonic()
        reason = wait_serving(stack.kubectl)
        if reason:
            say(f"FAILED: {reason}")
            say(where_logs_are(stack))
            return 1
        serving = time.monotonic() - applied
        say(f"$ kubectl get dfd   (Ready {serving:.0f} s after apply)")
        print(stack.kubectl("get", "dfd", "-o", "wide").stdout, end="")
        print(stack.kubectl("get", "pvc,jobs,pods", "-o", "wide").stdout, end="")
        obj = json.loads(stack.kubectl("get", "dfd", NAME, "-o", "json").stdout)
        figures = obj["status"].get("speculation") or {}
        say(f"speculation: acceptance rate {figures.get('acceptanceRate')}, mean accepted length "
            f"{figures.get('meanAcceptedLength')} over the last {figures.get('windowSeconds')} s "
            "(from the pod's /metrics)")
        say(f"$ kubectl port-forward svc/{NAME} and POST /v1/completions")
        try:
            answer = complete_through_port_forward(stack.kubectl_argv(), "default", NAME, max_tokens=12)
        except OSError as error:
            say(f"FAILED: no completion through port-forward: {error}")
            say(where_logs_are(stack))
            return 1
        say(f"completion: {answer['choices'][0]['text']!r} ({answer['usage']['completion_tokens']} tokens)")
        say("the tiny target and draft have random weights made here: they answer nonsense by design. What the demo "
            "shows is the path; the acceptance rate is the share of draft tokens the target accepted (this pair is "
            "built so the draft proposes what the target would say).")
        say(f"timings: {json.dumps(stack.timings)}, apply -> Ready {serving:.0f} s")
        say("stopping everything and putting the machine back ...")
    return 0


def _run_kind(workdir: Path) -> int:
    """The same path on kind: the cluster, the operator (helm) and the images (docker build, kind load) are up already
    (scripts/kind/with-cluster.sh); the hub mirror starts where the chart's hub.endpoint points."""
    with kind_hub(workdir / "hub", progress=say):
        # No GPU here: the worker advertises one the way Kubernetes documents extended resources (a node status
        # patch; a device plugin would do it on a GPU node), and vLLM runs on its CPU.
        say(f"$ kubectl patch node {kindpath.WORKER} --subresource=status (capacity nvidia.com/gpu: 1)")
        kindpath.set_fake_gpus(1)
        manifest = workdir / f"{NAME}.yaml"
        manifest.write_text(json.dumps(dfd(NAME, kindpath.vllm_image()), indent=2))
        say(f"$ kubectl apply -f {manifest}   (spec.image {kindpath.vllm_image()}, built by docker build, kind load)")
        print(kindpath.kubectl("apply", "-f", str(manifest)).stdout, end="")
        applied = time.monotonic()
        # Ready: the vLLM pod passed its speculative probe. The chart's default window (200 draft tokens) is more
        # than the probes' completions make, so SpeculationHealthy waits for real traffic: not awaited here.
        reason = wait_serving(kindpath.kubectl, verdict=False)
        logs = f"logs: kubectl --kubeconfig {kindpath.settings()['KUBECONFIG']} logs deploy/{NAME}"
        if reason:
            say(f"FAILED: {reason}")
            say(logs)
            print(kindpath.kubectl("get", "pvc,jobs,pods", "-o", "wide", check=False).stdout, end="")
            return 1
        serving = time.monotonic() - applied
        say(f"$ kubectl get dfd   (Ready {serving:.0f} s after apply)")
        print(kindpath.kubectl("get", "dfd", "-o", "wide").stdout, end="")
        print(kindpath.kubectl("get", "pvc,jobs,pods", "-o", "wide").stdout, end="")
        say(f"$ kubectl port-forward svc/{NAME} and POST /v1/completions")
        try:
            answer = complete_through_port_forward(kindpath.kubectl_argv(), "default", NAME, max_tokens=12)
        except OSError as error:
            say(f"FAILED: no completion through port-forward: {error}")
            say(logs)
            return 1
        say(f"completion: {answer['choices'][0]['text']!r} ({answer['usage']['completion_tokens']} tokens)")
        say(f"$ kubectl delete dfd {NAME}; helm uninstall dflash -n dflash-system")
        kindpath.kubectl("delete", "dfd", NAME, "--wait=true", timeout=180)
        print(kindpath.helm("uninstall", "dflash", "-n", "dflash-system", "--wait").stdout, end="")
        say(f"apply -> Ready {serving:.0f} s; the cluster is deleted and the host put back next")
    return 0


if __name__ == "__main__":
    sys.exit(main())
