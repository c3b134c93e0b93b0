"""Follow-up to the proof (device): the random draft on the uncollapsed tiny target gave greedy output that differs
from the run without speculation. This separates the suspects, every engine in its own process, all at once:
each prompt alone (batch 1) with and without speculation, K=1 on the whole batch, and no speculation with the
plugin loaded, next to the batch with and without speculation again. Writes $OUT/diag.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proof  # noqa: E402


def main() -> int:
    proof.WORK.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    models = proof.tiny_models.make_all(proof.LANE / "models" / "tiny")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["target"])
    prompts = [tokenizer(p)["input_ids"] for p in proof.PROMPTS]
    target, draft = models["target"], models["draft-random"]
    runs: dict[str, tuple] = {}
    for i, prompt in enumerate(prompts):
        runs[f"spec-alone-{i}"] = proof.start_engine(f"diag-spec-alone-{i}", target, draft, True, [prompt])
        runs[f"nospec-alone-{i}"] = proof.start_engine(f"diag-nospec-alone-{i}", target, None, False, [prompt])
    runs["spec-batch"] = proof.start_engine("diag-spec-batch", target, draft, True, prompts)
    runs["nospec-batch"] = proof.start_engine("diag-nospec-batch", target, None, False, prompts)
    runs["nospec-plugin-batch"] = proof.start_engine("diag-nospec-plugin-batch", target, None, True, prompts)
    k1 = proof.llm_kwargs(target, draft)
    k1["speculative_config"]["num_speculative_tokens"] = 1
    config = proof.WORK / "diag-spec-k1-batch.json"
    config.write_text(json.dumps({"llm": k1, "prompts": prompts, "max_tokens": proof.MAX_TOKENS}))
    env = proof.vllm_proc.vllm_env(proof.PLUGIN)
    proc = proof.vllm_proc.spawn([sys.executable, str(proof.HERE / "engine.py"), "once", str(config),
                                  str(proof.WORK / "diag-spec-k1-batch.result.json")],
                                 proof.WORK / "diag-spec-k1-batch.log", env)
    runs["spec-k1-batch"] = (proc, proof.WORK / "diag-spec-k1-batch.result.json")
    results = {name: proof.finish(p, r, timeout=max(30.0, 420 - (time.monotonic() - started)))
               for name, (p, r) in runs.items()}
    tokens = {name: r.get("token_ids") for name, r in results.items()}
    summary = {}
    for i in range(len(prompts)):
        a, b = (tokens.get(f"spec-alone-{i}") or [None])[0], (tokens.get(f"nospec-alone-{i}") or [None])[0]
        summary[f"prompt {i} alone: spec == nospec"] = a is not None and a == b
    base = tokens.get("nospec-batch")
    for name in ("spec-batch", "nospec-plugin-batch", "spec-k1-batch"):
        summary[f"{name} == upstream no-spec batch"] = base is not None and tokens.get(name) == base
    for i in range(len(prompts)):
        alone, batch = (tokens.get(f"nospec-alone-{i}") or [None])[0], (base or [None] * 3)[i]
        summary[f"prompt {i}: no-spec alone == no-spec in batch"] = alone is not None and alone == batch
    report = {"summary": summary, "tokens": tokens,
              "acceptance": {n: proof.acceptance(r["spec"]) for n, r in results.items() if r.get("ok")},
              "errors": {n: r.get("error") for n, r in results.items() if not r.get("ok")},
              "seconds": round(time.monotonic() - started, 1)}
    (proof.OUT / "diag.json").write_text(json.dumps(report, indent=2))
    for claim, holds in summary.items():
        print(f"{'YES' if holds else 'NO '}  {claim}")
    print(json.dumps(report["errors"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
