"""Replays the GPU lane's measured cost grid through the operator's own Auto decision (issue 26, part 4): which one
draft length Auto picks when the window's reads of the running batch size say where the traffic runs, against the
even weighting over the cost model's batch sizes it falls back to, and what that length measured on the GPU.

    .venv/bin/python bench/auto_traffic.py [GRID.json] [--json OUT.json]

GRID is the lane's merged grid (default bench/results/gpu-lane-cost-2026-12-05.json: an H200, vLLM 0.26.0, the 3.9B
random Qwen3Next). Its `cost_model` (derived from the random-draft rows) is what the operator is given; the
all-accept and random rows are the two drafts (acceptance 1 and 0 at every position). For each traffic (all at one
batch size, and even over 1..64), the table gives the length Auto applies and its measured throughput at each
batch size of the traffic, against no speculation and against the best static length measured there. No GPU here:
the throughput figures are the lane's medians; what this runs is the operator's decision code on them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))

from dflash_operator.api import DFlashDeployment  # noqa: E402
from dflash_operator.speculation import auto, tuner  # noqa: E402

DEFAULT_GRID = REPO / "bench/results/gpu-lane-cost-2026-12-05.json"
DRAFTS = {"all-accept": ("cost-all-accept", [1.0] * 8), "random": ("cost-random", [0.0] * 8)}
NOW = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)


def measured(grid: dict[str, Any], wave: str, draft: str, k: int, b: int) -> float:
    """Output tokens per second against no speculation, the lane's median at batch size b (k = 0: 1.0)."""
    return 1.0 if k == 0 else float(grid[wave]["summary"][f"k{k}-{draft}"][str(b)]["speedup_vs_no_spec"])


def auto_length(cost: tuner.CostModel, p: list[float], traffic: dict[int, float] | None) -> int:
    """The length the operator's Auto applies to a DFlashDeployment running K = 8 (default settings)."""
    dfd = DFlashDeployment.model_validate({
        "apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
        "metadata": {"name": "replay", "namespace": "default"},
        "spec": {"target": {"repo": "org/t"}, "draft": {"repo": "org/d"}, "numSpeculativeTokens": 8,
                 "speculation": {"tuning": "Auto"}}})
    found = tuner.recommend(p, 10_000, cost, 8, traffic=traffic)
    assert isinstance(found, tuner.Recommendation), found
    decision = auto.decide(dfd, None, found, p, cost, NOW, traffic)
    return auto.tuned_length(decision.tuned) if decision.tuned is not None else 8  # type: ignore[return-value]


def replay(grid: dict[str, Any]) -> list[dict[str, Any]]:
    cost = tuner.CostModel.from_dict(grid["cost_model"])
    sizes = list(cost.batch_sizes)
    traffics: list[tuple[str, dict[int, float]]] = [(f"all at {b}", {b: 1.0}) for b in sizes]
    traffics.append(("even over " + ", ".join(map(str, sizes)), dict.fromkeys(sizes, 1.0)))
    rows = []
    for draft, (wave, p) in DRAFTS.items():
        even_k = auto_length(cost, p, None)
        for label, traffic in traffics:
            k = auto_length(cost, p, traffic)
            cells = []
            for b in traffic:
                best_k = max((0, *cost.ks[1:]), key=lambda j, b=b: measured(grid, wave, draft, j, b))
                best, got = measured(grid, wave, draft, best_k, b), measured(grid, wave, draft, k, b)
                cells.append({"batch": b, "x_no_spec": round(got, 2), "best_static_k": best_k,
                              "x_best_static": round(got / best, 2), "even_weighting_k": even_k,
                              "even_weighting_x_best_static": round(measured(grid, wave, draft, even_k, b) / best, 2)})
            rows.append({"draft": draft, "traffic": label, "auto_k": k, "cells": cells})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grid", nargs="?", type=Path, default=DEFAULT_GRID)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    grid = json.loads(args.grid.read_text())
    rows = replay(grid)
    print(f"{'draft':<11} {'traffic':<32} {'Auto k':>6}  per batch size: x no-spec / x best static (best k); "
          f"even weighting's k: x best static")
    for row in rows:
        cells = "; ".join(f"b{c['batch']} {c['x_no_spec']:.2f}/{c['x_best_static']:.2f} (k{c['best_static_k']})"
                          for c in row["cells"][:3])
        more = f" ... ({len(row['cells'])} sizes)" if len(row["cells"]) > 3 else ""
        even = min(c["even_weighting_x_best_static"] for c in row["cells"])
        print(f"{row['draft']:<11} {row['traffic']:<32} {row['auto_k']:>6}  {cells}{more}; "
              f"even k{row['cells'][0]['even_weighting_k']}: {even:.2f}")
    worst = min(c["x_best_static"] for row in rows if not row["traffic"].startswith("even") for c in row["cells"])
    print(f"traffic at one batch size: Auto's length is at least {worst:.2f}x the best static length measured there")
    if args.json:
        args.json.write_text(json.dumps({"what": __doc__.split("\n\n")[0], "grid": str(args.grid.relative_to(REPO)
                                         if args.grid.is_relative_to(REPO) else args.grid),
                                         "cost_model": grid["cost_model"]["gpu"], "rows": rows,
                                         "worst_x_best_static_single_size": worst}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
