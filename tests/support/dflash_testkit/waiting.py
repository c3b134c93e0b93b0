"""Polling with a failure message that says what was awaited, and reads that wait for an object to exist."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import kubernetes

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.25) -> T:
    """Polls until condition() returns something truthy; the failure says what was awaited and the last value."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value: {last!r}")


def found(read: Callable[[], T]) -> T | None:
    """What `read` returns, or None while the object does not exist yet (a 404), for wait_for to poll."""
    try:
        return read()
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return None
        raise
