"""The verdict a pair check prints (the operator's `check-pair --json`, the image's `dflash-check-pair`), sized for
Kubernetes' termination message."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dflash_cache.pairing.files import check_pair, read_config
from dflash_cache.pairing.layout import PairInputError, Problem, draft_layout


def verdict(problems: list[Problem], *, checked_by: str, vllm_version: str | None, draft_layout: str,
            notes: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON verdict both `dflash-operator check-pair --json` and the image's `dflash-check-pair` print."""
    return {"compatible": not problems, "problems": [p.to_dict() for p in problems], "checked_by": checked_by,
            "vllm_version": vllm_version, "draft_layout": draft_layout, "notes": list(notes)}


# Bytes Kubernetes keeps of a termination message, where the cache Job's check container leaves its verdict.
TERMINATION_LIMIT = 4096


def verdict_message(result: dict[str, Any]) -> str:
    """A verdict as compact JSON under Kubernetes' 4 KiB termination-message cap: notes, then long messages are cut,
    then trailing problems dropped; `compatible` and the first problem always survive."""
    def text(v: dict[str, Any]) -> str:
        return json.dumps(v, separators=(",", ":"))
    if len(text(result).encode()) < TERMINATION_LIMIT:
        return text(result)
    cut = {**result, "notes": [n[:300] for n in result.get("notes") or []][:3],
           "problems": [{**p, "message": str(p.get("message", ""))[:300]} for p in result.get("problems") or []]}
    while len(text(cut).encode()) >= TERMINATION_LIMIT and (cut["notes"] or len(cut["problems"]) > 1):
        (cut["notes"] or cut["problems"]).pop()
    return text(cut)


def main_check_pair(argv: Sequence[str] | None = None) -> int:
    """`dflash-operator check-pair TARGET_DIR DRAFT_DIR`: 0 compatible, 1 not, 2 unreadable input."""
    parser = argparse.ArgumentParser(prog="dflash-operator check-pair", description="check that a draft fits a target")
    parser.add_argument("target_dir", type=Path)
    parser.add_argument("draft_dir", type=Path)
    parser.add_argument("--num-speculative-tokens", type=int, default=None)
    parser.add_argument("--vllm-version", default=None,
                        help="the serving vLLM's version, for the rules that depend on it (e.g. 0.23.0)")
    parser.add_argument("--json", action="store_true", help="print {compatible, problems, ...} as one JSON object")
    args = parser.parse_args(argv)
    return report_pair(args.target_dir, args.draft_dir, args.num_speculative_tokens, args.vllm_version, args.json)


def report_pair(target_dir: Path, draft_dir: Path, num_speculative_tokens: int | None = None,
                vllm_version: str | None = None, as_json: bool = False) -> int:
    """Checks the pair and prints the verdict (plain lines or one JSON object): 0 compatible, 1 not, 2 unreadable."""
    try:
        problems = check_pair(target_dir, draft_dir, num_speculative_tokens, vllm_version=vllm_version)
        layout = draft_layout(read_config(draft_dir)).name
    except (PairInputError, OSError) as error:
        print(f"cannot check pair: {error}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(verdict(problems, checked_by="operator", vllm_version=vllm_version,
                                 draft_layout=layout)))
    else:
        for problem in problems:
            print(f"{problem.code}: {problem.message}")
        if not problems:
            print("compatible")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main_check_pair())
