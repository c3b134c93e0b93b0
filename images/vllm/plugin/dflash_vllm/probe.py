"""Startup/readiness probe that proves a vLLM server speculates, not just that it is up.

`/health` answers 200 as soon as the engine runs, whether or not the draft model does anything. This probe sends
one short greedy completion to the local OpenAI server and passes only when
  1. the server answers it with a completion,
  2. speculation was active for it: the response's per-request `metrics.speculative_decoding` (vLLM >= 0.29 with
     `--per-request-spec-decode-metrics summary`) or else the `vllm:spec_decode_*` counters on /metrics, read
     before and after, show draft tokens, and
  3. the acceptance rate (accepted / draft tokens) is at least `--min-acceptance`.
With `--no-speculation` (the operator's Fallback: the target served without its draft) only check 1 applies.
It prints one line, `OK ...` or `FAIL <check>: ...`, and exits 0 or 1. Stdlib only, so it runs in any image with
vLLM >= 0.20 and in tests without vLLM. The counters are server-wide: concurrent traffic during the probe is
counted too, which can only add real speculation; per-request metrics, when enabled, are exact.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
_SAMPLE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class ProbeFailure(Exception):
    """A failed check; str() is the part after `FAIL `."""


@dataclass(frozen=True)
class SpecCounters:
    """Server-wide speculative-decoding counters at one instant (zeros when vLLM exports none)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0


@dataclass(frozen=True)
class SpecStats:
    """Speculation attributed to the probe's request."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    source: str  # "response" (per-request metrics) or "metrics" (counter deltas)

    @property
    def acceptance(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        # Tokens per verify step: the bonus token plus the accepted draft tokens.
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 1.0


@dataclass
class Result:
    ok: bool
    line: str
    check: str  # "ok", "completion", "metrics", "speculation", "acceptance"
    latency_s: float = 0.0
    completion_tokens: int | None = None
    stats: dict[str, Any] | None = None


def parse_counters(text: str, model: str | None = None) -> SpecCounters:
    """Sums the three spec-decode counters over engines; samples for another model_name are ignored."""
    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED_TOKENS: 0.0}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] not in totals:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        if model is not None and labels.get("model_name", model) != model:
            continue
        totals[match["name"]] += float(match["value"])
    return SpecCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS])


def stats_from_counters(before: SpecCounters, after: SpecCounters) -> SpecStats:
    return SpecStats(
        drafts=after.drafts - before.drafts,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted_tokens=after.accepted_tokens - before.accepted_tokens,
        source="metrics",
    )


def stats_from_response(body: dict[str, Any]) -> SpecStats | None:
    """Per-request spec-decode metrics of a completion response, None when the server does not report them."""
    spec = (body.get("metrics") or {}).get("speculative_decoding")
    if not isinstance(spec, dict):
        return None
    return SpecStats(
        drafts=float(spec["num_spec_steps"]),
        draft_tokens=float(spec["num_draft_tokens"]),
        accepted_tokens=float(spec["num_accepted_draft_tokens"]),
        source="response",
    )


def completion_tokens(body: dict[str, Any]) -> int:
    """Generated token count of a completion response; raises ProbeFailure when it holds no completion."""
    choices = body.get("choices")
    if not choices or not isinstance(choices[0].get("text"), str):
        raise ProbeFailure(f"completion: response has no completion text: {json.dumps(body)[:200]}")
    tokens = int((body.get("usage") or {}).get("completion_tokens") or 0)
    if tokens <= 0:
        raise ProbeFailure("completion: server generated 0 tokens")
    return tokens


def judge(stats: SpecStats, min_acceptance: float, before: SpecCounters | None = None,
          after: SpecCounters | None = None) -> tuple[bool, str, str]:
    """(ok, check, line) for the speculation seen during the probe."""
    if stats.draft_tokens <= 0:
        if before is not None and after is not None:
            seen = f"draft tokens {before.draft_tokens:g} -> {after.draft_tokens:g} during the probe"
        else:
            seen = f"the response reports {stats.draft_tokens:g} draft tokens"
        return False, "speculation", f"FAIL speculation not active: {seen}"
    counts = f"{stats.accepted_tokens:g} of {stats.draft_tokens:g} draft tokens accepted"
    if stats.acceptance < min_acceptance:
        return False, "acceptance", (
            f"FAIL acceptance {stats.acceptance:.2f} < floor {min_acceptance:.2f}: {counts}"
        )
    return True, "ok", (
        f"OK acceptance {stats.acceptance:.2f} >= floor {min_acceptance:.2f} ({counts} in {stats.drafts:g} drafts), "
        f"mean accepted length {stats.mean_accepted_length:.2f} [{stats.source}]"
    )


def describe_error(exc: BaseException, url: str, path: str, timeout: float) -> str:
    """One readable reason for a failed HTTP exchange with `url` (the server) on `path`."""
    if isinstance(exc, urllib.error.HTTPError):
        body = exc.read().decode("utf-8", "replace")[:200]
        return f"HTTP {exc.code} from {path}: {body}"
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"timed out after {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return f"server unreachable at {url}: connection refused"
    return f"server unreachable at {url}: {reason}"


class _Client:
    """HTTP against one server under one deadline shared by every request of the probe."""

    def __init__(self, base_url: str, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        # No proxies: the server is local, and an HTTP(S)_PROXY in the pod's env must not carry probe traffic.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def request(self, check: str, path: str, payload: dict[str, Any] | None = None) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise ProbeFailure(f"{check}: timed out after {self.timeout:g} s")
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(self.base_url + path, data=data,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with self.opener.open(req, timeout=remaining) as resp:
                body = resp.read()
        except (urllib.error.URLError, OSError) as exc:
            raise ProbeFailure(f"{check}: {describe_error(exc, self.base_url, path, self.timeout)}") from exc
        # urllib's timeout bounds each socket operation, not the exchange: enforce the budget as a whole.
        if time.monotonic() > self.deadline:
            raise ProbeFailure(f"{check}: timed out after {self.timeout:g} s")
        return body

    def json(self, check: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        raw = self.request(check, path, payload)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ProbeFailure(f"{check}: {path} did not answer JSON: {raw[:200]!r}") from exc

    def counters(self, model: str) -> SpecCounters:
        return parse_counters(self.request("metrics", "/metrics").decode("utf-8", "replace"), model)


def run(args: argparse.Namespace) -> Result:
    start = time.monotonic()
    client = _Client(args.url, args.timeout)
    tokens: int | None = None
    try:
        model = args.model
        if model is None:
            models = client.json("completion", "/v1/models").get("data") or []
            if not models:
                raise ProbeFailure("completion: /v1/models lists no model")
            model = models[0]["id"]
        if args.no_speculation:
            return _plain(client, model, args, start)
        before = client.counters(model)
        body = client.json("completion", "/v1/completions", {
            "model": model, "prompt": args.prompt, "max_tokens": args.max_tokens,
            # Greedy and a fixed length: a model that hits EOS at once would leave nothing to speculate on.
            "temperature": 0, "ignore_eos": True,
        })
        tokens = completion_tokens(body)
        stats = stats_from_response(body)
        if stats is None:
            after = _await_counters(client, model, before, args.stats_wait)
            stats = stats_from_counters(before, after)
            ok, check, line = judge(stats, args.min_acceptance, before, after)
        else:
            ok, check, line = judge(stats, args.min_acceptance)
        return Result(ok, line, check, time.monotonic() - start, tokens, asdict(stats) | {
            "acceptance": stats.acceptance, "mean_accepted_length": stats.mean_accepted_length})
    except ProbeFailure as failure:
        check = str(failure).split(":", 1)[0]
        return Result(False, f"FAIL {failure}", check, time.monotonic() - start, tokens)


def _plain(client: _Client, model: str, args: argparse.Namespace, start: float) -> Result:
    """Check 1 alone: the server answers a real completion. Raises ProbeFailure like the speculative path."""
    body = client.json("completion", "/v1/completions", {
        "model": model, "prompt": args.prompt, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True})
    tokens = completion_tokens(body)
    return Result(True, f"OK {tokens} tokens generated without speculation (--no-speculation)", "ok",
                  time.monotonic() - start, tokens)


def _await_counters(client: _Client, model: str, before: SpecCounters, wait: float) -> SpecCounters:
    # The API server records an engine step's stats just after it hands that step's tokens to the request, so the
    # last step may land a moment after the response: poll briefly until the draft counter moves.
    until = time.monotonic() + wait
    while True:
        after = client.counters(model)
        if after.draft_tokens > before.draft_tokens or time.monotonic() >= until:
            return after
        time.sleep(0.05)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dflash-probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="vLLM OpenAI server base URL")
    parser.add_argument("--model", help="served model name (default: the first one in /v1/models)")
    parser.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog.")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds for the whole probe")
    parser.add_argument("--stats-wait", type=float, default=2.0,
                        help="seconds to wait for /metrics to reflect the completion")
    parser.add_argument("--min-acceptance", type=float, default=0.1,
                        help="lowest acceptable accepted/draft token ratio (0 only requires speculation)")
    parser.add_argument("--no-speculation", action="store_true",
                        help="the server runs without a draft: only check that it completes")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON to PATH")
    args = parser.parse_args(argv)
    if not 0 <= args.min_acceptance <= 1:
        parser.error("--min-acceptance must be within [0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    print(result.line, flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(asdict(result), out, indent=2)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
