"""Merges what `device.sh collect` brought back for each release (VERSION.tgz, unpacked as DIR/VERSION/out/) into one
committed JSON per release under bench/results/ and prints the matrix table of docs/gpu-matrix.md.

    python3 scripts/gpu/matrix_report.py DIR [--earlier DIR1] [--diag diag-partial.json] [--date 2026-12-04]

DIR/VERSION/out/ holds proof.json, proof-stdout.txt, check-pair-nogpu.json (CHECKPAIR=1) and checkpair-stdout.txt;
--earlier names a run whose stdout files are all that came back (its claim lines are kept beside this run's);
--diag is diag_partial.py's result, kept in the file of the release it ran on.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The one claim that is about bf16 numerics rather than the fix (docs/gpu-matrix.md, "The partial pair").
NUMERICS_CLAIM = "partial pair: greedy output equals no speculation"


def _strip_pid(line: str | None) -> str | None:
    """An engine's log line without its process id and timestamp prefix, as the matrix quotes it."""
    if line is None:
        return None
    return re.sub(r"^\(EngineCore[^)]*\)\s*", "", re.sub(r"^.*?\[[a-z_]+\.py:\d+\]\s*", "", line)).strip()


def stdout_claims(text: str) -> dict[str, bool]:
    return {line[7:].strip(): line.startswith("HOLDS") for line in text.splitlines()
            if line.startswith(("HOLDS  ", "FAILS  "))}


def check_pair_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for result in report["results"]:
        verdict = result.get("verdict") or {}
        hidden = next((line for line in result.get("stderr_tail", "").splitlines() if line.startswith("hidden:")), None)
        rows.append({"env": result["env"], "draft": result["draft"], "exit": result["exit"],
                     "seconds": result["seconds"], "torch_cuda_available": result["torch_cuda_available"],
                     "compatible": verdict.get("compatible"),
                     "problems": verdict.get("problems", []), "vllm_version": verdict.get("vllm_version"),
                     "driver_hidden": hidden})
    return rows


def slim_engines(engines: dict[str, Any]) -> dict[str, Any]:
    return {name: {k: v for k, v in run.items() if k != "traceback_tail"} for name, run in engines.items()}


def matrix_row(proof: dict[str, Any], rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    engines = proof["engines"]
    crash, matching = engines["no-plugin-spec"], engines["plugin-spec-matching"]
    kv_wide = engines["plugin-spec-kv-wide"]
    partial = engines.get("plugin-spec-partial", {})

    def accepted(run: dict[str, Any]) -> str:
        acc = run.get("acceptance") or {}
        return f"{acc.get('accepted_tokens', 0):g}/{acc.get('draft_tokens', 0):g} accepted"

    row: dict[str, Any] = {
        "release": proof["vllm"],
        "plugin_patches": proof["plugin_patches_this_release"],
        "without_plugin": (_strip_pid(crash.get("seed_error_log")) if not crash.get("ok")
                           else f"serves, {accepted(crash)}"),
        "plugin_log": _strip_pid(matching.get("plugin_log")),
        "with_plugin": f"serves, {accepted(matching)}" if matching.get("ok") else matching.get("error"),
        "probe_ok": proof["probe"].get("matching", {}).get("probe", {}).get("line"),
        "probe_fail": proof["probe"].get("random", {}).get("probe", {}).get("line"),
        "kv_rule_applies": proof["kv_rule_applies"],
        "kv_wide": proof["kv_wide_outcome"] + (f", {accepted(kv_wide)}" if kv_wide.get("ok") else ""),
        "kv_wide_lines": [_strip_pid(line) for line in kv_wide.get("error_lines", [])]
                         + ([_strip_pid(kv_wide["kv_assert_log"])] if kv_wide.get("kv_assert_log") else []),
        "partial_pair": (f"{accepted(partial)} ({partial['acceptance']['acceptance']:.2f})"
                         if partial.get("acceptance") else None),
    }
    if rows is not None:
        def verdict(env: str, draft: str) -> str:
            (r,) = [r for r in rows if r["env"] == env and r["draft"] == draft]
            return ",".join(p["code"] for p in r["problems"]) or "compatible"

        row["check_pair_no_gpu"] = {d: verdict("no-gpu", d) for d in ("draft-matching", "draft-wide", "draft-kv-wide")}
        row["check_pair_no_gpu_no_plugin"] = verdict("no-gpu-no-plugin", "draft-matching")
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--earlier", type=Path)
    parser.add_argument("--diag", type=Path)
    parser.add_argument("--date", default="2026-12-04")
    args = parser.parse_args()
    diag = json.loads(args.diag.read_text()) if args.diag else None
    table = []
    for out in sorted(args.dir.glob("*/out"), key=lambda p: tuple(int(x) for x in p.parent.name.split("."))):
        release = out.parent.name
        proof = json.loads((out / "proof.json").read_text())
        check = json.loads((out / "check-pair-nogpu.json").read_text()) if (out / "check-pair-nogpu.json").exists() \
            else None
        rows = check_pair_rows(check) if check else None
        claims = proof["claims"]
        matrix = matrix_row(proof, rows)
        logs = (out / "proof-logs.txt").read_text(errors="replace") if (out / "proof-logs.txt").exists() else ""
        where = re.search(r'File "[^"]*/(vllm/v1/core/kv_cache_utils\.py)", line (\d+), '
                          r"in unify_kv_cache_spec_page_size\n(?:\(EngineCore[^)]*\))?\s*(assert [^\n]+)", logs)
        if where:
            matrix["kv_wide_assert"] = f"{where[1]}:{where[2]}: {where[3].strip()}"
        report: dict[str, Any] = {
            "what": f"GPU lane matrix, vLLM {release}: scripts/gpu (prepare.sh {release}; device.sh start {release} "
                    "with CHECKPAIR=1; collect), every release of the run at once on one H200, each in its own venv",
            "release": release, "date": proof["date"], "device": proof["device"], "torch": proof["torch"],
            "cuda": proof["cuda"], "python": proof["python"], "transformers": proof["transformers"],
            "matrix": matrix,
            "claims": claims, "all_hold": proof["all_hold"],
            "fix_claims_hold": all(v for k, v in claims.items() if k != NUMERICS_CLAIM),
            "numerics_note": None if claims.get(NUMERICS_CLAIM, True) else (
                "the partial pair's speculative output departs from no speculation where two tokens tie exactly in "
                "bf16 in the no-speculation pass (diag_partial.py on 0.26.0, see docs/gpu-matrix.md); the same "
                "position on every release"),
            "proof": {k: v for k, v in proof.items() if k not in ("engines", "claims", "all_hold")}
                     | {"engines": slim_engines(proof["engines"])},
            "check_pair": {k: v for k, v in check.items() if k != "results"} | {"results": rows} if check else None,
        }
        if args.earlier and (args.earlier / release / "out" / "proof-stdout.txt").exists():
            text = (args.earlier / release / "out" / "proof-stdout.txt").read_text(errors="replace")
            check_text = (args.earlier / release / "out" / "checkpair-stdout.txt").read_text(errors="replace")
            report["earlier_run"] = {
                "note": "the same day's first run (six releases, no partial pair): only its stdout came back",
                "claims": stdout_claims(text),
                "lines": [line for line in text.splitlines() if line.startswith(("vLLM ", "probe vs"))],
                "check_pair_table": [line for line in check_text.splitlines()
                                     if line.startswith(("env", "gpu", "no-gpu"))],
            }
        if diag and release == "0.26.0":
            report["partial_pair_diag"] = {k: v for k, v in diag.items() if k != "runs"}
        path = ROOT / "bench" / "results" / f"gpu-lane-matrix-{release}-{args.date}.json"
        path.write_text(json.dumps(report, indent=1) + "\n")
        table.append((report["matrix"], path.name, report["fix_claims_hold"]))
    print("| release | plugin | without the plugin | with the plugin | probe OK / FAIL | KV-wide draft | "
          "dflash-check-pair, no GPU (matching, wide, KV-wide; no plugin) | result |")
    print("|---|---|---|---|---|---|---|---|")
    for row, name, hold in table:
        cp = row.get("check_pair_no_gpu", {})
        print(f"| {row['release']} | {'patches' if row['plugin_patches'] else 'no-op'} | "
              f"`{row['without_plugin']}` | {row['with_plugin']} | "
              f"`{(row['probe_ok'] or '')[:60]}` / `{(row['probe_fail'] or '')[:60]}` | {row['kv_wide']} | "
              f"{cp.get('draft-matching')}, {cp.get('draft-wide')}, {cp.get('draft-kv-wide')}; "
              f"{row.get('check_pair_no_gpu_no_plugin')} | `{name}` ({'holds' if hold else 'FAILS'}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
