"""The contract between the cache Job's program and the operator: exit codes and the termination message.

`dflash_operator.fetch` writes a CacheResult as JSON to the pod's termination message; `cache_outcome` reads it
back from the pod status. Both sides, and the test helpers that stand in for the program, use this module only.
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
        if not message.strip():
            return None
        try:
            data = json.loads(message)
        except ValueError:
            return cls(ok=False, error=message.strip().splitlines()[-1][:500])
        if not isinstance(data, dict):
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
