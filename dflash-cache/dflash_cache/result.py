"""The contract between the cache Job's two containers and the operator: exit codes and termination messages.

The init container `fetch` (the operator image, `dflash_cache.fetch`) writes a CacheResult as JSON to its
termination message; then the container `check-pair` (the serving image) writes the serving vLLM's verdict on the
pair (`dflash-check-pair --output`, a PairVerdict). `cache_outcome` reads both back from the pod status. Both sides,
and the test helpers that stand in for the containers, use this module only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

EXIT_OK, EXIT_ERROR = 0, 1
# "Cached, but the pair is incompatible": a verdict, so the Job's podFailurePolicy fails it without retries.
INCOMPATIBLE_EXIT_CODE = 3
# "The hub has no such repository or revision (or this token cannot see it)": the same request gets the same answer,
# so the Job fails at once instead of retrying with back-off for minutes. A new revision in the spec is a new Job.
NOT_FOUND_EXIT_CODE = 4
# Exit codes that are answers, not accidents: the Job's podFailurePolicy fails the Job on them without retrying.
VERDICT_EXIT_CODES = (INCOMPATIBLE_EXIT_CODE, NOT_FOUND_EXIT_CODE)
TERMINATION_LIMIT = 4096  # bytes Kubernetes keeps of a termination message

FETCH_CONTAINER, CHECK_CONTAINER = "fetch", "check-pair"
# dflash-check-pair's exits that are verdicts (1 incompatible, 2 unreadable configs): the same files and image give
# the same answer, so the Job fails at once. A crash or an OOM kill (any other code) is retried.
CHECK_VERDICT_EXIT_CODES = (1, 2)
# What the check container leaves when the serving image has no dflash-check-pair (an image not built from
# images/vllm): the operator's own verdict, from the fetch container, stands, and status says so.
NO_CHECKER = "noChecker"


def _decode(message: str) -> dict[str, Any] | str | None:
    """A termination message as one of ours (a JSON object), else its last line (the runtime's own words, a crash's
    log tail), else None (empty, or JSON that is not an object)."""
    if not message.strip():
        return None
    try:
        data = json.loads(message)
    except ValueError:
        return message.strip().splitlines()[-1][:500]
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class CacheResult:
    ok: bool
    target_commit: str | None = None
    draft_commit: str | None = None
    # The draft's block size lets each deployment sharing this cache check its own num_speculative_tokens.
    draft_block_size: int | None = None
    problems: list[dict[str, str]] = field(default_factory=list)  # {"code", "message"} per incompatibility
    error: str | None = None

    def _json(self, problems: list[dict[str, str]], error: str | None) -> str:
        return json.dumps({"ok": self.ok, "targetCommit": self.target_commit, "draftCommit": self.draft_commit,
                           "draftBlockSize": self.draft_block_size, "problems": problems, "error": error},
                          separators=(",", ":"))

    def to_message(self) -> str:
        """JSON under Kubernetes' 4 KiB cap: long messages are cut first, then trailing problems are dropped."""
        text = self._json(self.problems, self.error)
        if len(text.encode()) < TERMINATION_LIMIT:
            return text
        error = self.error if self.error is None or len(self.error) <= 1000 else self.error[:997] + "..."
        problems = [{"code": p["code"], "message": p["message"][:200]} for p in self.problems]
        while problems and len(self._json(problems, error).encode()) >= TERMINATION_LIMIT:
            problems.pop()
        return self._json(problems, error)

    @classmethod
    def from_message(cls, message: str) -> CacheResult | None:
        """The result in a termination message; a message that is not ours (the runtime's own, a crash) becomes
        an error result carrying its last line, and an empty one None."""
        data = _decode(message)
        if isinstance(data, str):
            return cls(ok=False, error=data)
        if data is None:
            return None
        block = data.get("draftBlockSize")
        return cls(
            ok=bool(data.get("ok")),
            target_commit=data.get("targetCommit"),
            draft_commit=data.get("draftCommit"),
            draft_block_size=block if isinstance(block, int) and not isinstance(block, bool) and block >= 1 else None,
            problems=[{"code": str(p.get("code", "")), "message": str(p.get("message", ""))}
                      for p in data.get("problems") or [] if isinstance(p, dict)],
            error=data.get("error") or None,
        )


def problem_dicts(problems: Sequence[Any]) -> list[dict[str, str]]:
    """Problems of the pairing check (objects with code and message) in the contract's shape."""
    return [{"code": str(p.code), "message": str(p.message)} for p in problems]


@dataclass(frozen=True)
class PairVerdict:
    """The serving image's verdict on the pair (`dflash-check-pair`), or why there is none."""

    compatible: bool
    problems: list[dict[str, str]] = field(default_factory=list)
    vllm_version: str | None = None
    draft_layout: str | None = None
    notes: list[str] = field(default_factory=list)
    # Set when the image could not judge (no dflash-check-pair, or it crashed): the operator's verdict stands.
    unavailable: str | None = None

    @classmethod
    def from_message(cls, message: str) -> PairVerdict | None:
        """The verdict in a termination message; a message that is not a verdict (a crash's log tail) becomes an
        unavailable verdict carrying its last line, and an empty one None."""
        data = _decode(message)
        if isinstance(data, str):
            return cls(compatible=False, unavailable=data)
        if data is None:
            return None
        if data.get(NO_CHECKER):
            return cls(compatible=False, unavailable=str(data[NO_CHECKER])[:500])
        version = data.get("vllm_version")
        return cls(
            compatible=bool(data.get("compatible")),
            problems=[{"code": str(p.get("code", "")), "message": str(p.get("message", ""))}
                      for p in data.get("problems") or [] if isinstance(p, dict)],
            vllm_version=str(version) if version else None,
            draft_layout=str(data["draft_layout"]) if data.get("draft_layout") else None,
            notes=[str(n) for n in data.get("notes") or []],
        )

