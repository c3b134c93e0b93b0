"""The liveness check on watch streams: silence measured per stream, a verdict that asks the API server only when a
stream is silent, and the hook into the pinned kopf's watch loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dflash_operator.runtime.kopf_internals import Resource, kopf_api, kopf_watching
from dflash_operator.runtime.watch_health import (
    WatchActivity,
    WatchWedged,
    observe_kopf_watches,
    silent_streams,
    stream_name,
    verdict,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


DFDS = Resource("serving.dflash.dev", "v1alpha1", "dflashdeployments", namespaced=True)
PODS = Resource("", "v1", "pods", namespaced=True)


def test_silence_is_counted_per_stream_from_its_last_sign_of_life() -> None:
    assert silent_streams({"a": 10.0, "b": 50.0}, now=100.0, limit=60.0) == {"a": 90.0}
    assert silent_streams({"a": 40.0}, now=100.0, limit=60.0) == {}  # exactly the limit is not yet silent
    assert stream_name(DFDS, "ns") == "dflashdeployments.serving.dflash.dev in ns"
    assert stream_name(PODS, None) == "pods.core cluster-wide"


def test_a_stream_that_hears_again_or_is_answered_or_closes_is_no_longer_silent() -> None:
    clock = Clock()
    activity = WatchActivity(clock)
    activity.opened("a", "/api/v1/pods")
    activity.opened("b", "/api/v1/services")
    activity.opened("c", "/api/v1/secrets")
    clock.now += 100
    activity.heard("b")
    activity.answered("/api/v1/secrets")
    activity.answered("/api/v1/configmaps")  # no open stream: nothing changes
    assert activity.silent(90) == {"a": 100.0}
    activity.closed("a", "/api/v1/pods")
    activity.answered("/api/v1/pods")  # a late answer to a closed stream does not reopen it
    assert activity.silent(90) == {} and activity.streams() == 2


def test_verdict_asks_the_api_server_only_for_a_silent_stream_and_fails_only_when_it_answers() -> None:
    clock = Clock()
    activity = WatchActivity(clock)
    activity.opened("dfds in ns", "/apis/g/v1/namespaces/ns/dfds")
    asked: list[bool] = []

    def answers(value: bool):
        def ask() -> bool:
            asked.append(value)
            return value
        return ask

    assert verdict(activity, 300, answers(True)) == {"watchStreams": 1} and asked == []
    clock.now += 301
    assert verdict(activity, 300, answers(False)) == {
        "watchStreams": 1, "apiServer": "not answering; the watches keep retrying"}
    with pytest.raises(WatchWedged, match=r"dfds in ns heard nothing for 301 s \(limit 300 s\)"):
        verdict(activity, 300, answers(True))
    assert asked == [False, True]


def test_kopf_streams_report_each_event_each_answered_watch_request_and_their_close(
        monkeypatch: pytest.MonkeyPatch) -> None:
    events = [{"type": "ADDED"}, {"type": "BOOKMARK"}]
    requests: list[str] = []
    clock = Clock()

    async def fake_request(method: str, url: str, **_: Any) -> str:
        requests.append(url)
        return "response"

    async def fake_continuous_watch(**_: Any) -> AsyncIterator[dict]:
        for event in events:
            clock.now += 100
            assert activity.silent(90) != {}  # silent until the next event or answer
            if event["type"] == "BOOKMARK":
                await kopf_api.request("get", DFDS.get_url(namespace="ns", params={"watch": "true"}), settings=None)
            else:
                yield event
                continue
            assert activity.silent(90) == {}  # the answer to its watch request counted
            yield event

    monkeypatch.setattr(kopf_watching, "continuous_watch", fake_continuous_watch)
    monkeypatch.setattr(kopf_api, "request", fake_request)
    first = WatchActivity()
    observe_kopf_watches(first)
    activity = WatchActivity(clock)
    trimmed: list[tuple[str, Any]] = []
    # Installing again replaces the hooks: reports go to the latest only; each event passes its trim first.
    observe_kopf_watches(activity, trim=lambda plural, event: trimmed.append((plural, event)))
    seen_while_open: list[int] = []

    async def consume() -> list[dict]:
        out = []
        async for event in kopf_watching.continuous_watch(resource=DFDS, namespace="ns", settings=None,
                                                          operator_pause_waiter=None):
            seen_while_open.append(activity.streams())
            out.append(event)
        return out

    assert asyncio.run(consume()) == events
    assert requests == ["/apis/serving.dflash.dev/v1alpha1/namespaces/ns/dflashdeployments?watch=true"]
    assert seen_while_open == [1, 1] and activity.streams() == 0 and first.streams() == 0
    assert trimmed == [("dflashdeployments", event) for event in events]
