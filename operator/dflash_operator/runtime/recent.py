"""A set that remembers only its most recent items: deleted owners, long enough for passes in flight to end."""

from __future__ import annotations

from collections import deque


class RecentSet:
    """The last `size` items added: remembers deleted owners long enough for their passes in flight to end."""

    def __init__(self, size: int = 10000) -> None:
        self._order: deque[str] = deque(maxlen=size)
        self._items: set[str] = set()

    def add(self, item: str) -> None:
        if item in self._items:
            return
        if len(self._order) == self._order.maxlen:
            self._items.discard(self._order[0])
        self._order.append(item)
        self._items.add(item)

    def __contains__(self, item: object) -> bool:
        return item in self._items
