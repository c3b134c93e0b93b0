"""Merges the two waves of issue 26's cost grid (bench.py measure cost-random / cost-all-accept) into one committed
JSON and prints what they show: the grid against no speculation, the cost model's predicted throughput against the
measured one for every (b, k) of the all-accept draft, and the recommended schedules as vLLM served them.

    python3 scripts/gpu/cost_report.py RANDOM.json ALL_ACCEPT.json bench/results/gpu-lane-cost-DATE.json

Prediction (speculation/tuner.py): tok/s(b, k) = no-spec tok/s(b) x E(k) / c(b, k), E(k) the measured mean accepted
length, c(b, k) from the random-draft rows (cost_model.py). "two-point" is the check of the cost's dependence on
acceptance: the all-accept draft's own step cost c_acc(b, k) = no-spec tok/s x E / all-accept tok/s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import cost_model

BATCHES = ("1", "2", "4", "8", "16", "32", "64")
KS = (1, 2, 4, 8)


def median(summary: dict[str, Any], name: str, b: str) -> float:
    return float(summary[name][b]["tok_s_median"])


def spread(summary: dict[str, Any], name: str, b: str) -> float:
    e = summary[name][b]
    return (e["tok_s_max"] - e["tok_s_min"]) / e["tok_s_median"]


def analyse(random_wave: dict[str, Any], accept_wave: dict[str, Any]) -> dict[str, Any]:
    r, a = random_wave["summary"], accept_wave["summary"]
    cells = []
    for k in KS:
        for b in BATCHES:
            c = median(r, "no-spec", b) / median(r, f"k{k}-random", b)
            e = a[f"k{k}-all-accept"][b]["mean_accepted_length"]
            predicted = median(a, "no-spec", b) * e / c
            measured = median(a, f"k{k}-all-accept", b)
            cells.append({"batch": int(b), "k": k, "c_random": round(c, 3), "E": round(e, 3),
                          "c_all_accept": round(median(a, "no-spec", b) * e / measured, 3),
                          "predicted_tok_s": round(predicted), "measured_tok_s": round(measured),
                          "error": round((predicted - measured) / measured, 3),
                          "spread_measured": round(spread(a, f"k{k}-all-accept", b), 3)})
    best_static = {b: max(KS, key=lambda k, b=b: median(a, f"k{k}-all-accept", b)) for b in BATCHES}
    schedules = {
        "sched-random": {b: {"tok_s": round(median(r, "sched-random", b)),
                             "x_no_spec": round(median(r, "sched-random", b) / median(r, "no-spec", b), 3),
                             "k4_static_x_no_spec": round(median(r, "k4-random", b) / median(r, "no-spec", b), 3)}
                         for b in BATCHES},
        "sched-random-v2": {b: {"tok_s": round(median(r, "sched-random-v2", b)),
                                "x_no_spec": round(median(r, "sched-random-v2", b) / median(r, "no-spec", b), 3)}
                            for b in BATCHES},
        "sched-all-accept": {b: {"tok_s": round(median(a, "sched-all-accept", b)), "best_static_k": best_static[b],
                                 "x_best_static": round(median(a, "sched-all-accept", b)
                                                        / median(a, f"k{best_static[b]}-all-accept", b), 3)}
                             for b in BATCHES},
    }
    return {"predicted_vs_measured": cells, "schedules_as_served": schedules,
            "within_15_percent": sum(abs(c["error"]) <= 0.15 for c in cells), "cells": len(cells)}


def main() -> int:
    random_path, accept_path, out = map(Path, sys.argv[1:4])
    random_wave, accept_wave = json.loads(random_path.read_text()), json.loads(accept_path.read_text())
    analysis = analyse(random_wave, accept_wave)
    merged = {"what": "issue 26's cost grid on the lent H200: relative step time c(b, k) from the random draft, the "
                      "all-accept draft against the cost model's prediction, and recommended schedules as vLLM "
                      "served them (RANDOM weights: bounds of the data plane, not real-model figures)",
              "cost-random": random_wave, "cost-all-accept": accept_wave, "analysis": analysis,
              "cost_model": cost_model.cost_model(random_wave, str(out))}
    out.write_text(json.dumps(merged, indent=1))
    print(f"{'b':>3} {'k':>2} {'c(b,k)':>7} {'E':>5} {'predicted':>10} {'measured':>9} {'error':>7} {'spread':>7} "
          f"{'c_acc':>6}")
    for c in analysis["predicted_vs_measured"]:
        print(f"{c['batch']:>3} {c['k']:>2} {c['c_random']:>7.2f} {c['E']:>5.2f} {c['predicted_tok_s']:>10} "
              f"{c['measured_tok_s']:>9} {c['error']:>+7.0%} {c['spread_measured']:>7.0%} {c['c_all_accept']:>6.2f}")
    print(f"within 15%: {analysis['within_15_percent']} of {analysis['cells']} cells")
    for name, rows in analysis["schedules_as_served"].items():
        print(name, {b: {k: v for k, v in row.items() if k != "tok_s"} for b, row in rows.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
