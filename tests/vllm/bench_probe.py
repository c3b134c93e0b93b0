"""Benchmark (not a test): what the speculation probe costs next to cheaper checks, against the tiny 0.32 server.

Starts one OpenAI server (collapsed tiny Qwen3Next + the matching DFlash draft) and times, RUNS times each and
interleaved so load drift hits all alike:
  exec-probe       the installed `dflash-probe` as an exec probe runs it (new interpreter, /v1/models, /metrics
                   before and after, one 8-token completion)
  probe-in-process the same probe logic without interpreter start-up
  completion-only  the same 8-token completion alone: the probe minus its /v1/models and /metrics reads
  exec-health      a new interpreter doing GET /health: what an exec probe costs without checking speculation
  health           GET /health in-process: the HTTP round trip floor
Prints a table and writes JSON. Run with the 0.32 venv's python: python tests/vllm/bench_probe.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiny_models  # noqa: E402
import vllm_proc  # noqa: E402


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1e3,
            "p90_ms": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] * 1e3,
            "min_ms": ordered[0] * 1e3, "max_ms": ordered[-1] * 1e3, "runs": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", type=Path, help="result file (default: in the work dir, printed)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="dflash-bench-probe."))
    models = tiny_models.make_all(work / "models")
    plugin = vllm_proc.install_wheel(vllm_proc.build_wheel(work), work / "plugin-site")
    sys.path.insert(0, str(plugin))
    from dflash_vllm import probe  # the installed copy, as the image has it

    server = vllm_proc.start_server(models["target-collapsed"], work / "server.log",
                                    vllm_proc.spec_args(models["draft-matching"]), plugin, timeout=900)
    env = vllm_proc.vllm_env(plugin)
    probe_args = ["--url", server.url, "--model", server.model, "--min-acceptance", "0.9"]
    health_code = f"import urllib.request; urllib.request.urlopen('{server.url}/health', timeout=10).read()"

    def exec_probe() -> None:
        done = subprocess.run([str(plugin / "bin" / "dflash-probe"), *probe_args], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr

    def probe_in_process() -> None:
        result = probe.run(probe.parse_args(probe_args))
        assert result.ok, result.line

    def completion_only() -> None:
        vllm_proc.complete(server, "The quick brown fox jumps over the lazy dog.", max_tokens=8)

    def exec_health() -> None:
        subprocess.run([sys.executable, "-c", health_code], env=env, check=True, timeout=60)

    def health() -> None:
        urllib.request.urlopen(server.url + "/health", timeout=10).read()

    cases = {"exec-probe": exec_probe, "probe-in-process": probe_in_process, "completion-only": completion_only,
             "exec-health": exec_health, "health": health}
    try:
        for fn in cases.values():  # warm-up: first requests pay one-off costs
            fn()
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, fn in cases.items():
                samples[name].append(timed(fn))
    finally:
        server.stop()

    results = {name: summary(s) for name, s in samples.items()}
    print(f"server start {server.start_s:.1f} s; {args.runs} runs each")
    print(f"{'check':<18}{'median ms':>11}{'p90 ms':>10}{'min ms':>10}{'max ms':>10}")
    for name, r in results.items():
        print(f"{name:<18}{r['median_ms']:>11.1f}{r['p90_ms']:>10.1f}{r['min_ms']:>10.1f}{r['max_ms']:>10.1f}")
    out = args.json or work / "bench_probe.json"
    out.write_text(json.dumps({"server_start_s": server.start_s, "results": results}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
