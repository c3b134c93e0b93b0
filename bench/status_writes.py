"""Benchmark: status writes per hour of one DFlashDeployment under steady traffic, on the real node with real vLLM.

The whole product as the node tier runs it (real control plane, containerd + kubelet, the vLLM CPU image, the
operator at the chart's default resync of 30 s). One DFlashDeployment with the always-accepted tiny draft serves a
steady stream of completions through `kubectl port-forward`; for `--minutes` the operator's own counters are read:
status writes (dflash_operator_status_writes_total) against reconcile passes, the peer in the same run: a status
that carried raw counts (as status.speculation did before the window) is written on every measured pass.

    .venv/bin/python bench/status_writes.py [--minutes 10] [--out bench-results/status_writes.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from dflash_testkit.controlplane import free_port
from dflash_testkit.flow import TARGET, conditions, dfd, real_stack
from dflash_testkit.hub import DIRECT

NAME = "steady"


def operator_counters(port: int) -> dict[str, float]:
    with DIRECT.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dflash_operator_status_writes_total":
                found["status_writes"] = sample.value
            elif sample.name == "dflash_operator_reconciles_total":
                found["passes"] = found.get("passes", 0.0) + sample.value
    return found


def traffic(stack, stop: threading.Event, sent: list[int], period: float) -> None:
    """One 16-token completion every `period` seconds through one port-forward to the Service."""
    port = free_port()
    forward = subprocess.Popen([stack.plane.binary("kubectl"), f"--kubeconfig={stack.plane.kubeconfig}",
                                "port-forward", f"svc/{NAME}", f"{port}:8000", "--address=127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    body = json.dumps({"model": TARGET, "prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0,
                       "ignore_eos": True}).encode()
    try:
        while not stop.wait(period):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"}, method="POST")
            try:
                with DIRECT.open(request, timeout=60) as answer:
                    answer.read()
                sent[0] += 1
            except OSError:
                continue
    finally:
        forward.terminate()
        forward.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--period", type=float, default=2.0, help="seconds between completions")
    parser.add_argument("--out", default="bench-results/status_writes.json")
    args = parser.parse_args()
    with real_stack(Path(tempfile.mkdtemp(prefix="dflash-bench-")), resync_seconds=30) as stack:
        stack.kubectl("apply", "-f", "-", input=json.dumps(dfd(NAME, stack.vllm_image)))
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            found = conditions(json.loads(stack.kubectl("get", "dfd", NAME, "-o", "json").stdout))
            if found.get("Ready", {}).get("status") == "True":
                break
            time.sleep(2)
        else:
            raise SystemExit("the DFlashDeployment did not become Ready")
        stop, sent = threading.Event(), [0]
        sender = threading.Thread(target=traffic, args=(stack, stop, sent, args.period), daemon=True)
        sender.start()
        time.sleep(90)  # the window fills with traffic before the measurement starts
        before, started, sent_before = operator_counters(stack.operator_metrics_port), time.monotonic(), sent[0]
        figures = set()
        while time.monotonic() - started < args.minutes * 60:
            obj = json.loads(stack.kubectl("get", "dfd", NAME, "-o", "json").stdout)
            figures.add(json.dumps(obj["status"].get("speculation"), sort_keys=True))
            time.sleep(5)
        after, elapsed = operator_counters(stack.operator_metrics_port), time.monotonic() - started
        stop.set()
        sender.join(30)
    hours = elapsed / 3600
    writes, passes = after["status_writes"] - before["status_writes"], after["passes"] - before["passes"]
    result = {
        "minutes": round(elapsed / 60, 1), "resync_seconds": 30, "completions": sent[0] - sent_before,
        "completions_per_second": round((sent[0] - sent_before) / elapsed, 2),
        "status_writes": writes, "reconcile_passes": passes,
        "status_writes_per_hour": round(writes / hours, 1),
        "peer_writes_per_hour_raw_counts": round(passes / hours, 1),
        "distinct_speculation_status_seen": len(figures),
        "last_speculation_status": json.loads(sorted(figures)[-1]) if figures else None,
    }
    print(f"{'measure':42} {'value':>10}")
    for key in ("minutes", "completions_per_second", "reconcile_passes", "status_writes", "status_writes_per_hour",
                "peer_writes_per_hour_raw_counts", "distinct_speculation_status_seen"):
        print(f"{key:42} {result[key]:>10}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
