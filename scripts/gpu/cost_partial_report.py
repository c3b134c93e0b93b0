"""Issue 26's acceptance-dependent check: the partial pair's cost grid (bench.py measure cost-partial) against two
cost models built from the 2026-12-05 grid (gpu-lane-cost-2026-12-05.json), merged into one committed JSON.

    python3 scripts/gpu/cost_partial_report.py PARTIAL.json bench/results/gpu-lane-cost-2026-12-05.json \
        bench/results/gpu-lane-cost-partial-DATE.json

For every (b, k), with E the cell's own measured mean accepted length and no-spec tok/s from the same run:
  random       tok/s = no-spec x E / c_random(b, k)                       (the shipped shape: speculation/tuner.py)
  interpolated tok/s = no-spec x E / c(b, k, E), c(b, k, E) = c_random + (c_all_accept - c_random) x (E - 1) / k
                       (linear in the accepted tokens per step between the random draft, which accepts none, and
                       the all-accept draft, which accepts k)
and the cell's implied step cost c_partial = no-spec x E / measured tok/s, placed between the two ends as a fraction
(0 = random's cost, 1 = all-accept's) to set beside (E - 1) / k. The run's k4-random row against the earlier file's is
the drift between the two sessions, which both models carry.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cost_report import BATCHES, KS, median, spread

WITHIN = 0.15


def ends(earlier: dict[str, Any]) -> dict[tuple[str, int], tuple[float, float]]:
    """(c_random, c_all_accept) by (b, k) from the earlier grid's analysis cells."""
    return {(str(c["batch"]), c["k"]): (c["c_random"], c["c_all_accept"])
            for c in earlier["analysis"]["predicted_vs_measured"]}


def cell(p: dict[str, Any], b: str, k: int, c_random: float, c_all: float) -> dict[str, Any] | None:
    name = f"k{k}-partial"
    if b not in p.get(name, {}) or b not in p.get("no-spec", {}):
        return None
    base, measured = median(p, "no-spec", b), median(p, name, b)
    e = float(p[name][b]["mean_accepted_length"])
    share = (e - 1) / k  # accepted tokens per step over the most a step can accept
    c_interp = c_random + (c_all - c_random) * share
    c_partial = base * e / measured
    random_pred, interp_pred = base * e / c_random, base * e / c_interp
    return {"batch": int(b), "k": k, "E": round(e, 3), "acceptance": round(float(p[name][b]["acceptance_mean"]), 3),
            "accepted_share": round(share, 3), "c_random": c_random, "c_all_accept": c_all,
            "c_interpolated": round(c_interp, 3), "c_partial": round(c_partial, 3),
            # Where the measured cost sits between the ends (undefined where they coincide).
            "c_partial_between_ends": round((c_partial - c_random) / (c_all - c_random), 3)
            if abs(c_all - c_random) > 1e-9 else None,
            "measured_tok_s": round(measured), "no_spec_tok_s": round(base),
            "random_predicted_tok_s": round(random_pred), "random_error": round((random_pred - measured) / measured, 3),
            "interpolated_predicted_tok_s": round(interp_pred),
            "interpolated_error": round((interp_pred - measured) / measured, 3),
            "spread_measured": round(spread(p, name, b), 3), "runs": p[name][b]["runs"]}


def drift(p: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """This run's k4-random step cost against the earlier grid's, by batch."""
    rows = {}
    before = earlier["cost-random"]["summary"]
    for b in BATCHES:
        if b in p.get("k4-random", {}) and b in p.get("no-spec", {}):
            now = median(p, "no-spec", b) / median(p, "k4-random", b)
            then = median(before, "no-spec", b) / median(before, "k4-random", b)
            rows[b] = {"c_now": round(now, 3), "c_earlier": round(then, 3), "ratio": round(now / then, 3)}
    return rows


def analyse(partial_wave: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    p, by_cell = partial_wave["summary"], ends(earlier)
    cells = [c for k in KS for b in BATCHES if (c := cell(p, b, k, *by_cell[(b, k)])) is not None]
    return {"predicted_vs_measured": cells, "cells": len(cells),
            "random_within_15_percent": sum(abs(c["random_error"]) <= WITHIN for c in cells),
            "interpolated_within_15_percent": sum(abs(c["interpolated_error"]) <= WITHIN for c in cells),
            "k4_random_drift": drift(p, earlier)}


def main() -> int:
    partial_path, earlier_path, out = map(Path, sys.argv[1:4])
    partial_wave = json.loads(partial_path.read_text())
    earlier = json.loads(earlier_path.read_text())
    analysis = analyse(partial_wave, earlier)
    merged = {"what": "issue 26's acceptance-dependent check on the lent H200: the partial pair (acceptance between "
                      "the two ends) against the random-row cost model and the model interpolated in accepted length "
                      f"between the random and all-accept rows of {earlier_path.name} (RANDOM weights: bounds of the "
                      "data plane, not real-model figures)",
              "ends_from": str(earlier_path), "cost-partial": partial_wave, "analysis": analysis}
    out.write_text(json.dumps(merged, indent=1))
    print(f"{'b':>3} {'k':>2} {'E':>5} {'acc':>5} {'c_rand':>6} {'c_acc':>6} {'c_int':>6} {'c_part':>6} {'pos':>5} "
          f"{'measured':>8} {'rand pred':>9} {'err':>5} {'int pred':>8} {'err':>5} {'spread':>6} {'runs':>4}")
    for c in analysis["predicted_vs_measured"]:
        pos = "-" if c["c_partial_between_ends"] is None else f"{c['c_partial_between_ends']:.2f}"
        print(f"{c['batch']:>3} {c['k']:>2} {c['E']:>5.2f} {c['acceptance']:>5.2f} {c['c_random']:>6.2f} "
              f"{c['c_all_accept']:>6.2f} {c['c_interpolated']:>6.2f} {c['c_partial']:>6.2f} {pos:>5} "
              f"{c['measured_tok_s']:>8} {c['random_predicted_tok_s']:>9} {c['random_error']:>+5.0%} "
              f"{c['interpolated_predicted_tok_s']:>8} {c['interpolated_error']:>+5.0%} {c['spread_measured']:>6.0%} "
              f"{c['runs']:>4}")
    print(f"within 15%: random-row model {analysis['random_within_15_percent']} of {analysis['cells']}, "
          f"interpolated {analysis['interpolated_within_15_percent']} of {analysis['cells']}")
    print("k4-random now / earlier (step cost):", analysis["k4_random_drift"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
