"""Where the partial pair's greedy output departs from no speculation (bash scripts/gpu/device.sh py VERSION
diag_partial.py): the partial pair of proof.py (target with lm_head row 0 scaled by SCALE, default 24, the factor the
12-04 proof chose; the all-accept draft) with and without speculation, no plugin (run it on a release >= 0.24),
each engine in its own process with logprobs=5, so the top candidates at the first differing position show whether
the two paths disagree on a near-tie. Writes $OUT/diag-partial.json and prints the differing positions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import proof  # noqa: E402

SCALE = float(os.environ.get("SCALE", "24"))


def engine(mode: str, models: Path, out: Path) -> None:
    from vllm import LLM, SamplingParams, TokensPrompt

    draft = models / "draft-matching" if mode == "spec" else None
    llm = LLM(**proof.llm_kwargs(models / "target-partial", draft))
    params = SamplingParams(temperature=0.0, max_tokens=proof.MAX_TOKENS, ignore_eos=True, detokenize=False,
                            logprobs=5)
    prompts = json.loads((models / "prompts.json").read_text())
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    result = []
    for output in outputs:
        completion = output.outputs[0]
        result.append({"token_ids": list(completion.token_ids),
                       "logprobs": [{str(t): round(lp.logprob, 5) for t, lp in position.items()}
                                    for position in (completion.logprobs or [])]})
    out.write_text(json.dumps(result))


def main() -> int:
    if sys.argv[1:2] in (["spec"], ["base"]):
        engine(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    models = proof.LANE / "models" / "tiny"
    made = proof.tiny_models.make_all(models)
    proof.make_partial_target(models / "target-partial", made["target"], SCALE)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(made["target"])
    (models / "prompts.json").write_text(json.dumps([tokenizer(p)["input_ids"] for p in proof.PROMPTS]))
    work = proof.LANE / "diag-partial"
    work.mkdir(parents=True, exist_ok=True)
    procs = {}
    for mode in ("spec", "base"):
        env = proof.vllm_proc.vllm_env(None)
        env["VLLM_CACHE_ROOT"] = str(proof.LANE / "cache" / f"diag-{mode}")
        procs[mode] = proof.vllm_proc.spawn([sys.executable, __file__, mode, str(models), str(work / f"{mode}.json")],
                                            work / f"{mode}.log", env)
    for proc in procs.values():
        try:
            proc.popen.wait(400)
        except subprocess.TimeoutExpired:
            proc.stop()
    runs = {mode: json.loads((work / f"{mode}.json").read_text()) if (work / f"{mode}.json").exists()
            else {"error": procs[mode].tail(30)} for mode in procs}
    report: dict = {"scale": SCALE, "runs": runs, "divergences": []}
    if all(isinstance(run, list) for run in runs.values()):
        for index, (spec, base) in enumerate(zip(runs["spec"], runs["base"], strict=True)):
            pairs = zip(spec["token_ids"], base["token_ids"], strict=False)
            at = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
            if at is None:
                continue
            entry = {"prompt": index, "position": at, "spec_token": spec["token_ids"][at],
                     "base_token": base["token_ids"][at],
                     "base_top": base["logprobs"][at] if at < len(base["logprobs"]) else None,
                     "spec_top": spec["logprobs"][at] if at < len(spec["logprobs"]) else None}
            report["divergences"].append(entry)
            print(json.dumps(entry))
    else:
        print(json.dumps({mode: run for mode, run in runs.items() if not isinstance(run, list)})[-3000:])
    (proof.OUT / "diag-partial.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
