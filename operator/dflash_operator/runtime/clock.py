"""The operator's clock, passed in: a pass reads the time only through one of these, so a test gives it its own
times instead of patching the time module."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rfc3339(moment: datetime.datetime) -> str:
    """A time as Kubernetes writes times: UTC, whole seconds, a Z."""
    return moment.astimezone(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_rfc3339(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Clock:
    # Seconds that only ever grow (the acceptance window's readings); never a date.
    monotonic: Callable[[], float] = time.monotonic
    # The date written into status (transition times, a fallback's start).
    now: Callable[[], datetime.datetime] = field(default=_utc_now)

    def rfc3339(self) -> str:
        """now() as Kubernetes writes times."""
        return rfc3339(self.now())


SYSTEM_CLOCK = Clock()
