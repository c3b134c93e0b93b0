"""Speculative-decoding figures and the running batch size, read from vLLM's Prometheus /metrics of the ready
serving pods."""

from __future__ import annotations

import ipaddress
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"  # label `position`, from 0
# A gauge, one sample per engine: the requests in its running batch at the read, the batch size that
# num_speculative_tokens_per_batch_size and the cost model key on.
RUNNING = "vllm:num_requests_running"


@dataclass(frozen=True)
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_by_position: tuple[float, ...] = ()

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(self.drafts + other.drafts, self.draft_tokens + other.draft_tokens,
                            self.accepted_tokens + other.accepted_tokens,
                            _by_position(self.accepted_by_position, other.accepted_by_position, 1.0))

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                            self.accepted_tokens - other.accepted_tokens,
                            _by_position(self.accepted_by_position, other.accepted_by_position, -1.0))

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        # vLLM's own definition: every target step yields one token plus the accepted draft tokens.
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def acceptance_by_position(self) -> list[float] | None:
        """vLLM's per-position rate: drafts whose token at that position was accepted, over all drafts."""
        if not self.drafts or not self.accepted_by_position:
            return None
        return [accepted / self.drafts for accepted in self.accepted_by_position]


def _by_position(a: tuple[float, ...], b: tuple[float, ...], sign: float) -> tuple[float, ...]:
    longest = max(len(a), len(b))
    a, b = a + (0.0,) * (longest - len(a)), b + (0.0,) * (longest - len(b))
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class PodMetrics:
    """One read of a serving pod's /metrics: its spec-decode counters, and each engine's running batch size."""

    counters: SpecCounters
    running: tuple[int, ...] = ()


def parse_pod_metrics(text: str) -> PodMetrics | None:
    """Sums the spec-decode counters over every engine and keeps each engine's running batch size; None when the
    server exposes no spec-decode counters (no speculation)."""
    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED_TOKENS: 0.0}
    by_position: dict[int, float] = {}
    running: list[int] = []
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
                seen = True
            elif sample.name == ACCEPTED_PER_POSITION and sample.labels.get("position", "").isdigit():
                position = int(sample.labels["position"])
                by_position[position] = by_position.get(position, 0.0) + sample.value
            elif sample.name == RUNNING and sample.value >= 0:
                running.append(round(sample.value))
    if not seen:
        return None
    positions = tuple(by_position.get(i, 0.0) for i in range(max(by_position) + 1)) if by_position else ()
    return PodMetrics(SpecCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS], positions),
                      tuple(running))


class AddressNotAllowed(ValueError):
    pass


def metrics_url(pod_ip: str, port: int, allowed: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str:
    """The pod's /metrics URL, refusing addresses outside the allowed networks (tests allow only loopback)."""
    address = ipaddress.ip_address(pod_ip)
    allowed = list(allowed)
    if allowed and not any(address in net for net in allowed):
        raise AddressNotAllowed(f"pod IP {pod_ip} is outside the allowed networks {[str(n) for n in allowed]}")
    host = f"[{pod_ip}]" if address.version == 6 else pod_ip
    return f"http://{host}:{port}/metrics"


def read_pod_metrics(url: str, timeout: float) -> PodMetrics | None:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - URL built by metrics_url
        return parse_pod_metrics(response.read().decode("utf-8", errors="replace"))
