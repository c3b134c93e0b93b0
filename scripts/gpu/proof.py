"""The GPU lane's proof, on the device (bash scripts/gpu/device.sh proof): vLLM 0.23.0 on a real GPU with a tiny
Qwen3Next target and tiny DFlash drafts (tests/vllm/tiny_models.py).

1. Without the plugin, speculation with a DFlash draft fails at load with the seed's exact error.
2. With the plugin, it generates: the all-accept pair (collapsed target + matching draft) accepts every draft token,
   a random draft on the uncollapsed target accepts (almost) none, and in both cases the greedy tokens equal those of
   the same target served without speculation (by upstream vLLM, without the plugin).
3. The readiness probe, rendered by the operator's own code (dflash_operator.render.probe_command) for a
   DFlashDeployment with minAcceptanceRate 0.3, against GPU OpenAI servers (started by tests/vllm/vllm_proc.py):
   OK with the matching draft, FAIL (acceptance) with the random one.
Every engine runs in its own process, all at once (kv_cache_memory_bytes set, so they can share the GPU).
Writes $OUT/proof.json and the engines' logs' tails to $OUT/proof-logs.txt; exits 1 if a claim does not hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "tests" / "vllm"), str(ROOT / "operator"), str(HERE)]
import tiny_models  # noqa: E402
import vllm_proc  # noqa: E402

LANE = Path(os.environ.get("LANE", "/root/gpu-lane"))
OUT = Path(os.environ.get("OUT", LANE / "out"))
PLUGIN = LANE / "plugin"
WORK = LANE / "proof"
SEED_ERROR = "Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested"
K = vllm_proc.NUM_SPEC_TOKENS
MAX_TOKENS = 32
PROMPTS = ["The quick brown fox", "Speculative decoding drafts tokens with a small model and",
           "Kubernetes operators reconcile desired state."]
CR = {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment", "metadata": {"name": "gpu-lane"},
      "spec": {"target": {"repo": "gpu-lane/tiny-qwen3next"}, "draft": {"repo": "gpu-lane/tiny-dflash"},
               "numSpeculativeTokens": K, "readiness": {"minAcceptanceRate": 0.3}}}
# Server flags on top of vllm_proc.CPU_ARGS (bf16, eager, no prefix caching, max-model-len 512).
GPU_SERVER_ARGS = ["--gpu-memory-utilization", "0.1", "--kv-cache-memory-bytes", str(2 << 30),
                   "--gdn-prefill-backend", "triton"]


def llm_kwargs(target: Path, draft: Path | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": str(target), "tokenizer": str(target), "dtype": "bfloat16", "enforce_eager": True,
        "max_model_len": 512, "gpu_memory_utilization": 0.1, "kv_cache_memory_bytes": 2 << 30,
        "enable_prefix_caching": False, "gdn_prefill_backend": "triton", "disable_log_stats": False, "seed": 0,
    }
    if draft is not None:
        kwargs["speculative_config"] = {"method": "dflash", "model": str(draft), "num_speculative_tokens": K}
    return kwargs


def start_engine(name: str, target: Path, draft: Path | None, plugin: bool,
                 prompts: list[list[int]]) -> tuple[vllm_proc.Proc, Path]:
    config, result = WORK / f"{name}.json", WORK / f"{name}.result.json"
    config.write_text(json.dumps({"llm": llm_kwargs(target, draft), "prompts": prompts, "max_tokens": MAX_TOKENS}))
    env = vllm_proc.vllm_env(PLUGIN if plugin else None)
    env["VLLM_CACHE_ROOT"] = str(LANE / "cache" / f"proof-{name}")
    proc = vllm_proc.spawn([sys.executable, str(HERE / "engine.py"), "once", str(config), str(result)],
                           WORK / f"{name}.log", env)
    return proc, result


# Lines after which an engine will not come up; its parent process can linger, so it is stopped after a grace.
FATAL = (SEED_ERROR, "Engine core initialization failed", "EngineCore failed to start")


def finish(proc: vllm_proc.Proc, result: Path, timeout: float) -> dict[str, Any]:
    until, fatal_at = time.monotonic() + timeout, None
    while proc.popen.poll() is None and time.monotonic() < until and not result.exists():
        if fatal_at is None and any(marker in proc.text() for marker in FATAL):
            fatal_at = time.monotonic()
        if fatal_at is not None and time.monotonic() - fatal_at > 15:
            break
        time.sleep(0.5)
    try:
        proc.popen.wait(5)
    except subprocess.TimeoutExpired:
        pass
    proc.stop()
    out: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {"ok": False, "error": "no result"}
    out["exit_code"] = proc.popen.returncode
    log = proc.text()
    out["plugin_log"] = next((line.strip() for line in log.splitlines() if "dflash-vllm:" in line), None)
    out["aux_layers_log"] = next((line.strip() for line in log.splitlines() if "auxiliary layers" in line), None)
    out["seed_error_log"] = next((line.strip() for line in log.splitlines() if SEED_ERROR in line), None)
    return out


def acceptance(spec: dict[str, float]) -> dict[str, float]:
    drafted, accepted, drafts = spec["num_draft_tokens"], spec["num_accepted_tokens"], spec["num_drafts"]
    return {"draft_tokens": drafted, "accepted_tokens": accepted, "drafts": drafts,
            "acceptance": accepted / drafted if drafted else 0.0,
            "mean_accepted_length": 1 + accepted / drafts if drafts else 1.0}


def rendered_probe() -> tuple[list[str], str]:
    """The probe command exactly as the operator renders it for CR (its own code; pydantic comes from the bundle)."""
    from dflash_operator.api import DFlashDeployment
    from dflash_operator.render import RenderConfig, probe_command

    return probe_command(DFlashDeployment.model_validate(CR), RenderConfig()), "dflash_operator.render.probe_command"


def run_probe(argv: list[str], server: vllm_proc.Server) -> dict[str, Any]:
    # Only the URL is the pod's own (the rendered one is 127.0.0.1:8000); `dflash-probe` is the plugin's console
    # script from the pip --target install.
    run_argv = list(argv)
    run_argv[run_argv.index("--url") + 1] = server.url
    run_argv[0] = str(PLUGIN / "bin" / "dflash-probe")
    env = vllm_proc.vllm_env(PLUGIN)
    start = time.monotonic()
    done = subprocess.run(run_argv, capture_output=True, text=True, env=env, timeout=30)
    return {"argv": run_argv, "exit_code": done.returncode, "line": done.stdout.strip(),
            "stderr": done.stderr.strip()[-500:], "seconds": round(time.monotonic() - start, 2)}


def serve(name: str, target: Path, draft: Path) -> vllm_proc.Server:
    extra = ["--served-model-name", CR["spec"]["target"]["repo"], *GPU_SERVER_ARGS, *vllm_proc.spec_args(draft)]
    return vllm_proc.start_server(target, WORK / f"server-{name}.log", extra, PLUGIN, timeout=420)


def main() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    models = tiny_models.make_all(LANE / "models" / "tiny")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["target"])
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS]

    engines = {
        # name: (target, draft, plugin)
        "no-plugin-spec": (models["target-collapsed"], models["draft-matching"], False),
        "plugin-spec-matching": (models["target-collapsed"], models["draft-matching"], True),
        "upstream-nospec-collapsed": (models["target-collapsed"], None, False),
        "plugin-spec-random": (models["target"], models["draft-random"], True),
        "upstream-nospec-target": (models["target"], None, False),
    }
    procs = {name: start_engine(name, *spec, prompts=prompts) for name, spec in engines.items()}
    with ThreadPoolExecutor(2) as pool:
        futures = {"matching": pool.submit(serve, "matching", models["target-collapsed"], models["draft-matching"]),
                   "random": pool.submit(serve, "random", models["target"], models["draft-random"])}
        runs = {name: finish(proc, result, timeout=max(30.0, 450 - (time.monotonic() - started)))
                for name, (proc, result) in procs.items()}
        servers: dict[str, Any] = {}
        for name, future in futures.items():
            try:
                servers[name] = future.result()
            except Exception as exc:  # noqa: BLE001 - the log tail is in the message
                servers[name] = exc

    probe: dict[str, Any] = {}
    try:
        argv, rendered_by = rendered_probe()
    except Exception as exc:  # noqa: BLE001 - the operator package moved under us: run the probe as render.py rendered it on 12-02
        readiness = CR["spec"]["readiness"]
        argv = ["dflash-probe", "--url", "http://127.0.0.1:8000", "--model", CR["spec"]["target"]["repo"],
                "--prompt", "def fibonacci(n):", "--max-tokens", "16",
                "--min-acceptance", f"{readiness['minAcceptanceRate']:g}", "--timeout", "10"]
        rendered_by = f"FALLBACK (render failed: {type(exc).__name__}: {exc})"
    probe["rendered_argv"], probe["rendered_by"] = argv, rendered_by
    for name, server in servers.items():
        if isinstance(server, Exception):
            probe[name] = {"server_error": str(server)[-3000:]}
            continue
        entry: dict[str, Any] = {"server_start_s": round(server.start_s, 1)}
        if argv is not None:
            entry["probe"] = run_probe(argv, server)
        entry["metrics"] = {line.split()[0]: float(line.split()[-1]) for line in vllm_proc.metrics(server).splitlines()
                            if line.startswith("vllm:spec_decode_num_") and "_per_pos" not in line}
        server.stop()
        probe[name] = entry

    # Judge each claim.
    crash, matching, random_ = runs["no-plugin-spec"], runs["plugin-spec-matching"], runs["plugin-spec-random"]
    base_c, base_t = runs["upstream-nospec-collapsed"], runs["upstream-nospec-target"]
    claims: dict[str, bool] = {
        "without plugin: the seed's exact error": not crash.get("ok") and crash.get("seed_error_log") is not None,
        "with plugin: all-accept pair generates": bool(matching.get("ok")),
        "with plugin: random pair generates": bool(random_.get("ok")),
    }
    if matching.get("ok"):
        matching["acceptance"] = acceptance(matching["spec"])
        claims["all-accept pair: every draft token accepted"] = (
            matching["acceptance"]["draft_tokens"] > 0
            and matching["acceptance"]["accepted_tokens"] == matching["acceptance"]["draft_tokens"])
        claims["all-accept pair: greedy output equals no speculation"] = (
            base_c.get("ok", False) and matching["token_ids"] == base_c["token_ids"])
    if random_.get("ok"):
        random_["acceptance"] = acceptance(random_["spec"])
        claims["random pair: drafts proposed"] = random_["acceptance"]["draft_tokens"] > 0
        claims["random pair: greedy output equals no speculation"] = (
            base_t.get("ok", False) and random_["token_ids"] == base_t["token_ids"])
    for name, want_ok in (("matching", True), ("random", False)):
        result = probe.get(name, {}).get("probe")
        if result is None:
            claims[f"probe vs {name} draft: ran"] = False
            continue
        if want_ok:
            claims["probe vs matching draft: OK"] = result["exit_code"] == 0 and result["line"].startswith("OK")
        else:
            claims["probe vs random draft: FAIL acceptance"] = (
                result["exit_code"] == 1 and result["line"].startswith("FAIL acceptance"))

    import importlib.metadata as md

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    import torch

    report = {
        "what": "GPU lane proof: vLLM 0.23.0 + dflash-vllm plugin, tiny Qwen3Next target + tiny DFlash drafts",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": smi, "torch": torch.__version__, "cuda": torch.version.cuda, "vllm": md.version("vllm"),
        "transformers": md.version("transformers"), "python": sys.version.split()[0],
        "num_speculative_tokens": K, "max_tokens": MAX_TOKENS, "prompts": PROMPTS,
        "engines": {name: {k: v for k, v in run.items() if k != "traceback"} | (
            {"traceback_tail": run["traceback"][-1500:]} if "traceback" in run else {}) for name, run in runs.items()},
        "probe": probe, "claims": claims, "all_hold": all(claims.values()),
        "seconds": round(time.monotonic() - started, 1),
    }
    (OUT / "proof.json").write_text(json.dumps(report, indent=2))
    with open(OUT / "proof-logs.txt", "w") as logs:
        for log in sorted(WORK.glob("*.log")):
            logs.write(f"===== {log.name}\n")
            logs.write("\n".join(log.read_text(errors="replace").splitlines()[-80:]) + "\n")
    for claim, holds in claims.items():
        print(f"{'HOLDS' if holds else 'FAILS'}  {claim}")
    for name in ("matching", "random"):
        print(f"probe vs {name}: {probe.get(name, {}).get('probe', {}).get('line')}")
    print(f"proof in {report['seconds']} s; all hold: {report['all_hold']}")
    return 0 if report["all_hold"] else 1


if __name__ == "__main__":
    sys.exit(main())
