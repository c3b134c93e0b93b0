"""The acceptance window: counter increases per pod, across restarts and scale-downs, and only within the window."""

from __future__ import annotations

from dflash_operator.speculation.counters import SpecCounters
from dflash_operator.speculation.window import PodWindows, Reading, Windows, increase


def c(drafts: float, draft_tokens: float, accepted: float, *positions: float) -> SpecCounters:
    return SpecCounters(drafts, draft_tokens, accepted, tuple(positions))


def test_increase_over_readings_counts_a_restart_from_zero() -> None:
    readings = [Reading(0, c(10, 40, 30)), Reading(30, c(20, 80, 50)),
                Reading(60, c(5, 20, 2)),   # vLLM restarted in between: 20 draft tokens since then
                Reading(90, c(10, 40, 4))]
    assert increase(readings) == c(10 + 5 + 5, 40 + 20 + 20, 20 + 2 + 2)


def test_the_window_forgets_what_happened_before_it() -> None:
    windows = PodWindows()
    windows.record(0, {"a": c(0, 0, 0)}, span=60)
    windows.record(30, {"a": c(100, 400, 400)}, span=60)     # a good hour...
    windows.record(60, {"a": c(100, 400, 400)}, span=60)
    windows.record(90, {"a": c(200, 800, 400)}, span=60)     # ...then nothing accepted
    windows.record(120, {"a": c(300, 1200, 400)}, span=60)
    figures = windows.figures(120, span=60)
    assert figures is not None and figures.increase == c(200, 800, 0) and figures.pods == 1
    assert figures.increase.acceptance_rate == 0.0
    # The counters since the pod started say 0.33: that is what the window is for.
    assert c(300, 1200, 400).acceptance_rate == 1 / 3


def test_a_pod_scaled_down_keeps_its_share_until_it_ages_out() -> None:
    windows = PodWindows()
    windows.record(0, {"a": c(0, 0, 0), "b": c(0, 0, 0)}, span=60)
    windows.record(30, {"a": c(10, 40, 40), "b": c(10, 40, 0)}, span=60)
    windows.record(45, {"a": c(20, 80, 80)}, span=60)   # b is gone
    figures = windows.figures(45, span=60)
    assert figures is not None and figures.increase == c(30, 120, 80) and figures.pods == 2
    windows.record(100, {"a": c(30, 120, 120)}, span=60)   # b's last reading (t=30) is out of the window now
    figures = windows.figures(100, span=60)
    assert figures is not None and figures.increase == c(20, 80, 80) and figures.pods == 1


def test_one_reading_is_no_figure_yet() -> None:
    windows = PodWindows()
    windows.record(0, {"a": c(10, 40, 40)}, span=60)
    assert windows.figures(0, span=60) is None


def test_per_position_counts_are_windowed_too() -> None:
    windows = PodWindows()
    windows.record(0, {"a": c(10, 30, 15, 8, 5, 2)}, span=60)
    windows.record(30, {"a": c(20, 60, 25, 16, 7, 2)}, span=60)
    figures = windows.figures(30, span=60)
    assert figures is not None and figures.increase.acceptance_by_position == [0.8, 0.2, 0.0]


def test_a_new_epoch_starts_the_window_afresh() -> None:
    windows = Windows()
    first = windows.of("uid", epoch="draft-a/")
    first.record(0, {"a": c(0, 0, 0)}, span=60)
    first.record(10, {"a": c(10, 40, 0)}, span=60)
    assert windows.of("uid", epoch="draft-a/") is first
    resumed = windows.of("uid", epoch="draft-a/1")   # the resume annotation was set
    assert resumed is not first and resumed.figures(10, span=60) is None


def test_a_restart_seen_in_any_counter_is_a_restart() -> None:
    # vLLM restarted between the readings and proposed more draft tokens since than before: only the accepted
    # count shows the reset. Read as a difference, acceptance would come out negative.
    readings = [Reading(0, c(10, 80, 70)), Reading(30, c(15, 100, 20))]
    assert increase(readings) == c(15, 100, 20)
    assert increase(readings).acceptance_rate == 0.2


def test_the_running_batch_sizes_of_every_engine_are_counted_within_the_window_and_idle_apart() -> None:
    windows = PodWindows()
    windows.record(0, {"a": c(0, 0, 0)}, span=60, running={"a": (32,)})           # out of the window by t=90
    windows.record(40, {"a": c(10, 40, 40), "b": c(0, 0, 0)}, span=60, running={"a": (4,), "b": (4, 0)})
    windows.record(90, {"a": c(20, 80, 80), "b": c(5, 20, 20)}, span=60, running={"a": (8,)})  # b's not read
    figures = windows.figures(90, span=60)
    assert figures is not None
    # The baseline read at t=0 gives its counters to the first increase, but its batch size is not in the window.
    assert figures.batch_sizes == {4: 2, 8: 1} and figures.idle_reads == 1
