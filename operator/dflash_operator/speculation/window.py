"""Spec-decode figures over a recent window, from the counter readings of each serving pod.

vLLM's counters run from each engine's start, so figures read straight off them describe a pod's whole life: a draft
that stopped paying an hour ago would still look fine. The window keeps timestamped readings per pod and sums their
increases, the way Prometheus's increase() does: a counter that went down means the pod's vLLM restarted, and the new
reading is the increase since then. A pod that is gone (scaled down, replaced) keeps what it contributed until its
readings age out of the window.

Each read also samples every engine's running batch size (vllm:num_requests_running): over the window, the share of
reads at each batch size is the share of time the pods ran it, which weighs the draft-length recommendation by the
load the pods carry. A sample, not every step: one read per resync (30 s by default) gives a 600 s window 20 per pod.

State lives in the operator's memory only: after a restart the window refills within one window length, while the
decisions already taken (status.speculation.belowFloorSince, .fallback) are kept in status.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from dflash_operator.runtime.recent import RecentSet
from dflash_operator.speculation.counters import SpecCounters

PodKey = str  # pod name and address: a pod recreated under the same name gets a new address, or resets its counters


@dataclass(frozen=True)
class Reading:
    at: float  # monotonic seconds
    counters: SpecCounters
    running: tuple[int, ...] = ()  # each engine's running batch size at the read


@dataclass(frozen=True)
class WindowFigures:
    increase: SpecCounters  # summed over the pods' readings within the window
    pods: int               # pods with at least one reading in the window
    # Reads per running batch size within the window (every engine of every pod, one per read): the share of time
    # each batch size runs, sampled at the reads. An idle engine (0 running) runs no step, so it is counted apart.
    batch_sizes: Mapping[int, int] = field(default_factory=dict)
    idle_reads: int = 0


def increase(readings: list[Reading]) -> SpecCounters:
    """Counter increase across consecutive readings; any counter going down is a restart (the new values are the
    increase since it), as Prometheus's increase() reads a reset."""
    total = SpecCounters()
    for before, after in zip(readings, readings[1:], strict=False):
        total = total + (after.counters if _restarted(before.counters, after.counters) else
                         after.counters - before.counters)
    return total


def _restarted(before: SpecCounters, after: SpecCounters) -> bool:
    pairs = [(before.drafts, after.drafts), (before.draft_tokens, after.draft_tokens),
             (before.accepted_tokens, after.accepted_tokens),
             *zip(before.accepted_by_position, after.accepted_by_position, strict=False)]
    return any(b > a for b, a in pairs) or len(after.accepted_by_position) < len(before.accepted_by_position)


class PodWindows:
    """The readings of one DFlashDeployment's pods, for one epoch: what is being judged (the draft and the speculation
    settings, and each resume after a Fallback). Readings of an earlier epoch describe something else."""

    def __init__(self, epoch: str = "") -> None:
        self.epoch = epoch
        self._pods: dict[PodKey, deque[Reading]] = {}

    def record(self, at: float, readings: Mapping[PodKey, SpecCounters], span: float,
               running: Mapping[PodKey, tuple[int, ...]] | None = None) -> None:
        """Each pod's counters at `at`, with its engines' running batch sizes where they were read."""
        for pod, counters in readings.items():
            self._pods.setdefault(pod, deque()).append(Reading(at, counters, (running or {}).get(pod, ())))
        self._prune(at, span)

    def figures(self, at: float, span: float) -> WindowFigures | None:
        """The increase over [at - span, at]; None until some pod has two readings to compare."""
        start = at - span
        total, pods, compared = SpecCounters(), 0, False
        sizes: Counter[int] = Counter()
        for readings in self._pods.values():
            kept = _from_baseline(list(readings), start)
            if any(r.at >= start for r in kept):
                pods += 1
            if len(kept) >= 2:
                total, compared = total + increase(kept), True
            sizes.update(b for r in kept if r.at >= start for b in r.running)
        idle = sizes.pop(0, 0)
        return WindowFigures(total, pods, dict(sorted(sizes.items())), idle) if compared else None

    def _prune(self, at: float, span: float) -> None:
        start = at - span
        for pod in list(self._pods):
            kept = deque(_from_baseline(list(self._pods[pod]), start))
            if kept and kept[-1].at >= start:
                self._pods[pod] = kept
            else:
                del self._pods[pod]  # nothing of it left in the window


def _from_baseline(readings: list[Reading], start: float) -> list[Reading]:
    """The readings inside the window, plus the last one before it: the baseline the first increase is taken from."""
    inside = [i for i, r in enumerate(readings) if r.at >= start]
    if not inside:
        return readings[-1:]
    first = inside[0]
    return readings[max(0, first - 1):]


class Windows:
    """Every DFlashDeployment's windows, by uid; shared by the handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_owner: dict[str, PodWindows] = {}
        self._gone = RecentSet()

    def of(self, uid: str, epoch: str = "") -> PodWindows:
        """The owner's window; an empty one when the epoch changed (a resumed Fallback must not be judged again on
        the readings that caused it). A deleted owner's pass still in flight gets a window that is not kept."""
        with self._lock:
            if uid in self._gone:
                return PodWindows(epoch)
            window = self._by_owner.get(uid)
            if window is None or window.epoch != epoch:
                window = self._by_owner[uid] = PodWindows(epoch)
            return window

    def forget(self, uid: str) -> None:
        with self._lock:
            self._by_owner.pop(uid, None)
            self._gone.add(uid)  # uids are never reused; a pass begun before the delete may still ask for it
