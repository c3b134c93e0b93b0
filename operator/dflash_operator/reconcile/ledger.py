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
from collections.abc import Callable, Iterable
from typing import Any

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
# How often an object in trouble has its events read (a pod failing its readiness probe, a claim its provisioner
# cannot provision; the kubelet probes every 10 s): status needs the gist, not every failure.
EVENT_READ_SECONDS = 60.0
# A stalled cache claim whose events say nothing yet is asked again sooner: its provisioner's ProvisioningFailed comes
# seconds after the claim gets its node, and kept for a minute that first empty answer held the why back (kind,
# 2026-12-07: ClaimPending 81 s after apply). A DFlashDeployment has one claim, so this costs little; pods keep the
# minute even when their events say nothing (kwok's never-ready pods at scale, tests/cluster/test_capacity.py).
CLAIM_NOTHING_SAID_READ_SECONDS = 10.0


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def object_key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 as client-go's resourceversion.CompareResourceVersion; None where either is not a positive
    integer without leading zeros (then the versions are not comparable)."""
    if not all(v.isascii() and v.isdigit() and v[0] != "0" for v in (a, b)):
        return None
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: dict[ObjectKey, tuple[str, str]] = {}  # fingerprint, resourceVersion of the answer
        # DFlashDeployment uid -> the status this process last wrote. The operator is status's only writer, so this
        # is the server's status even while the watch still shows an older one.
        self._status: dict[str, dict[str, Any]] = {}
        # DFlashDeployment uid -> the generation whose serving Deployment passed the API server's dry run.
        self._preflighted: dict[str, int] = {}
        # DFlashDeployment uids whose namespace refused a create as NamespaceTerminating. A namespace being deleted
        # never comes back, and a DFlashDeployment never changes namespace: its passes are over until it is gone.
        self._namespace_going: set[str] = set()
        # DFlashDeployment uid -> object ("pod/NAME", "claim/NAME") -> (monotonic time of the read, what its events
        # said): an object in trouble has its events read at most once per EVENT_READ_SECONDS, only while in trouble.
        self._event_reads: dict[str, dict[str, tuple[float, str]]] = {}

    def recent_read(self, uid: str, key: str, now: float, read: Callable[[], str],
                    nothing_said_seconds: float = EVENT_READ_SECONDS) -> str:
        """What `read` says of the object `key`, read again only when no read of it is younger than
        EVENT_READ_SECONDS, or `nothing_said_seconds` when that read found nothing. Everything read is forgotten with
        its owner."""
        with self._lock:
            known = self._event_reads.get(uid, {}).get(key)
        if known is not None and now - known[0] < (EVENT_READ_SECONDS if known[1] else nothing_said_seconds):
            return known[1]
        said = read()
        with self._lock:
            self._event_reads.setdefault(uid, {})[key] = (now, said)
        return said

    def forget_reads(self, uid: str, kind: str, keep: Iterable[str]) -> None:
        """Drops what was read of this kind's objects ("pod", "claim") no longer in trouble (ready, bound, replaced,
        gone). Only that kind: a pass that looks at pods must not forget the claim's read, nor the reverse, or a
        DFlashDeployment with both in trouble would read both on every pass."""
        keep = set(keep)
        with self._lock:
            reads = self._event_reads.get(uid)
            if reads is None:
                return
            for key in [k for k in reads if k.startswith(f"{kind}/") and k not in keep]:
                del reads[key]
            if not reads:
                del self._event_reads[uid]

    def applied_unseen(self, obj: dict[str, Any]) -> bool:
        """True when exactly this object was applied and the watch has not shown it (nor its deletion) yet."""
        with self._lock:
            entry = self._applied.get(object_key(obj))
        return entry is not None and entry[0] == fingerprint(obj)

    def seen_before_own_apply(self, obj: dict[str, Any], seen: dict[str, Any]) -> bool:
        """True when `seen` (the watch's copy) predates this process's last apply of exactly `obj`: the watch has not
        delivered that apply yet, so applying again would only repeat it. Resource versions of one resource compare
        as integers (KEP-5504, stable in Kubernetes 1.35); where either does not parse, nothing is assumed."""
        with self._lock:
            entry = self._applied.get(object_key(obj))
        if entry is None or entry[0] != fingerprint(obj) or not entry[1]:
            return False
        order = compare_resource_versions(str((seen.get("metadata") or {}).get("resourceVersion") or ""), entry[1])
        return order is not None and order < 0

    def record_apply(self, obj: dict[str, Any], answer: dict[str, Any] | None = None) -> None:
        """`answer`: the object as the server returned it (its resourceVersion dates this apply)."""
        version = str(((answer or {}).get("metadata") or {}).get("resourceVersion") or "")
        entry = (fingerprint(obj), version)  # hashed outside the lock: eight reconcile threads share it
        with self._lock:
            self._applied[object_key(obj)] = entry

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

    def namespace_going(self, uid: str) -> bool:
        with self._lock:
            return uid in self._namespace_going

    def record_namespace_going(self, uid: str) -> None:
        with self._lock:
            self._namespace_going.add(uid)

    def forget_owner(self, uid: str) -> None:
        with self._lock:
            self._status.pop(uid, None)
            self._preflighted.pop(uid, None)
            self._namespace_going.discard(uid)
            self._event_reads.pop(uid, None)
