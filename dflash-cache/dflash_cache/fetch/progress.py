"""What the cache Job prints: one JSON progress line at a time (the operator reads the last one), secrets redacted."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dflash_cache.fetch.layout import ROLES


def progress_line(snapshot: dict[str, dict[str, int]], event: str = "progress", **extra: Any) -> str:
    """The JSON line the operator reads from the end of the pod log."""
    done = sum(s["bytesDone"] for s in snapshot.values())
    total = sum(s["bytesTotal"] for s in snapshot.values())
    percent = 100.0 if total == 0 else round(100.0 * done / total, 1)
    return json.dumps({"event": event, **snapshot, "percent": percent, **extra}, separators=(",", ":"))


def redactor(secret: str | None) -> Callable[[str], str]:
    if not secret:
        return lambda text: text
    return lambda text: text.replace(secret, "<redacted>")


# --- progress -----------------------------------------------------------------------------------------------------

@dataclass
class Progress:
    """Byte and file counters per role; `fetched` counts bytes received from the network by this run."""

    totals: dict[str, int]
    files_total: dict[str, int]
    done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROLES, 0))
    files_done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROLES, 0))
    fetched: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, role: str, count: int, *, network: bool = True) -> None:
        with self.lock:
            self.done[role] += count
            if network:
                self.fetched += count

    def discard(self, role: str, count: int) -> None:
        """Bytes counted as done that turned out unusable (server ignored Range, bad hash): done again later."""
        with self.lock:
            self.done[role] -= count

    def file_done(self, role: str) -> None:
        with self.lock:
            self.files_done[role] += 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self.lock:
            return {r: {"bytesDone": self.done[r], "bytesTotal": self.totals[r],
                        "filesDone": self.files_done[r], "filesTotal": self.files_total[r]} for r in ROLES}


class ProgressPrinter(threading.Thread):
    """Prints a progress line at most every `interval` seconds, or sooner when the percentage crosses a 5% step."""

    def __init__(self, progress: Progress, emit: Callable[[str], None], interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.progress, self.emit, self.interval = progress, emit, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        last_time, last_step = 0.0, -1
        while not self.stopped.wait(0.1):
            snap = self.progress.snapshot()
            done = sum(s["bytesDone"] for s in snap.values())
            total = sum(s["bytesTotal"] for s in snap.values()) or 1
            step = int(20 * done / total)
            now = time.monotonic()
            if step != last_step or now - last_time >= self.interval:
                self.emit(progress_line(snap))
                last_time, last_step = now, step

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def emit_redacted(line: str, redact: Callable[[str], str]) -> None:
    sys.stdout.write(redact(line) + "\n")
    sys.stdout.flush()
