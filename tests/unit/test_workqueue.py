"""The reconcile work queue: each key at most once in the queue, never two passes of one key at once, a key added
during its own pass runs once more, and a failing pass leaves its thread working."""

from __future__ import annotations

import threading
import time

from dflash_operator.reconcile.workqueue import WorkQueue


def wait_until(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_burst_of_events_for_one_key_is_one_pass_and_each_key_is_passed() -> None:
    passes: list[str] = []
    release = threading.Event()

    def handle(key) -> None:
        release.wait()
        passes.append(key)

    queue = WorkQueue(handle, threads=1)
    queue.start()
    queue.add("first")                     # taken at once; its pass waits for the release
    wait_until(lambda: queue.depth() == 0)
    for _ in range(100):
        queue.add("burst")                 # one entry, however many events
    queue.add("other")
    assert queue.depth() == 2
    release.set()
    wait_until(lambda: len(passes) == 3)
    time.sleep(0.05)
    assert passes == ["first", "burst", "other"]


def test_a_key_added_during_its_own_pass_runs_again_after_it_never_beside_it() -> None:
    running, overlaps, count = set(), [], []
    entered, release = threading.Event(), threading.Event()
    lock = threading.Lock()

    def handle(key) -> None:
        with lock:
            if key in running:
                overlaps.append(key)
            running.add(key)
        if not count:
            entered.set()
            release.wait()
        count.append(key)
        with lock:
            running.discard(key)

    queue = WorkQueue(handle, threads=4)
    queue.start()
    queue.add("k")
    entered.wait(5)
    queue.add("k")                         # the object changed while its pass ran: one more pass, after it
    queue.add("k")
    time.sleep(0.05)
    assert count == [] and overlaps == []  # no second thread took it meanwhile
    release.set()
    wait_until(lambda: len(count) == 2)
    time.sleep(0.05)
    assert count == ["k", "k"] and overlaps == []


def test_a_failing_pass_does_not_end_its_thread() -> None:
    passes: list[str] = []

    def handle(key) -> None:
        if key == "bad":
            raise RuntimeError("boom")
        passes.append(key)

    queue = WorkQueue(handle, threads=1)
    queue.start()
    queue.add("bad")
    queue.add("good")
    wait_until(lambda: passes == ["good"])
