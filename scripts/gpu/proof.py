"""The GPU lane's proof, on the device (bash scripts/gpu/device.sh proof VERSION): one vLLM release's GPU build
(whatever the interpreter running this has) on a real GPU with a tiny Qwen3Next target and tiny DFlash drafts
(tests/vllm/tiny_models.py).

1. Without the plugin, speculation with a DFlash draft fails at load with the seed's exact error on a release the
   plugin patches (before dflash_vllm.plugin.FIXED_IN, 0.24); on a fixed release it generates, every draft token
   accepted, and the plugin logs that it is a no-op.
2. With the plugin, it generates: the all-accept pair (collapsed target + matching draft) accepts every draft token,
   a random draft on the uncollapsed target accepts (almost) none, and in both cases the greedy tokens equal those of
   the same target served without speculation (by upstream vLLM, without the plugin).
3. The readiness probe, rendered by the operator's own code (dflash_operator.render.probe_command) for a
   DFlashDeployment with minAcceptanceRate 0.3, against GPU OpenAI servers (started by tests/vllm/vllm_proc.py):
   OK with the matching draft, FAIL (acceptance) with the random one.
4. Lossless where it matters: the partial pair, the uncollapsed target with its lm_head row for token 0 scaled
   (choose_partial_scale: token 0 wins at some positions only) and the all-accept draft (always token 0):
   acceptance strictly between 0 and 1, an output that varies, and greedy tokens equal to the same target's
   without speculation.
5. The KV-geometry rule (dflash_cache.pairing.KV_GEOMETRY_FIXED_IN, 0.26): the all-accept draft with 2 KV heads
   (KV heads x head_dim 128, the hybrid target's 64) crashes at start-up with the AssertionError in
   unify_kv_cache_spec_page_size before that release and serves (every draft token accepted) from it; the claim is
   that the measured outcome is the one the rule predicts for this release.
Every engine runs in its own process, all at once (kv_cache_memory_bytes set, so they can share the GPU).
Writes $OUT/proof.json and the engines' logs' tails to $OUT/proof-logs.txt; exits 1 if a claim does not hold.
"""

from __future__ import annotations

import json
import os
import shutil
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
KV_ASSERT = "unify_kv_cache_spec_page_size"
# lm_head row 0 of the partial pair's target is scaled so that token 0 wins where the final hidden state leans its
# way: at some positions only. choose_partial_scale picks the factor from these by greedy decoding with transformers
# on the CPU (token 0's share of the output nearest PARTIAL_SHARE); PARTIAL_SCALE forces one.
PARTIAL_SCALES = (2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0)
PARTIAL_SHARE = 0.4
# Seconds the engines and servers get, all releases of one call sharing the machine (device.sh proof A B ...).
BUDGET_S = float(os.environ.get("PROOF_BUDGET_S", "450"))


def vllm_version() -> str:
    import importlib.metadata as md

    return md.version("vllm")


def plugin_constants() -> tuple[tuple[int, int], tuple[int, int]]:
    """The plugin's own claims: the first release that needs no patch, the first without the KV-geometry limit."""
    sys.path.insert(0, str(PLUGIN))
    try:
        from dflash_vllm.plugin import FIXED_IN

        try:  # the pair rules live in dflash-cache, installed beside the plugin (prepare.sh)
            from dflash_cache.pairing import KV_GEOMETRY_FIXED_IN
        except ImportError:  # bundles made before the split
            from dflash_vllm.pairing import KV_GEOMETRY_FIXED_IN
    finally:
        sys.path.remove(str(PLUGIN))
    return FIXED_IN, KV_GEOMETRY_FIXED_IN


def has_gdn_prefill_backend() -> bool:
    """Whether this vLLM has the gdn_prefill_backend engine argument (the lane carries no flashinfer, so it asks for
    triton where it can; older releases run Qwen3Next's GDN prefill on their Triton kernels anyway)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    arg_utils = Path(spec.submodule_search_locations[0]) / "engine" / "arg_utils.py"
    return "gdn_prefill_backend" in arg_utils.read_text()


GDN = has_gdn_prefill_backend()
K = vllm_proc.NUM_SPEC_TOKENS
MAX_TOKENS = 32
PROMPTS = ["The quick brown fox", "Speculative decoding drafts tokens with a small model and",
           "Kubernetes operators reconcile desired state."]
CR = {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment", "metadata": {"name": "gpu-lane"},
      "spec": {"target": {"repo": "gpu-lane/tiny-qwen3next"}, "draft": {"repo": "gpu-lane/tiny-dflash"},
               "numSpeculativeTokens": K, "readiness": {"minAcceptanceRate": 0.3}}}
# Server flags on top of vllm_proc.CPU_ARGS (bf16, eager, no prefix caching, max-model-len 512).
GPU_SERVER_ARGS = ["--gpu-memory-utilization", "0.1", "--kv-cache-memory-bytes", str(2 << 30),
                   *(["--gdn-prefill-backend", "triton"] if GDN else [])]


def llm_kwargs(target: Path, draft: Path | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": str(target), "tokenizer": str(target), "dtype": "bfloat16", "enforce_eager": True,
        "max_model_len": 512, "gpu_memory_utilization": 0.1, "kv_cache_memory_bytes": 2 << 30,
        "enable_prefix_caching": False, "disable_log_stats": False, "seed": 0,
    }
    if GDN:
        kwargs["gdn_prefill_backend"] = "triton"
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
    out["kv_assert_log"] = next((line.strip() for line in log.splitlines() if KV_ASSERT in line), None)
    # The error lines of a failed start, as the log has them (the first few, for the matrix).
    out["error_lines"] = [line.strip() for line in log.splitlines()
                          if "Error" in line and ("ERROR" in line or line.lstrip().startswith(
                              ("AssertionError", "RuntimeError", "ValueError", "TypeError", "KeyError")))][:6]
    return out


def choose_partial_scale(target: Path, prompts: list[list[int]]) -> tuple[float, dict[str, Any]]:
    """The factor for lm_head row 0 whose greedy output (transformers, CPU, fp32) has token 0's share nearest
    PARTIAL_SHARE, with the share seen for each candidate."""
    if "PARTIAL_SCALE" in os.environ:
        return float(os.environ["PARTIAL_SCALE"]), {"forced": True}
    import torch
    from transformers import AutoModelForCausalLM

    shares: dict[str, Any] = {}
    torch.set_num_threads(4)
    try:
        model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
        row = model.lm_head.weight[0].detach().clone()
        for scale in PARTIAL_SCALES:
            with torch.no_grad():
                model.lm_head.weight[0] = row * scale
                tokens = [model.generate(torch.tensor([p]), max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS,
                                         do_sample=False)[0, len(p):].tolist() for p in prompts]
            flat = [t for seq in tokens for t in seq]
            shares[f"{scale:g}"] = round(flat.count(0) / len(flat), 3)
    except Exception as exc:  # noqa: BLE001 - a fixed factor still makes the pair; the report says why
        return 8.0, shares | {"error": f"{type(exc).__name__}: {exc}"[:300]}
    usable = {float(k): v for k, v in shares.items() if 0.1 <= v <= 0.8} or {float(k): v for k, v in shares.items()}
    return min(usable, key=lambda k: abs(usable[k] - PARTIAL_SHARE)), shares


def make_partial_target(out: Path, target: Path, scale: float) -> Path:
    """A copy of the uncollapsed target whose lm_head row 0 is `scale` times larger."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(target, out, dirs_exist_ok=True)
    for path in out.glob("*.safetensors"):
        tensors = load_file(str(path))
        if "lm_head.weight" in tensors:
            weight = tensors["lm_head.weight"].clone()
            weight[0] *= scale
            tensors["lm_head.weight"] = weight.contiguous()
            save_file(tensors, str(path), metadata={"format": "pt"})
    return out


def make_kv_wide_draft(out: Path, target: Path) -> Path:
    """The all-accept draft with 2 KV heads instead of the target's 1 (KV heads x head_dim 128 vs 64)."""
    original = tiny_models.Qwen3Config
    tiny_models.Qwen3Config = lambda **kw: original(**(kw | {"num_key_value_heads": 2}))
    try:
        return tiny_models.make_draft(out, target, matching=True)
    finally:
        tiny_models.Qwen3Config = original


def acceptance(spec: dict[str, float]) -> dict[str, float]:
    drafted, accepted, drafts = spec["num_draft_tokens"], spec["num_accepted_tokens"], spec["num_drafts"]
    return {"draft_tokens": drafted, "accepted_tokens": accepted, "drafts": drafts,
            "acceptance": accepted / drafted if drafted else 0.0,
            "mean_accepted_length": 1 + accepted / drafts if drafts else 1.0}


def rendered_probe() -> tuple[list[str], str]:
    """The probe command exactly as the operator renders it for CR (its own code; pydantic comes from the bundle)."""
    from dflash_operator.api import DFlashDeployment
    from dflash_operator.render.serving import RenderConfig, probe_command

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
    return vllm_proc.start_server(target, WORK / f"server-{name}.log", extra, PLUGIN, timeout=BUDGET_S - 30)


def main() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    models = tiny_models.make_all(LANE / "models" / "tiny")
    models["draft-kv-wide"] = make_kv_wide_draft(LANE / "models" / "tiny" / "draft-kv-wide", models["target-collapsed"])
    version = vllm_version()
    parsed = tuple(int(x) for x in version.split(".")[:2])
    fixed_in, kv_fixed_in = plugin_constants()
    patched = parsed < fixed_in
    kv_rule_applies = parsed < kv_fixed_in
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["target"])
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS]
    partial_scale, partial_shares = choose_partial_scale(models["target"], prompts)
    models["target-partial"] = make_partial_target(LANE / "models" / "tiny" / "target-partial", models["target"],
                                                   partial_scale)

    engines = {
        # name: (target, draft, plugin)
        "no-plugin-spec": (models["target-collapsed"], models["draft-matching"], False),
        "plugin-spec-matching": (models["target-collapsed"], models["draft-matching"], True),
        "upstream-nospec-collapsed": (models["target-collapsed"], None, False),
        "plugin-spec-random": (models["target"], models["draft-random"], True),
        "upstream-nospec-target": (models["target"], None, False),
        "plugin-spec-kv-wide": (models["target-collapsed"], models["draft-kv-wide"], True),
        "plugin-spec-partial": (models["target-partial"], models["draft-matching"], True),
        "upstream-nospec-partial": (models["target-partial"], None, False),
    }
    procs = {name: start_engine(name, *spec, prompts=prompts) for name, spec in engines.items()}
    with ThreadPoolExecutor(2) as pool:
        futures = {"matching": pool.submit(serve, "matching", models["target-collapsed"], models["draft-matching"]),
                   "random": pool.submit(serve, "random", models["target"], models["draft-random"])}
        runs = {name: finish(proc, result, timeout=max(30.0, BUDGET_S - (time.monotonic() - started)))
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
    kv_wide = runs["plugin-spec-kv-wide"]
    claims: dict[str, bool] = {}
    plugin_log = matching.get("plugin_log") or ""
    if patched:
        claims["without plugin: the seed's exact error"] = (
            not crash.get("ok") and crash.get("seed_error_log") is not None)
        claims["with plugin: the plugin registers its patch"] = "registered" in plugin_log
    else:
        claims["without plugin: all-accept pair generates"] = bool(crash.get("ok"))
        if crash.get("ok"):
            crash["acceptance"] = acceptance(crash["spec"])
            claims["without plugin: every draft token accepted"] = (
                crash["acceptance"]["draft_tokens"] > 0
                and crash["acceptance"]["accepted_tokens"] == crash["acceptance"]["draft_tokens"])
            claims["without plugin: greedy output equals no speculation"] = (
                base_c.get("ok", False) and crash["token_ids"] == base_c["token_ids"])
        claims["with plugin: the plugin logs that it is a no-op"] = "no-op" in plugin_log
    claims["with plugin: all-accept pair generates"] = bool(matching.get("ok"))
    claims["with plugin: random pair generates"] = bool(random_.get("ok"))
    # The KV-geometry rule: what the rule predicts for this release against what happened.
    kv_crashed = not kv_wide.get("ok") and kv_wide.get("kv_assert_log") is not None
    if kv_wide.get("ok"):
        kv_wide["acceptance"] = acceptance(kv_wide["spec"])
    kv_outcome = "crash (unify_kv_cache_spec_page_size)" if kv_crashed else (
        "serves" if kv_wide.get("ok") else "fails otherwise")
    if kv_rule_applies:
        claims["KV rule: mismatched draft crashes in unify_kv_cache_spec_page_size"] = kv_crashed
    else:
        claims["KV rule: mismatched draft serves, every draft token accepted"] = bool(kv_wide.get("ok")) and (
            kv_wide["acceptance"]["accepted_tokens"] == kv_wide["acceptance"]["draft_tokens"] > 0)
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
    partial, base_p = runs["plugin-spec-partial"], runs["upstream-nospec-partial"]
    claims["partial pair: generates"] = bool(partial.get("ok"))
    if partial.get("ok"):
        partial["acceptance"] = acceptance(partial["spec"])
        claims["partial pair: acceptance strictly between 0 and 1"] = 0 < partial["acceptance"]["acceptance"] < 1
        claims["partial pair: output varies (more than one distinct token)"] = len(
            {t for seq in partial["token_ids"] for t in seq}) > 1
        claims["partial pair: greedy output equals no speculation"] = (
            base_p.get("ok", False) and partial["token_ids"] == base_p["token_ids"])
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
        "what": f"GPU lane proof: vLLM {version} + dflash-vllm plugin, tiny Qwen3Next target + tiny DFlash drafts",
        "plugin_patches_this_release": patched, "plugin_fixed_in": ".".join(map(str, fixed_in)),
        "kv_rule_applies": kv_rule_applies, "kv_rule_fixed_in": ".".join(map(str, kv_fixed_in)),
        "kv_wide_outcome": kv_outcome, "gdn_prefill_backend_arg": GDN, "partial_scale": partial_scale,
        "partial_token0_share_by_scale_hf_cpu": partial_shares,
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
    print(f"vLLM {version}: KV-wide draft {kv_outcome}: {kv_wide.get('kv_assert_log') or kv_wide.get('error_lines')}")
    print(f"vLLM {version}: without plugin: {crash.get('seed_error_log') or crash.get('error') or 'ok'}")
    print(f"vLLM {version}: proof in {report['seconds']} s; all hold: {report['all_hold']}")
    return 0 if report["all_hold"] else 1


if __name__ == "__main__":
    sys.exit(main())
