"""Whether an object on the server already says everything the operator wants it to say.

The operator applies a child only when it differs, so an unchanged world costs no write. "Says everything" is a
subset test: the server adds defaults, status and other managers' fields, none of which is drift.
"""

from __future__ import annotations

from typing import Any

# Keys that identify an item in the lists the operator renders (ownerReferences by uid, containers by name, ...).
_ITEM_KEYS = ("uid", "name", "type", "containerPort", "port", "key")


def _item_key(item: Any) -> tuple[str, Any] | None:
    if isinstance(item, dict):
        for key in _ITEM_KEYS:
            if key in item:
                return key, item[key]
    return None


def covers(observed: Any, desired: Any) -> bool:
    """True when `observed` holds every field and value of `desired` (dicts by key, keyed lists by item key,
    other lists item by item and of the same length)."""
    if isinstance(desired, dict):
        return isinstance(observed, dict) and all(
            key in observed and covers(observed[key], value) for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(observed, list):
            return False
        keys = [_item_key(item) for item in desired]
        if desired and all(keys):
            found = {_item_key(item): item for item in observed}
            return all(key in found and covers(found[key], item) for key, item in zip(keys, desired, strict=True))
        return len(observed) == len(desired) and all(covers(o, d) for o, d in zip(observed, desired, strict=True))
    # Numbers the server normalises (an int port it keeps as int, a quantity string it keeps as written).
    return bool(observed == desired)
