"""Is every watch stream alive? The liveness endpoint's answer.

A watch can wedge without an error: the connection stays open (a dead load balancer, a half-closed TCP session, an
API server that accepts and never answers) and the operator simply stops hearing about changes. kopf 1.45 already
drops a stream that hears nothing for `settings.watching.inactivity_timeout` (70 s) and sends a new watch request.
What it cannot do is notice that the new requests go unanswered too. Here every stream's last sign of life is kept:
an answer to one of its watch requests, an object, a bookmark, the end of its initial listing. A healthy stream shows
one at least every 70 s even when nothing changes (the API server answers each reopening; bookmarks are not sent for
every resource: the CRD stream of the test plane went 91 s without one). The liveness probe fails once a stream has
been silent for longer than that while the API server answers other requests: then a restart (a fresh process, fresh
connections, a fresh listing) is the cure. While the API server does not answer at all, a restart would cure nothing;
the probe stays healthy and kopf keeps retrying.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from dflash_operator.runtime.kopf_internals import kopf_api, kopf_watching

Clock = Callable[[], float]


def silent_streams(last_heard: Mapping[str, float], now: float, limit: float) -> dict[str, float]:
    """Streams silent for longer than `limit` seconds, with how long each has been silent."""
    return {stream: now - heard for stream, heard in last_heard.items() if now - heard > limit}


def stream_name(resource: Any, namespace: str | None) -> str:
    return f"{resource.plural}.{resource.group or 'core'} " + (f"in {namespace}" if namespace else "cluster-wide")


class WatchActivity:
    """The last time each open watch stream of this process heard anything. Thread-safe: kopf's event loop writes,
    the probe (a worker thread) reads. A stream is named for people and known by its URL path to the answers."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last_heard: dict[str, float] = {}
        self._names_by_path: dict[str, str] = {}

    def opened(self, stream: str, path: str) -> None:
        with self._lock:
            self._names_by_path[path] = stream
            self._last_heard[stream] = self._clock()  # its silence counts from here

    def heard(self, stream: str) -> None:
        with self._lock:
            self._last_heard[stream] = self._clock()

    def answered(self, path: str) -> None:
        """The API server answered a watch request on `path` (an open stream's reopening)."""
        with self._lock:
            stream = self._names_by_path.get(path)
            if stream is not None:
                self._last_heard[stream] = self._clock()

    def closed(self, stream: str, path: str) -> None:
        with self._lock:
            self._last_heard.pop(stream, None)
            self._names_by_path.pop(path, None)

    def streams(self) -> int:
        with self._lock:
            return len(self._last_heard)

    def silent(self, limit: float) -> dict[str, float]:
        with self._lock:
            return silent_streams(self._last_heard, self._clock(), limit)


def observe_kopf_watches(activity: WatchActivity,
                         trim: Callable[[str, Any], None] = lambda plural, event: None) -> None:
    """Every watch stream kopf opens from now on reports to `activity`: its events through kopf's stream function,
    the answers to its watch requests through kopf's request function. kopf offers no hook for either (its handlers
    never see bookmarks or reconnections), so both are wrapped in place; idempotent. `trim(plural, event)` may
    shed, in place, what no handler reads from each event before kopf queues it."""
    original_watch = getattr(kopf_watching.continuous_watch, "__wrapped_by_dflash__", kopf_watching.continuous_watch)
    original_request = getattr(kopf_api.request, "__wrapped_by_dflash__", kopf_api.request)

    async def continuous_watch(*, resource: Any, namespace: Any, **kwargs: Any) -> AsyncIterator[Any]:
        stream, path = stream_name(resource, namespace), url_path(resource.get_url(namespace=namespace))
        activity.opened(stream, path)
        try:
            async for event in original_watch(resource=resource, namespace=namespace, **kwargs):
                activity.heard(stream)
                trim(resource.plural, event)
                yield event
        finally:
            activity.closed(stream, path)

    async def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = await original_request(method, url, *args, **kwargs)
        if "watch=true" in url:
            activity.answered(url_path(url))
        return response

    continuous_watch.__wrapped_by_dflash__ = original_watch  # type: ignore[attr-defined]
    request.__wrapped_by_dflash__ = original_request  # type: ignore[attr-defined]
    kopf_watching.continuous_watch = continuous_watch
    kopf_api.request = request


def url_path(url: str) -> str:
    return url.partition("?")[0]


def verdict(activity: WatchActivity, limit: float, api_answers: Callable[[], bool]) -> dict[str, Any]:
    """The probe's result; raises WatchWedged when a stream is silent past `limit` while the API server answers.
    The API server is asked only when a stream is silent: a healthy probe costs no request."""
    silent = activity.silent(limit)
    if not silent:
        return {"watchStreams": activity.streams()}
    if not api_answers():
        return {"watchStreams": activity.streams(), "apiServer": "not answering; the watches keep retrying"}
    worst = max(silent, key=silent.__getitem__)
    raise WatchWedged(f"{len(silent)} watch stream(s) silent while the API server answers: {worst} heard nothing "
                      f"for {silent[worst]:.0f} s (limit {limit:.0f} s)")


class WatchWedged(Exception):
    """A watch stream is silent while the API server answers."""
