"""Derives a draft-length cost model (speculation.tuner.CostModel) from a GPU lane bench JSON: the 2026-12-02 merged
file (its "bounds") or what `bench.py measure cost-random` writes.

The relative step time c(b, k) = t(b, k) / t(b, 0) is read from the random-draft rows: a random draft accepts
nothing (acceptance 0.00 on the lane), so every step yields exactly one token with and without speculation, and the
throughput ratio no-spec / K-random is the step-time ratio itself: the cost of verifying K draft tokens plus the
draft's own pass, with no acceptance mixed in.

    python3 scripts/gpu/cost_model.py bench/results/gpu-lane-2026-12-02.json \
        > operator/dflash_operator/speculation/cost_models/h200-vllm0.23-qwen3next-3.9b-random.json
    python3 scripts/gpu/cost_model.py bench/results/gpu-lane-cost-2026-12-05.json   (its cost-random wave)

A bench that also ran the all-accept draft (its cost-all-accept wave) gives relativeStepTimeAllAccepted too:
c = no-spec tok/s x E / K-all-accept tok/s, E the wave's measured mean accepted length (K + 1 when every token is
accepted): the step cost when every draft token is accepted, which the tuner interpolates towards by acceptance.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _rows(summary: dict, draft: str, batches: list[int], ks: list[int], accepted: bool) -> list[list[float]]:
    rows = []
    for b in batches:
        base = summary["no-spec"][str(b)]["tok_s_median"]
        cells = [summary[f"k{k}-{draft}"][str(b)] for k in ks]
        row = [1.0] + [round(base * (float(c["mean_accepted_length"]) if accepted else 1.0) / c["tok_s_median"], 3)
                       for c in cells]
        # A longer draft never costs less than a shorter one (it drafts and verifies more); a measured inversion
        # (2026-12-05: c(1, 8) 2.66 < c(1, 4) 2.83, within the runs' spread) is noise, and the tuner would pick the
        # longer draft for it: each entry is at least the one before it.
        rows.append([max(row[: i + 1]) for i in range(len(row))])
    return rows


def cost_model(bench: dict, source: str = "bench/results/gpu-lane-2026-12-02.json") -> dict:
    bounds = bench.get("bounds") or bench.get("cost-random") or bench
    summary = bounds["summary"]
    shape = bounds["models"]["shape"]
    batches = sorted(int(b) for b in summary["no-spec"])
    ks = sorted(int(name[1:].split("-")[0]) for name in summary if name.startswith("k") and name.endswith("-random"))
    rows = _rows(summary, "random", batches, ks, accepted=False)
    all_accept = bench.get("cost-all-accept")
    extra = {} if all_accept is None else {
        "relativeStepTimeAllAccepted": _rows(all_accept["summary"], "all-accept", batches, ks, accepted=True)}
    return {
        "gpu": bounds["device"].split(",")[0],
        "vllmVersion": bounds["vllm"],
        "model": (f"Qwen3Next {bounds['models']['target']['params'] / 1e9:.1f}B random weights "
                  f"({shape['num_hidden_layers']} layers, {shape['num_experts']} experts), 3-layer DFlash draft, "
                  f"CUDA graphs, medians of {summary['no-spec'][str(batches[0])]['runs']} runs, monotone in k"),
        "source": f"{source} (random-draft rows: c = no-spec tok/s / K-random tok/s"
                  + ("; all-accept rows: c = no-spec tok/s x E / K-all-accept tok/s)" if extra else ")"),
        "batchSizes": batches,
        "draftLengths": [0, *ks],
        "relativeStepTime": rows,
        **extra,
    }


if __name__ == "__main__":
    print(json.dumps(cost_model(json.loads(Path(sys.argv[1]).read_text()), sys.argv[1]), indent=1))
