"""Hands freed heap memory back to the operating system.

CPython frees objects into glibc's heap, which keeps the pages: after a burst (a thousand DFlashDeployments listed at
start-up, a wave of watch events) the operator's RSS stays at its high-water mark although the objects are gone.
glibc's malloc_trim(0) returns every free page, not only the heap's top. Measured with bench/scale.py at 1,000
DFlashDeployments: RSS empty / full / after 60 s idle 150 / 392 / 395 -> 89 / 333 / 318 MiB. A C library without
malloc_trim (musl) makes this a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Returns free heap pages to the system; False where the C library cannot (nothing done)."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
