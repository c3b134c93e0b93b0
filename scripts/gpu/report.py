"""Merges the GPU lane's results (proof.json, bench.json as they came back from the device) into one committed JSON
under bench/results/ and prints the README's table.

    python3 scripts/gpu/report.py PROOF.json BENCH.json [--diag DIAG.json] [--out bench/results/gpu-lane-DATE.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LABELS = {"no-spec": "no speculation", "k4-all-accept": "all-accept draft, K=4",
          "k8-all-accept": "all-accept draft, K=8",
          "k4-random": "random draft, K=4", "k8-random": "random draft, K=8"}


def slim_proof(proof: dict[str, Any]) -> dict[str, Any]:
    engines = {}
    for name, run in proof.get("engines", {}).items():
        engines[name] = {k: v for k, v in run.items() if k not in ("traceback_tail",)}
        if "token_ids" in run:
            engines[name]["token_ids_first_prompt"] = run["token_ids"][0] if run["token_ids"] else None
            engines[name].pop("token_ids")
    return proof | {"engines": engines}


def table(bench: dict[str, Any]) -> str:
    summary = bench["summary"]
    batches = [str(b) for b in bench["settings"]["batches"]]
    head = ["configuration"]
    for b in batches:
        head += [f"batch {b}: tok/s", "ms/token", "x no-spec"]
    head += ["acceptance"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, label in LABELS.items():
        if name not in summary:
            continue
        row = [label]
        acc = None
        for b in batches:
            e = summary[name].get(b)
            if e is None:
                row += ["-", "-", "-"]
                continue
            row += [f"{e['tok_s_median']:.0f} ({e['tok_s_min']:.0f}-{e['tok_s_max']:.0f})",
                    f"{e['ms_per_token_median']:.2f}", f"{e.get('speedup_vs_no_spec', float('nan')):.2f}x"]
            acc = e["acceptance_mean"] if e["acceptance_mean"] is not None else acc
        row += ["-" if acc is None else f"{acc:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("proof", type=Path)
    parser.add_argument("bench", type=Path)
    parser.add_argument("--diag", type=Path, help="diag_random.py's diag.json from a later call")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    proof = json.loads(args.proof.read_text()) if args.proof.exists() else None
    bench = json.loads(args.bench.read_text()) if args.bench.exists() else None
    date = ((bench or proof) or {}).get("date", "")[:10]
    out = args.out or ROOT / "bench" / "results" / f"gpu-lane-{date}.json"
    merged = {"lane": "GPU lane (by hand): scripts/gpu", "proof": slim_proof(proof) if proof else None,
              "bounds": bench,
              "random_pair_followup": json.loads(args.diag.read_text()) if args.diag else None,
              "note": "bounds use random weights (all-accept and random drafts): limits of the stack, not "
                      "real-model figures"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    if bench:
        print(table(bench))


if __name__ == "__main__":
    main()
