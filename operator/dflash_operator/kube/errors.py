"""The API server's answers to a refused request, read from its Status body (kind Status, reason, details.causes).

The kubernetes client raises ApiException with the HTTP status and the raw body; what a pass decides on (exists
already, refused as invalid, namespace going away) is in the body, so it is read here, once, for every caller."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.rest import ApiException


def status_body(error: ApiException) -> dict[str, Any]:
    """The Status object the API server answered with, or {} when the body is not one."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def api_reason(error: ApiException) -> str:
    """The Status object's machine-readable reason (AlreadyExists, Invalid, ...), or '' when the body has none."""
    return str(status_body(error).get("reason") or "")


def api_message(error: ApiException) -> str:
    """The Status object's message for people, or the HTTP reason phrase when the body has none."""
    return str(status_body(error).get("message", error.reason))


def already_exists(error: ApiException) -> bool:
    """A create found the object there (watch lag, a restart): apply it instead."""
    return error.status == 409 and api_reason(error) == "AlreadyExists"


def namespace_terminating(error: ApiException) -> bool:
    """A write refused because its namespace is being deleted: nothing to do, the garbage collector follows."""
    causes = (status_body(error).get("details") or {}).get("causes") or []
    return error.status == 403 and any(c.get("reason") == "NamespaceTerminating" for c in causes)
