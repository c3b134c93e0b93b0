"""Keys of DFlashDeployments waiting for a reconcile pass, each queued at most once, taken by a fixed set of threads.

kopf used to run each pass in its per-object worker. When thousands of DFlashDeployments arrived at once, as many
workers waited for a thread of kopf's executor, each holding its event's body and kopf's per-call state: at 10,000
CRs applied at once that backlog, not the objects kept, set the operator's memory. Now kopf's handlers only add a
key (as controller-runtime's workqueue does), and a thread reads the object from the index when it takes the key:
a burst costs a set of keys, a run of events for one object becomes one pass, and a pass always sees the newest
copy. A key whose pass is running when it is added again is queued again once that pass ends (never two at once).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)


class WorkQueue:
    def __init__(self, handle: Callable[[Hashable], None], threads: int) -> None:
        self._handle, self._threads = handle, threads
        self._changed = threading.Condition()
        self._order: collections.deque[Hashable] = collections.deque()
        self._queued: set[Hashable] = set()
        self._running: set[Hashable] = set()
        self._again: set[Hashable] = set()  # added while its pass ran: queued once that pass ends

    def start(self) -> None:
        for number in range(self._threads):
            threading.Thread(target=self._work, name=f"reconcile-{number}", daemon=True).start()

    def add(self, key: Hashable) -> None:
        with self._changed:
            if key in self._running:
                self._again.add(key)
            else:
                self._enqueue(key)

    def depth(self) -> int:
        """Keys waiting for a thread."""
        with self._changed:
            return len(self._order)

    def _enqueue(self, key: Hashable) -> None:  # with self._changed held
        if key not in self._queued:
            self._queued.add(key)
            self._order.append(key)
            self._changed.notify()

    def _take(self) -> Hashable:
        with self._changed:
            self._changed.wait_for(lambda: bool(self._order))
            key = self._order.popleft()
            self._queued.discard(key)
            self._running.add(key)
            return key

    def _done(self, key: Hashable) -> None:
        with self._changed:
            self._running.discard(key)
            if key in self._again:
                self._again.discard(key)
                self._enqueue(key)

    def _work(self) -> None:
        while True:
            key = self._take()
            try:
                self._handle(key)
            except Exception:  # noqa: BLE001 - one object's failure must not end the thread
                log.exception("reconcile of %s failed", key)
            finally:
                self._done(key)
