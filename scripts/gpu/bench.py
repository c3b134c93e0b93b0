"""Bounds of the data plane on the device: a ~4B random Qwen3Next target (scripts/gpu/models.py mid) served by vLLM
0.23.0 + the dflash-vllm plugin with CUDA graphs on, without speculation, with a draft that accepts every token
(K = 4, 8) and with a random draft (K = 4, 8), at batch 1 and 16.

These are BOUNDS with random weights, not real-model figures: the all-accept draft is the best any draft of this
size can do on this stack, the random draft the worst (it costs drafting and verification and saves nothing).

    python bench.py start     build one engine per configuration, each in its own process (scripts/gpu/engine.py
                              serve), all at once; returns at once (device.sh proof runs it detached)
    python bench.py measure   (starts them when none were started) waits until they are built, then measures them
                              one at a time, round-robin over ROUNDS rounds, each alone on the GPU; writes
                              $OUT/bench.json and $OUT/bench-logs.txt, stops the engines

Output tokens/s = batch x max_tokens / wall time of one llm.generate (greedy, ignore_eos, 32-token prompts);
time per output token = wall time / max_tokens (what one sequence sees, prefill included).
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "tests" / "vllm"), str(HERE)]
import vllm_proc  # noqa: E402

LANE = Path(os.environ.get("LANE", "/root/gpu-lane"))
OUT = Path(os.environ.get("OUT", LANE / "out"))
PLUGIN = LANE / "plugin"
MODELS = LANE / "models" / "mid"
WORK = LANE / "bench"
BUDGET_S = float(os.environ.get("BENCH_BUDGET_S", "540"))  # measure's own limit, inside the call's 600 s

CONFIGS: list[tuple[str, str | None, int]] = [
    ("no-spec", None, 0),
    ("k4-all-accept", "draft-matching", 4),
    ("k8-all-accept", "draft-matching", 8),
    ("k4-random", "draft-random", 4),
    ("k8-random", "draft-random", 8),
]
BATCHES = [1, 16]
MAX_TOKENS = 256
ROUNDS = 7
PROMPT_LEN = 32


def prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(3, 390) for _ in range(PROMPT_LEN)] for _ in range(max(BATCHES))]


def llm_kwargs(draft: str | None, k: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": str(MODELS / "target"), "tokenizer": str(MODELS / "target"), "dtype": "bfloat16",
        "enforce_eager": False,  # CUDA graphs (and torch.compile) on, as served
        "max_model_len": 1024, "max_num_seqs": max(BATCHES), "max_num_batched_tokens": 2048,
        "gpu_memory_utilization": 0.08, "kv_cache_memory_bytes": 4 << 30, "enable_prefix_caching": False,
        "gdn_prefill_backend": "triton", "disable_log_stats": False, "seed": 0,
    }
    if draft is not None:
        kwargs["speculative_config"] = {"method": "dflash", "model": str(MODELS / draft), "num_speculative_tokens": k}
    return kwargs


def ensure_models() -> dict[str, Any]:
    made = MODELS / "made.json"
    if not made.exists():
        import models

        models.make_mid(MODELS, models.MID, models.MID_DRAFT, "cuda")
    return json.loads(made.read_text())


def start() -> dict[str, int]:
    ensure_models()
    WORK.mkdir(parents=True, exist_ok=True)
    launched: dict[str, int] = {}
    for name, draft, k in CONFIGS:
        work = WORK / name
        subprocess.run(["rm", "-rf", str(work)], check=True)
        work.mkdir(parents=True)
        config = {"llm": llm_kwargs(draft, k), "prompts": prompts(), "warmup_batches": BATCHES, "warmup_tokens": 32}
        (work / "config.json").write_text(json.dumps(config))
        env = vllm_proc.vllm_env(PLUGIN)  # the image always carries the plugin
        env["VLLM_CACHE_ROOT"] = str(LANE / "cache" / f"bench-{name}")
        proc = vllm_proc.spawn([sys.executable, str(HERE / "engine.py"), "serve", str(work / "config.json"),
                                str(work)], work / "engine.log", env)
        launched[name] = proc.popen.pid
    (WORK / "launched.json").write_text(json.dumps({"pids": launched, "at": time.time()}))
    print(f"started {len(launched)} engines: {launched}", flush=True)
    return launched


FATAL = ("Engine core initialization failed", "EngineCore failed to start")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_ready(pids: dict[str, int], until: float) -> dict[str, dict[str, Any]]:
    ready: dict[str, dict[str, Any]] = {}
    while time.monotonic() < until and len(ready) < len(pids):
        for name, pid in pids.items():
            marker = WORK / name / "ready.json"
            if name not in ready and marker.exists():
                ready[name] = json.loads(marker.read_text())
                print(f"{name}: ready {ready[name]}", flush=True)
            elif name not in ready and not alive(pid):
                ready[name] = {"ok": False, "error": "engine process exited before it was ready"}
                print(f"{name}: exited before ready", flush=True)
            elif name not in ready and any(marker in (WORK / name / "engine.log").read_text(errors="replace")
                                           for marker in FATAL):
                ready[name] = {"ok": False, "error": "engine failed to start (see bench-logs.txt)"}
                print(f"{name}: failed to start", flush=True)
        time.sleep(1)
    for name in pids:
        ready.setdefault(name, {"ok": False, "error": "not ready before the deadline"})
    return ready


def run_one(name: str, tag: str, batch: int, timeout: float) -> dict[str, Any] | None:
    work = WORK / name
    (work / f"cmd-{tag}.json").write_text(json.dumps({"batch": batch, "max_tokens": MAX_TOKENS}))
    result = work / f"res-{tag}.json"
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if result.exists():
            run = json.loads(result.read_text())
            spec = run["spec"]
            drafted, accepted, drafts = spec["num_draft_tokens"], spec["num_accepted_tokens"], spec["num_drafts"]
            return {
                "batch": batch, "wall_s": run["wall_s"], "output_tokens": run["output_tokens"],
                "tok_s": run["output_tokens"] / run["wall_s"], "ms_per_token": 1000 * run["wall_s"] / MAX_TOKENS,
                "draft_tokens": drafted, "accepted_tokens": accepted,
                "acceptance": accepted / drafted if drafted else None,
                "mean_accepted_length": 1 + accepted / drafts if drafts else None,
                "distinct_tokens": run.get("distinct_tokens"),
            }
        time.sleep(0.02)
    return None


def summarize(runs: dict[str, dict[int, list[dict[str, Any]]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, by_batch in runs.items():
        summary[name] = {}
        for batch, items in by_batch.items():
            if not items:
                continue
            tok_s = [r["tok_s"] for r in items]
            ms = [r["ms_per_token"] for r in items]
            acc = [r["acceptance"] for r in items if r["acceptance"] is not None]
            mal = [r["mean_accepted_length"] for r in items if r["mean_accepted_length"] is not None]
            summary[name][str(batch)] = {
                "runs": len(items), "tok_s_median": statistics.median(tok_s), "tok_s_min": min(tok_s),
                "tok_s_max": max(tok_s), "ms_per_token_median": statistics.median(ms),
                "ms_per_token_min": min(ms), "ms_per_token_max": max(ms),
                "acceptance_mean": statistics.fmean(acc) if acc else None,
                "mean_accepted_length": statistics.fmean(mal) if mal else None,
            }
    base = summary.get("no-spec", {})
    for _name, by_batch in summary.items():
        for batch, entry in by_batch.items():
            if batch in base:
                entry["speedup_vs_no_spec"] = entry["tok_s_median"] / base[batch]["tok_s_median"]
    return summary


def stop(pids: dict[str, int]) -> None:
    for name in pids:
        (WORK / name / "stop").touch()
    time.sleep(3)
    for pid in pids.values():
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    time.sleep(3)
    for pid in pids.values():
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def environment() -> dict[str, Any]:
    import importlib.metadata as md

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                                   capture_output=True, text=True).stdout.split()
    return {"device": smi, "torch": torch_version[0] if torch_version else None,
            "cuda": torch_version[1] if len(torch_version) > 1 else None, "vllm": md.version("vllm"),
            "transformers": md.version("transformers"), "python": sys.version.split()[0]}


def measure() -> int:
    t0 = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    launched_file = WORK / "launched.json"
    if launched_file.exists():
        pids = json.loads(launched_file.read_text())["pids"]
        print(f"engines already started: {pids}", flush=True)
    else:
        print("no engines started on this machine: starting them now", flush=True)
        pids = start()
    deadline = t0 + BUDGET_S
    ready = wait_ready(pids, until=deadline - 150)
    usable = [name for name, _, _ in CONFIGS if ready.get(name, {}).get("ok")]
    smi_mem = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {name: {b: [] for b in BATCHES} for name in usable}
    rounds_done = 0
    for rnd in range(ROUNDS):
        if time.monotonic() > deadline - 60:
            break
        for name in usable:
            for batch in BATCHES:
                result = run_one(name, f"{rnd:02d}-b{batch:02d}", batch, timeout=max(5.0, deadline - time.monotonic()))
                if result is not None:
                    runs[name][batch].append(result | {"round": rnd})
        rounds_done = rnd + 1
        print(f"round {rnd + 1} done at {time.monotonic() - t0:.0f} s", flush=True)
    stop(pids)

    made = json.loads((MODELS / "made.json").read_text()) if (MODELS / "made.json").exists() else None
    summary = summarize(runs)
    report = {
        "what": "Bounds of the DFlash data plane on vLLM 0.23.0 with RANDOM weights (all-accept and random drafts): "
                "not real-model figures",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **environment(),
        "gpu_memory_used_while_all_engines_up": smi_mem,
        "models": made,
        "settings": {"configs": [{"name": n, "draft": d, "num_speculative_tokens": k} for n, d, k in CONFIGS],
                     "batches": BATCHES, "max_tokens": MAX_TOKENS, "prompt_len": PROMPT_LEN,
                     "rounds_planned": ROUNDS, "rounds_done": rounds_done, "llm": llm_kwargs("DRAFT", 0) | {
                         "speculative_config": {"method": "dflash", "model": "DRAFT", "num_speculative_tokens": "K"}},
                     "env": {"VLLM_USE_FLASHINFER_SAMPLER": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER")},
                     "measured": "each engine alone on the GPU (others idle), round-robin over configurations"},
        "engines": ready, "summary": summary, "runs": runs,
        "seconds": round(time.monotonic() - t0, 1),
    }
    (OUT / "bench.json").write_text(json.dumps(report, indent=2))
    with open(OUT / "bench-logs.txt", "w") as logs:
        for name, _, _ in CONFIGS:
            log = WORK / name / "engine.log"
            if log.exists():
                lines = log.read_text(errors="replace").splitlines()
                keep = [line for line in lines if any(s in line for s in (
                    "Compil", "compil", "graph", "Graph", "init engine", "Loading", "memory", "backend", "Error",
                    "error", "dflash-vllm", "auxiliary"))]
                logs.write(f"===== {name} ({len(lines)} lines)\n" + "\n".join(keep[-40:] + ["-- tail --"] +
                                                                               lines[-25:]) + "\n")
        launcher = WORK / "launcher.log"
        if launcher.exists():
            logs.write("===== launcher\n" + "\n".join(launcher.read_text(errors="replace").splitlines()[-40:]))
    print(f"{'config':15} {'batch':>5} {'runs':>4} {'tok/s med':>10} {'ms/token':>9} {'x no-spec':>9} {'accept':>7}")
    for name, by_batch in summary.items():
        for batch, e in by_batch.items():
            acc = f"{e['acceptance_mean']:.2f}" if e["acceptance_mean"] is not None else "-"
            print(f"{name:15} {batch:>5} {e['runs']:>4} {e['tok_s_median']:>10.1f} {e['ms_per_token_median']:>9.2f} "
                  f"{e.get('speedup_vs_no_spec', float('nan')):>9.2f} {acc:>7}")
    print(f"bench in {report['seconds']} s; engines ready: {usable}")
    return 0 if usable else 1


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "measure"
    if mode == "start":
        start()
        sys.exit(0)
    sys.exit(measure())
