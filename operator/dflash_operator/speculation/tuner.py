"""The draft length each load level should use, from measured acceptance and a measured cost table (issue 26).

Pure: figures in, a schedule out. Expected tokens per step with k draft tokens is E(k) = 1 + sum_{i<=k} p_i, where
p_i is the share of drafts whose i-th token was accepted; a step verifying k tokens at running batch size b costs
c(b, k) times a plain step. The schedule picks, per batch size, the k maximising E(k) / c(b, k), and 0 where nothing
pays by a margin: speculation that breaks even is not worth the draft's memory and the risk of being wrong.

A step that accepts more costs more (more tokens enter the KV cache and the sampler per step), so a cost model may
carry two tables: the random draft's (nothing accepted) and the all-accept draft's (all k accepted). Then c(b, k) is
the first plus (E(k) - 1) / k of the way to the second. On the lent H200 (vLLM 0.26.0, 2026-12-06) a partially
accepting pair's 28 cells (acceptance 0.04-0.58) were predicted within 15% by 17 of 28 this way against 14 of 28 by
the random table alone (median error 9.7% against 15.7%; the run's own spread was large, median ~27%).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# Candidates closer than this (relative) count as tied, so float noise from the interpolation cannot make a larger k
# win a tie that is exact on paper: the smaller k drafts less, which is cheaper in memory and when acceptance drops.
_TIE = 1e-9


@dataclass(frozen=True)
class CostModel:
    """Relative step time c(b, k) = t(b, k) / t(b, 0), measured on one GPU, vLLM version and model shape: `cost`
    with a draft that accepts nothing, and optionally `cost_all_accepted` with one that accepts every token."""

    gpu: str
    vllm_version: str
    model: str
    batch_sizes: tuple[int, ...]
    ks: tuple[int, ...]
    cost: Mapping[tuple[int, int], float] = field(repr=False)
    cost_all_accepted: Mapping[tuple[int, int], float] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _ascending("batchSizes", self.batch_sizes, least=1)
        _ascending("draftLengths", self.ks, least=0)
        if self.ks[0] != 0:
            raise ValueError(f"draftLengths must include 0 (the step without speculation), got {list(self.ks)}")
        self._check("relativeStepTime", self.cost)
        if self.cost_all_accepted is not None:
            self._check("relativeStepTimeAllAccepted", self.cost_all_accepted)

    def _check(self, name: str, table: Mapping[tuple[int, int], float]) -> None:
        for b in self.batch_sizes:
            for k in self.ks:
                if (b, k) not in table:
                    raise ValueError(f"{name} has no value for batch size {b}, draft length {k}")
                value = table[(b, k)]
                if not math.isfinite(value) or value <= 0:
                    raise ValueError(f"{name} at batch size {b}, draft length {k} must be a positive "
                                     f"number, got {value}")
            # The table is relative to the plain step: anything but 1.0 there means it was not normalised.
            if not math.isclose(table[(b, 0)], 1.0, rel_tol=1e-9):
                raise ValueError(f"{name} at batch size {b}, draft length 0 must be 1.0, got {table[(b, 0)]}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostModel:
        """From the committed/ConfigMap shape: camelCase keys, one row of relativeStepTime per batch size."""
        missing = [key for key in ("gpu", "vllmVersion", "model", "batchSizes", "draftLengths", "relativeStepTime")
                   if key not in data]
        if missing:
            raise ValueError(f"cost model is missing {', '.join(missing)}")
        for key in ("gpu", "vllmVersion", "model"):
            if not isinstance(data[key], str) or not data[key]:
                raise ValueError(f"cost model {key} must be a non-empty string, got {data[key]!r}")
        batch_sizes, ks = data["batchSizes"], data["draftLengths"]
        for key, values in (("batchSizes", batch_sizes), ("draftLengths", ks)):
            if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise ValueError(f"cost model {key} must be a list of integers, got {values!r}")
        all_accepted = data.get("relativeStepTimeAllAccepted")
        return cls(data["gpu"], data["vllmVersion"], data["model"], tuple(batch_sizes), tuple(ks),
                   _table("relativeStepTime", data["relativeStepTime"], batch_sizes, ks),
                   None if all_accepted is None else
                   _table("relativeStepTimeAllAccepted", all_accepted, batch_sizes, ks))

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "vllmVersion": self.vllm_version, "model": self.model,
                "batchSizes": list(self.batch_sizes), "draftLengths": list(self.ks),
                "relativeStepTime": [[self.cost[(b, k)] for k in self.ks] for b in self.batch_sizes],
                **({} if self.cost_all_accepted is None else {"relativeStepTimeAllAccepted": [
                    [self.cost_all_accepted[(b, k)] for k in self.ks] for b in self.batch_sizes]})}

    def at(self, b: int, k: int, accepted: float | None = None) -> float:
        """c(b, k) for any batch size b >= 1, with `accepted` draft tokens per step on average (E(k) - 1): the random
        table plus accepted / k of the way to the all-accepted one when the model has that table; the random table
        alone otherwise. Between measured batch sizes: linear in log2(b), as the grid is in powers of two and step
        time grows with the batch's work. Beyond the ends: the nearest measured row, not a trend drawn past what was
        measured. k must be a measured draft length: off-grid k is never guessed."""
        nothing_accepted = self._at(self.cost, b, k)
        if self.cost_all_accepted is None or accepted is None or k == 0:
            return nothing_accepted
        share = min(max(accepted / k, 0.0), 1.0)
        return nothing_accepted + share * (self._at(self.cost_all_accepted, b, k) - nothing_accepted)

    def _at(self, table: Mapping[tuple[int, int], float], b: int, k: int) -> float:
        if k not in self.ks:
            raise ValueError(f"the cost model has no measurement for draft length {k} (measured: {list(self.ks)})")
        if b < 1:
            raise ValueError(f"batch size must be at least 1, got {b}")
        sizes = self.batch_sizes
        if b <= sizes[0]:
            return table[(sizes[0], k)]
        if b >= sizes[-1]:
            return table[(sizes[-1], k)]
        hi = next(i for i, s in enumerate(sizes) if s >= b)
        lo_b, hi_b = sizes[hi - 1], sizes[hi]
        w = (math.log2(b) - math.log2(lo_b)) / (math.log2(hi_b) - math.log2(lo_b))
        return table[(lo_b, k)] + w * (table[(hi_b, k)] - table[(lo_b, k)])


def _table(name: str, rows: Any, batch_sizes: list[int], ks: list[int]) -> dict[tuple[int, int], float]:
    """One table of the committed/ConfigMap shape (a row per batch size, a value per draft length), checked."""
    if not isinstance(rows, list) or len(rows) != len(batch_sizes):
        raise ValueError(f"{name} must have one row per batch size ({len(batch_sizes)}), "
                         f"got {len(rows) if isinstance(rows, list) else repr(rows)}")
    table: dict[tuple[int, int], float] = {}
    for b, row in zip(batch_sizes, rows, strict=True):
        if not isinstance(row, list) or len(row) != len(ks):
            raise ValueError(f"{name} row for batch size {b} must have one value per draft length ({len(ks)}), "
                             f"got {row!r}")
        for k, value in zip(ks, row, strict=True):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"{name} at batch size {b}, draft length {k} must be a number, got {value!r}")
            table[(b, k)] = float(value)
    return table


def _ascending(name: str, values: tuple[int, ...], least: int) -> None:
    if not values:
        raise ValueError(f"{name} must not be empty")
    if values[0] < least:
        raise ValueError(f"{name} must be at least {least}, got {list(values)}")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"{name} must be strictly ascending, got {list(values)}")


def expected_tokens(p: Sequence[float], k: int) -> float:
    """E(k) = 1 + sum of p_1..p_k: the bonus token of the verify pass, plus each draft position's acceptance."""
    if k > len(p):
        raise ValueError(f"acceptance is known for {len(p)} draft positions, not {k}")
    return 1.0 + sum(p[:k])


def expected_speedup(p: Sequence[float], cost: CostModel, b: int, k: int) -> float:
    tokens = expected_tokens(p, k)
    return tokens / cost.at(b, k, accepted=tokens - 1.0)


@dataclass(frozen=True)
class ScheduleRange:
    from_batch_size: int
    to_batch_size: int
    k: int
    expected_speedup_low: float   # over the range's batch sizes, against no speculation
    expected_speedup_high: float


@dataclass(frozen=True)
class NoRecommendation:
    reason: Literal["TooFewDrafts", "NoAcceptanceByPosition"]
    message: str


@dataclass(frozen=True)
class Recommendation:
    ranges: tuple[ScheduleRange, ...]
    measured_k: int
    drafts: int
    gpu: str
    vllm_version: str
    model: str
    batch_sizes: tuple[int, ...]  # the cost model's measured sizes up to max_batch: weights()'s even default
    weighted_speedup: float | None  # traffic-weighted mean expected speedup; None without traffic

    def k_at(self, b: int) -> int:
        return _k_at(self.ranges, b)

    def weights(self, traffic: Mapping[int, float] | None) -> Mapping[int, float]:
        """What expected speedups are averaged over: the traffic when it is known, else the cost model's measured
        batch sizes evenly."""
        return traffic if traffic is not None else dict.fromkeys(self.batch_sizes, 1.0)

    def to_tokens_by_batch_size(self) -> list[dict[str, int]]:
        """spec.speculation.tokensByBatchSize's shape (and vLLM's num_speculative_tokens_per_batch_size rows)."""
        return [{"fromBatchSize": r.from_batch_size, "toBatchSize": r.to_batch_size, "numSpeculativeTokens": r.k}
                for r in self.ranges]


def _range_at(ranges: Sequence[ScheduleRange], b: int) -> int:
    """The index of the range a schedule runs at batch size b: its range, or the range below a gap (the API's rule,
    which also carries the last range on above it)."""
    below = [i for i, r in enumerate(ranges) if r.from_batch_size <= b]
    if not below:
        raise ValueError(f"the schedule has no range for batch size {b}: one range must start at 1")
    return max(below, key=lambda i: ranges[i].from_batch_size)


def _k_at(ranges: Sequence[ScheduleRange], b: int) -> int:
    """The k a schedule runs at batch size b (_range_at's range)."""
    return ranges[_range_at(ranges, b)].k


def recommend(p: Sequence[float], drafts: int, cost: CostModel, measured_k: int, *, min_drafts: int = 200,
              margin: float = 0.05, max_batch: int = 1024,
              traffic: Mapping[int, float] | None = None) -> Recommendation | NoRecommendation:
    """The schedule over batch sizes 1..max_batch maximising expected speedup, from the window's acceptance by
    position p (p[0] is position 1) over `drafts` drafts, proposed at `measured_k` tokens each."""
    if not p or measured_k < 1:
        return NoRecommendation("NoAcceptanceByPosition",
                                f"the window has no acceptance by draft position ({len(p)} positions, measured at "
                                f"{measured_k} draft tokens)")
    if len(p) < measured_k:
        raise ValueError(f"acceptance is given for {len(p)} positions, fewer than the measured {measured_k}")
    if any(not 0.0 <= x <= 1.0 for x in p[:measured_k]):
        raise ValueError(f"acceptance by position must lie in [0, 1], got {list(p[:measured_k])}")
    if drafts < min_drafts:
        return NoRecommendation("TooFewDrafts", f"the window has {drafts} drafts, fewer than the {min_drafts} a "
                                                "recommendation needs")
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    # Positions past measured_k were never proposed, so their acceptance is unknown: no k beyond it is a candidate.
    candidates = [k for k in cost.ks if k <= measured_k]
    chosen: list[tuple[int, float]] = []  # (k, speedup) for b = 1..max_batch
    for b in range(1, max_batch + 1):
        best_k, best = 0, 1.0
        for k in candidates[1:]:  # ascending, so only a strictly better larger k displaces a smaller one
            s = expected_speedup(p, cost, b, k)
            if s > best * (1 + _TIE):
                best_k, best = k, s
        chosen.append((best_k, best) if best >= 1.0 + margin else (0, 1.0))
    ranges: list[ScheduleRange] = []
    start = 1
    for b in range(2, max_batch + 2):  # close a range where k changes, and at the end
        if b > max_batch or chosen[b - 1][0] != chosen[start - 1][0]:
            speedups = [s for _, s in chosen[start - 1:b - 1]]
            ranges.append(ScheduleRange(start, b - 1, chosen[start - 1][0], min(speedups), max(speedups)))
            start = b
    weighted = None
    if traffic is not None:  # a batch size past max_batch runs the last range, as _k_at carries it on
        weighted = schedule_speedup(ranges, p, cost, traffic)
    return Recommendation(tuple(ranges), measured_k, drafts, cost.gpu, cost.vllm_version, cost.model,
                          tuple(b for b in cost.batch_sizes if b <= max_batch) or (1,), weighted)


def _weighted(speedup: Callable[[int], float], weights: Mapping[int, float]) -> float:
    """The mean of speedup(b) weighted by each batch size's share of steps (shares need not sum to 1)."""
    if any(b < 1 for b in weights) or any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise ValueError(f"traffic must map batch sizes >= 1 to non-negative shares, got {dict(weights)}")
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"traffic carries no steps: {dict(weights)}")
    return sum(speedup(b) * w for b, w in weights.items() if w > 0) / total


def traffic_shares(ranges: Sequence[ScheduleRange], traffic: Mapping[int, float]) -> list[float]:
    """Each range's share of the traffic's weight, each batch size counted in the range that runs it (_range_at)."""
    total = sum(traffic.values())
    if total <= 0:
        raise ValueError(f"traffic carries no steps: {dict(traffic)}")
    shares = [0.0] * len(ranges)
    for b, w in traffic.items():
        shares[_range_at(ranges, b)] += w
    return [share / total for share in shares]


def schedule_speedup(schedule: Sequence[ScheduleRange] | int, p: Sequence[float], cost: CostModel,
                     weights: Mapping[int, float]) -> float:
    """A schedule's expected speedup against no speculation (a static K is an int), weighted by `weights`."""

    def k_at(b: int) -> int:
        return schedule if isinstance(schedule, int) else _k_at(schedule, b)

    return _weighted(lambda b: expected_speedup(p, cost, b, k_at(b)), weights)


def gain_over(current: Sequence[ScheduleRange] | int, new: Recommendation, p: Sequence[float], cost: CostModel,
              traffic: Mapping[int, float] | None = None) -> float:
    """The new schedule's expected speedup over the running one (a static K is an int): traffic-weighted when the
    batch-size distribution is known, else an even mean over the cost model's measured batch sizes. An Auto mode
    applies `new` only when this exceeds its threshold."""
    weights = new.weights(traffic)
    return schedule_speedup(new.ranges, p, cost, weights) / schedule_speedup(current, p, cost, weights)
