"""Freed heap pages go back to the system: the operator's RSS falls after a burst instead of staying at its peak."""

from __future__ import annotations

from pathlib import Path

from dflash_operator.runtime.memory import release_free_memory


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_freed_below_a_live_object_is_returned_by_the_trim() -> None:
    # 200 MiB of 4 KiB strings (glibc's heap, not Python's small-object arenas), then all freed but the last one,
    # which pins the top of the heap: free() alone cannot shrink it, the trim returns the pages under it.
    burst = [bytes(4096) + str(i).encode() for i in range(50_000)]
    keeper = burst[-1]
    del burst
    before = rss_mib()
    assert release_free_memory() is True  # glibc on this machine
    after = rss_mib()
    assert before - after > 100, (before, after)
    assert keeper
