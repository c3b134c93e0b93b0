"""Throughput of the DFlash data plane on the device: a ~4B random Qwen3Next target (scripts/gpu/models.py mid)
served by vLLM + the dflash-vllm plugin with CUDA graphs on, one engine per configuration, each measured alone on
the GPU, round-robin over configurations. A SET names the configurations, batch sizes and lengths:

  bounds            no speculation, a draft that accepts every token (K = 4, 8) and a random draft (K = 4, 8), at
                    batch 1 and 16 (the 2026-12-02 bounds)
  cost-random       issue 26's cost grid, first wave: no speculation and the random draft at K = 1, 2, 4, 8, batch
                    1..64; the random draft accepts nothing, so each row's throughput ratio to no speculation is the
                    relative step time c(b, k) itself (scripts/gpu/cost_model.py); plus the schedule the operator
                    recommends for that draft (K = 4 with speculation off where it does not pay), as vLLM's
                    num_speculative_tokens_per_batch_size, under the V1 and the V2 model runner
  cost-all-accept   second wave: no speculation and the all-accept draft at K = 1, 2, 4, 8, batch 1..64, plus the
                    schedule the operator's tuner recommends for it from the cost model the first wave measured
                    (read from $OUT/bench-cost-random.json; the shipped model when that is absent)
  cost-partial      the acceptance-dependent check: no speculation and the partial pair (models.py make_partial: the
                    target uncollapsed with lm_head row 0 scaled, and the all-accept draft, which is right at some
                    positions only) at K = 1, 2, 4, 8, batch 1..64, each cell's acceptance and mean accepted length
                    recorded; plus k4-random on the collapsed target, a same-run peer of cost-random's row
  cost-partial-h100 no speculation and the partial pair at K = 2 and 8 only: what an 80 GB card holds at once

These are BOUNDS with random weights, not real-model figures: the all-accept draft is the best any draft of this
size can do on this stack, the random draft the worst (it costs drafting and verification and saves nothing).

    python bench.py start [SET]     build the set's engines, each in its own process (scripts/gpu/engine.py serve,
                                    its own session: they outlive the device call), all at once; returns at once
    python bench.py measure [SET]   (starts them when none were started) waits until they are built, measures them,
                                    writes $OUT/bench-SET.json (bench.json for bounds) and $OUT/bench-SET-logs.txt,
                                    stops the engines; THEN=SET2 starts SET2's engines once this set's are stopped

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
from dataclasses import dataclass
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
# The engine process; BENCH_ENGINE swaps in a stand-in to exercise this orchestration without a GPU.
ENGINE = Path(os.environ.get("BENCH_ENGINE", HERE / "engine.py"))



@dataclass(frozen=True)
class Config:
    name: str
    draft: str | None  # a folder under MODELS, None for no speculation
    k: int = 0
    schedule: str | None = None  # "recommended": rows from the operator's tuner (schedule_rows)
    env: tuple[tuple[str, str], ...] = ()
    target: str = "target"  # a folder under MODELS: "target-partial" for the partial pair


@dataclass(frozen=True)
class BenchSet:
    configs: tuple[Config, ...]
    batches: tuple[int, ...]
    max_tokens: int
    rounds: int
    what: str


_GRID_KS = (1, 2, 4, 8)
SETS: dict[str, BenchSet] = {
    "bounds": BenchSet(
        (Config("no-spec", None), Config("k4-all-accept", "draft-matching", 4),
         Config("k8-all-accept", "draft-matching", 8), Config("k4-random", "draft-random", 4),
         Config("k8-random", "draft-random", 8)),
        (1, 16), 256, 7, "bounds: no speculation, all-accept and random drafts at K = 4, 8"),
    "cost-random": BenchSet(
        (Config("no-spec", None), *(Config(f"k{k}-random", "draft-random", k) for k in _GRID_KS),
         Config("sched-random", "draft-random", 4, "recommended"),
         Config("sched-random-v2", "draft-random", 4, "recommended", (("VLLM_USE_V2_MODEL_RUNNER", "1"),))),
        (1, 2, 4, 8, 16, 32, 64), 128, 5, "cost grid, random draft (c(b, k)) and its recommended schedule"),
    "cost-all-accept": BenchSet(
        (Config("no-spec", None), *(Config(f"k{k}-all-accept", "draft-matching", k) for k in _GRID_KS),
         Config("sched-all-accept", "draft-matching", 8, "recommended")),
        (1, 2, 4, 8, 16, 32, 64), 128, 5, "cost grid, all-accept draft (predicted vs measured) and its schedule"),
    # No speculation on the partial target too: the same compute as the collapsed one, and its tokens are the ones
    # the partial rows are compared with.
    "cost-partial": BenchSet(
        (Config("no-spec", None, target="target-partial"),
         *(Config(f"k{k}-partial", "draft-matching", k, target="target-partial") for k in _GRID_KS),
         Config("k4-random", "draft-random", 4)),
        (1, 2, 4, 8, 16, 32, 64), 128, 5, "cost grid, partial pair (acceptance between the two ends)"),
    # cost-partial's six engines need the H200's 141 GB; on an 80 GB H100 (2026-12-05) K 2 and 8 ran out of memory
    # at start. These three fit 79 GB (weights ~10 GiB each, KV 3 + 6.5 + 17 GiB) and give the missing cells.
    "cost-partial-h100": BenchSet(
        (Config("no-spec", None, target="target-partial"),
         *(Config(f"k{k}-partial", "draft-matching", k, target="target-partial") for k in (2, 8))),
        (1, 2, 4, 8, 16, 32, 64), 128, 5, "cost grid, partial pair, K 2 and 8 (the engines an 80 GB card holds)"),
}
PROMPT_LEN = 32
SHIPPED_COST_MODEL = HERE.parents[1] / "operator/dflash_operator/speculation/cost_models/" \
    "h200-vllm0.23-qwen3next-3.9b-random.json"


def kv_cache_bytes(k: int) -> int:
    """KV (and Qwen3Next's linear-attention state) memory for 64 running sequences: vLLM gives each sequence 1 + K
    state blocks per linear-attention layer group when it speculates K tokens (MambaSpec.num_speculative_blocks), so
    the need grows with K; 3 GiB + 1.75 GiB per token. On 2026-12-05 vLLM reported room for 85-120 requests of 224
    tokens at every K with this (its "Maximum concurrency" line, kept in each engine's facts)."""
    return int((3 + 1.75 * k) * (1 << 30))


def prompts(batches: tuple[int, ...]) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(3, 390) for _ in range(PROMPT_LEN)] for _ in range(max(batches))]


def llm_kwargs(bench: BenchSet, config: Config, schedule: list[list[int]] | None = None) -> dict[str, Any]:
    bounds = bench is SETS["bounds"]  # its settings as measured on 2026-12-02
    kwargs: dict[str, Any] = {
        "model": str(MODELS / config.target), "tokenizer": str(MODELS / config.target), "dtype": "bfloat16",
        "enforce_eager": False,  # CUDA graphs (and torch.compile) on, as served
        "max_model_len": 1024 if bounds else PROMPT_LEN + bench.max_tokens + 64, "max_num_seqs": max(bench.batches),
        "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.08,
        "kv_cache_memory_bytes": 4 << 30 if bounds else kv_cache_bytes(config.k), "enable_prefix_caching": False,
        "gdn_prefill_backend": "triton", "disable_log_stats": False, "seed": 0,
    }
    if config.draft is not None:
        kwargs["speculative_config"] = {"method": "dflash", "model": str(MODELS / config.draft),
                                        "num_speculative_tokens": config.k}
        if schedule is not None:
            kwargs["speculative_config"]["num_speculative_tokens_per_batch_size"] = schedule
    return kwargs


def _tuner() -> Any:
    """The operator's own tuner module, loaded from its file (pure standard library; the operator package's
    __init__ wants its installed metadata, which the lane does not carry)."""
    import importlib.util

    path = HERE.parents[1] / "operator/dflash_operator/speculation/tuner.py"
    spec = importlib.util.spec_from_file_location("dflash_tuner", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dflash_tuner"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def cost_model_for(set_name: str) -> tuple[dict[str, Any], str]:
    """The cost model a set's schedule comes from: the first wave's measurement when it is on this machine."""
    import cost_model

    measured = OUT / "bench-cost-random.json"
    if set_name == "cost-all-accept" and measured.exists():
        return cost_model.cost_model(json.loads(measured.read_text())), str(measured.name)
    return json.loads(SHIPPED_COST_MODEL.read_text()), SHIPPED_COST_MODEL.name


def schedule_rows(set_name: str, config: Config) -> tuple[list[list[int]], dict[str, Any]]:
    """What the operator would render for this draft: its tuner's recommendation as [[from, to, K], ...], from the
    draft's acceptance by position (all-accept: 1.0 at every position, as the matrix and the bounds measured;
    random: 0.0) and the set's cost model."""
    tuner = _tuner()
    model, source = cost_model_for(set_name)
    acceptance = 1.0 if config.draft == "draft-matching" else 0.0
    rec = tuner.recommend([acceptance] * config.k, 10_000, tuner.CostModel.from_dict(model), config.k)
    rows = [[r.from_batch_size, r.to_batch_size, r.k] for r in rec.ranges]
    return rows, {"cost_model": source, "acceptance_by_position": [acceptance] * config.k, "rows": rows,
                  "expected_speedup": [[r.from_batch_size, r.to_batch_size, round(r.expected_speedup_low, 3),
                                        round(r.expected_speedup_high, 3)] for r in rec.ranges]}


def ensure_models(set_name: str = "bounds") -> dict[str, Any]:
    import models

    made = MODELS / "made.json"
    if not made.exists():
        models.make_mid(MODELS, models.MID, models.MID_DRAFT, "cuda")
    facts = json.loads(made.read_text())
    if any(c.target == "target-partial" for c in SETS[set_name].configs):
        partial = MODELS / "partial.json"
        if not partial.exists():
            models.make_partial(MODELS, prompts((16,)), "cuda")
        facts["target-partial"] = json.loads(partial.read_text())
        print(f"partial target: {facts['target-partial']}", flush=True)
    return facts


def work_of(set_name: str) -> Path:
    return WORK if set_name == "bounds" else WORK / set_name


def start(set_name: str) -> dict[str, int]:
    ensure_models(set_name)
    bench, work_root = SETS[set_name], work_of(set_name)
    work_root.mkdir(parents=True, exist_ok=True)
    launched: dict[str, int] = {}
    schedules: dict[str, Any] = {}
    for config in bench.configs:
        work = work_root / config.name
        subprocess.run(["rm", "-rf", str(work)], check=True)
        work.mkdir(parents=True)
        rows = None
        if config.schedule == "recommended":
            rows, schedules[config.name] = schedule_rows(set_name, config)
        engine = {"llm": llm_kwargs(bench, config, rows), "prompts": prompts(bench.batches),
                  "warmup_batches": list(bench.batches), "warmup_tokens": 32}
        (work / "config.json").write_text(json.dumps(engine))
        env = vllm_proc.vllm_env(PLUGIN)  # the image always carries the plugin
        env["VLLM_CACHE_ROOT"] = str(LANE / "cache" / f"bench-{set_name}-{config.name}")
        env.update(config.env)
        proc = vllm_proc.spawn([sys.executable, str(ENGINE), "serve", str(work / "config.json"), str(work)],
                               work / "engine.log", env)
        launched[config.name] = proc.popen.pid
    (work_root / "launched.json").write_text(json.dumps({"pids": launched, "at": time.time(),
                                                         "schedules": schedules}))
    print(f"started {len(launched)} engines of {set_name}: {launched}; schedules {schedules}", flush=True)
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


def wait_ready(work_root: Path, pids: dict[str, int], until: float) -> dict[str, dict[str, Any]]:
    ready: dict[str, dict[str, Any]] = {}
    while time.monotonic() < until and len(ready) < len(pids):
        for name, pid in pids.items():
            marker = work_root / name / "ready.json"
            if name not in ready and marker.exists():
                ready[name] = json.loads(marker.read_text())
                print(f"{name}: ready {ready[name]}", flush=True)
            elif name not in ready and not alive(pid):
                ready[name] = {"ok": False, "error": "engine process exited before it was ready"}
                print(f"{name}: exited before ready", flush=True)
            elif name not in ready and any(marker in (work_root / name / "engine.log").read_text(errors="replace")
                                           for marker in FATAL):
                ready[name] = {"ok": False, "error": "engine failed to start (see bench-logs.txt)"}
                print(f"{name}: failed to start", flush=True)
        time.sleep(1)
    for name in pids:
        ready.setdefault(name, {"ok": False, "error": "not ready before the deadline"})
    return ready


def run_one(work: Path, tag: str, batch: int, max_tokens: int, timeout: float) -> dict[str, Any] | None:
    (work / f"cmd-{tag}.json").write_text(json.dumps({"batch": batch, "max_tokens": max_tokens}))
    result = work / f"res-{tag}.json"
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if result.exists():
            run = json.loads(result.read_text())
            spec = run["spec"]
            drafted, accepted, drafts = spec["num_draft_tokens"], spec["num_accepted_tokens"], spec["num_drafts"]
            return {
                "batch": batch, "wall_s": run["wall_s"], "output_tokens": run["output_tokens"],
                "tok_s": run["output_tokens"] / run["wall_s"], "ms_per_token": 1000 * run["wall_s"] / max_tokens,
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


def stop(work_root: Path, pids: dict[str, int]) -> None:
    for name in pids:
        (work_root / name / "stop").touch()
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


CONCURRENCY = ("Maximum concurrency", "GPU KV cache size", "cudagraph_mode", "CUDAGraphMode", "V2 model runner",
               "Dynamic speculative", "num_speculative_tokens_per_batch_size")


def engine_facts(log: Path) -> list[str]:
    """The engine's own lines on what it can hold and how it runs (concurrency, graph mode, the schedule)."""
    if not log.exists():
        return []
    return [line[-300:] for line in log.read_text(errors="replace").splitlines()
            if any(marker in line for marker in CONCURRENCY)][:12]


def measure(set_name: str) -> int:
    t0 = time.monotonic()
    bench, work_root = SETS[set_name], work_of(set_name)
    OUT.mkdir(parents=True, exist_ok=True)
    launched_file = work_root / "launched.json"
    if launched_file.exists():
        launched = json.loads(launched_file.read_text())
        pids, schedules = launched["pids"], launched.get("schedules", {})
        print(f"engines already started: {pids}", flush=True)
    else:
        print("no engines started on this machine: starting them now", flush=True)
        pids = start(set_name)
        schedules = json.loads(launched_file.read_text()).get("schedules", {})
    deadline = t0 + BUDGET_S
    # Readiness may take most of the budget (engines compile at once); measuring needs at least one round.
    ready = wait_ready(work_root, pids, until=deadline - float(os.environ.get("BENCH_MEASURE_MIN_S", "150")))
    usable = [c.name for c in bench.configs if ready.get(c.name, {}).get("ok")]
    smi_mem = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {name: {b: [] for b in bench.batches} for name in usable}
    rounds_done, round_s = 0, 0.0
    for rnd in range(bench.rounds):
        # A round starts only when one as long as the last fits before the deadline (the first always runs).
        if rnd and time.monotonic() + round_s > deadline - 20:
            break
        started = time.monotonic()
        for name in usable:
            for batch in bench.batches:
                result = run_one(work_root / name, f"{rnd:02d}-b{batch:02d}", batch, bench.max_tokens,
                                 timeout=max(5.0, deadline - time.monotonic()))
                if result is not None:
                    runs[name][batch].append(result | {"round": rnd})
        round_s = time.monotonic() - started
        rounds_done = rnd + 1
        print(f"round {rnd + 1} done at {time.monotonic() - t0:.0f} s ({round_s:.0f} s)", flush=True)
    stop(work_root, pids)

    made = json.loads((MODELS / "made.json").read_text()) if (MODELS / "made.json").exists() else None
    if made is not None and (MODELS / "partial.json").exists():
        made["target-partial"] = json.loads((MODELS / "partial.json").read_text())
    summary = summarize(runs)
    machine = environment()
    report = {
        "what": f"{bench.what}, vLLM {machine['vllm']} with RANDOM weights: bounds of the data plane, not "
                "real-model figures",
        "set": set_name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **machine,
        "gpu_memory_used_while_all_engines_up": smi_mem,
        "models": made,
        "settings": {"configs": [{"name": c.name, "target": c.target, "draft": c.draft, "num_speculative_tokens": c.k,
                                  "schedule": schedules.get(c.name), "env": dict(c.env),
                                  "kv_cache_memory_bytes": llm_kwargs(bench, c)["kv_cache_memory_bytes"]}
                                 for c in bench.configs],
                     "batches": list(bench.batches), "max_tokens": bench.max_tokens, "prompt_len": PROMPT_LEN,
                     "rounds_planned": bench.rounds, "rounds_done": rounds_done,
                     "llm": llm_kwargs(bench, Config("K", "DRAFT", 1)) | {"kv_cache_memory_bytes": "per K"},
                     "env": {"VLLM_USE_FLASHINFER_SAMPLER": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER")},
                     "measured": "each engine alone on the GPU (others idle), round-robin over configurations"},
        "engines": {name: info | {"facts": engine_facts(work_root / name / "engine.log")}
                    for name, info in ready.items()},
        "summary": summary, "runs": runs,
        "seconds": round(time.monotonic() - t0, 1),
    }
    stem = "bench" if set_name == "bounds" else f"bench-{set_name}"
    (OUT / f"{stem}.json").write_text(json.dumps(report, indent=2))
    with open(OUT / f"{stem}-logs.txt", "w") as logs:
        for config in bench.configs:
            log = work_root / config.name / "engine.log"
            if log.exists():
                lines = log.read_text(errors="replace").splitlines()
                keep = [line for line in lines if any(s in line for s in (
                    "Compil", "compil", "graph", "Graph", "init engine", "Loading", "memory", "backend", "Error",
                    "error", "dflash-vllm", "auxiliary", "concurrency", "KV cache", "speculative"))]
                logs.write(f"===== {config.name} ({len(lines)} lines)\n" + "\n".join(keep[-40:] + ["-- tail --"] +
                                                                                     lines[-25:]) + "\n")
    print(f"{'config':17} {'batch':>5} {'runs':>4} {'tok/s med':>10} {'spread':>7} {'ms/token':>9} {'x no-spec':>9} "
          f"{'accept':>7}")
    for name, by_batch in summary.items():
        for batch, e in by_batch.items():
            acc = f"{e['acceptance_mean']:.2f}" if e["acceptance_mean"] is not None else "-"
            spread = (e["tok_s_max"] - e["tok_s_min"]) / e["tok_s_median"]
            print(f"{name:17} {batch:>5} {e['runs']:>4} {e['tok_s_median']:>10.1f} {spread:>7.1%} "
                  f"{e['ms_per_token_median']:>9.2f} {e.get('speedup_vs_no_spec', float('nan')):>9.2f} {acc:>7}")
    print(f"bench {set_name} in {report['seconds']} s; engines ready: {usable}; schedules: {schedules}")
    then = os.environ.get("THEN")
    if then:
        start(then)
    return 0 if usable else 1


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "measure"
    chosen = sys.argv[2] if len(sys.argv) > 2 else "bounds"
    if chosen not in SETS:
        sys.exit(f"unknown set {chosen}; one of {', '.join(SETS)}")
    if mode == "start":
        start(chosen)
        sys.exit(0)
    sys.exit(measure(chosen))
