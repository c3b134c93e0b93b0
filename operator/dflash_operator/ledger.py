"""What this operator process has written and not yet seen come back through its watches.

The indexes lag a write by one watch event. Without a memory of its own writes, a second pass that starts before
that event arrives (a child's event right after the CR's) would apply the same child or write the same status
again: a wasted request each time. The ledger closes that gap; it never hides drift, because an object the
indexes do show is always compared as observed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def object_key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: dict[ObjectKey, str] = {}
        # DFlashDeployment uid -> the status this process last wrote. The operator is status's only writer, so this
        # is the server's status even while the watch still shows an older one.
        self._status: dict[str, dict[str, Any]] = {}
        # DFlashDeployment uid -> the generation whose serving Deployment passed the API server's dry run.
        self._preflighted: dict[str, int] = {}

    def applied_unseen(self, obj: dict[str, Any]) -> bool:
        """True when exactly this object was applied and the watch has not shown it (nor its deletion) yet."""
        with self._lock:
            return self._applied.get(object_key(obj)) == fingerprint(obj)

    def record_apply(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._applied[object_key(obj)] = fingerprint(obj)

    def forget(self, key: ObjectKey) -> None:
        """The object was deleted: the next pass must apply it again."""
        with self._lock:
            self._applied.pop(key, None)

    def last_status(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            return self._status.get(uid)

    def record_status(self, uid: str, status: dict[str, Any]) -> None:
        with self._lock:
            self._status[uid] = status

    def preflighted(self, uid: str, generation: int) -> bool:
        with self._lock:
            return self._preflighted.get(uid) == generation

    def record_preflight(self, uid: str, generation: int) -> None:
        with self._lock:
            self._preflighted[uid] = generation

    def forget_owner(self, uid: str) -> None:
        with self._lock:
            self._status.pop(uid, None)
            self._preflighted.pop(uid, None)
