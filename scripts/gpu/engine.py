"""One offline vLLM engine (vllm.LLM) in its own process, for the GPU lane (proof.py and bench.py start it).

    python engine.py once  CONFIG.json RESULT.json    build the engine, one greedy generation, write tokens + counters
    python engine.py serve CONFIG.json WORKDIR        build the engine, warm up, write WORKDIR/ready.json, then run
                                                      each WORKDIR/cmd-N.json ({"batch", "max_tokens"}) alone and
                                                      write WORKDIR/res-N.json, until WORKDIR/stop appears

CONFIG.json: {"llm": {...vllm.LLM keyword arguments...}, "prompts": [[token ids], ...], "max_tokens": N}.
A failure to build the engine writes {"ok": false, "error": ...} (the root cause is in the engine's log, on stderr).
Whether the dflash-vllm plugin is active is decided by the caller's PYTHONPATH, not here.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

SPEC_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def spec_counters(llm: Any) -> dict[str, float]:
    """vllm:spec_decode_{num_drafts,num_draft_tokens,num_accepted_tokens} summed over engines (0 when absent)."""
    totals = dict.fromkeys(SPEC_COUNTERS, 0.0)
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:spec_decode_").removesuffix("_total")
        if name in totals and hasattr(metric, "value"):
            totals[name] += float(metric.value)
    return totals


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in after}


def generate(llm: Any, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    before = spec_counters(llm)
    start = time.perf_counter()
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    wall = time.perf_counter() - start
    tokens = [list(out.outputs[0].token_ids) for out in outputs]
    return {"wall_s": wall, "output_tokens": sum(map(len, tokens)), "token_ids": tokens,
            "spec": delta(spec_counters(llm), before)}


def build(config: dict[str, Any]) -> Any:
    from vllm import LLM

    return LLM(**config["llm"])


def write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.rename(path)


def once(config_path: Path, result_path: Path) -> int:
    config = json.loads(config_path.read_text())
    start = time.perf_counter()
    try:
        llm = build(config)
    except Exception as exc:  # noqa: BLE001 - the engine's own error is logged above by vLLM
        write(result_path, {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc()[-4000:]})
        return 1
    init_s = time.perf_counter() - start
    run = generate(llm, config["prompts"], config["max_tokens"])
    write(result_path, {"ok": True, "init_s": init_s} | run)
    return 0


def serve(config_path: Path, work: Path) -> int:
    config = json.loads(config_path.read_text())
    start = time.perf_counter()
    try:
        llm = build(config)
    except Exception as exc:  # noqa: BLE001 - any engine failure is a result to report
        write(work / "ready.json", {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    init_s = time.perf_counter() - start
    # Warm-up at every batch size the bench uses, so lazily compiled kernels are not timed.
    for batch in config.get("warmup_batches", [1]):
        generate(llm, config["prompts"][:batch], config.get("warmup_tokens", 32))
    write(work / "ready.json", {"ok": True, "init_s": init_s, "warm_s": time.perf_counter() - start - init_s})
    done: set[str] = set()
    while not (work / "stop").exists():
        for cmd in sorted(work.glob("cmd-*.json")):
            if cmd.name in done:
                continue
            done.add(cmd.name)
            spec = json.loads(cmd.read_text())
            run = generate(llm, config["prompts"][:spec["batch"]], spec["max_tokens"])
            run["distinct_tokens"] = sorted({t for seq in run.pop("token_ids") for t in seq})[:8]
            write(work / cmd.name.replace("cmd-", "res-"), run)
        time.sleep(0.01)
    return 0


if __name__ == "__main__":
    mode, config_arg, out_arg = sys.argv[1:4]
    if mode == "once":
        sys.exit(once(Path(config_arg), Path(out_arg)))
    if mode == "serve":
        sys.exit(serve(Path(config_arg), Path(out_arg)))
    sys.exit(f"unknown mode {mode}")
