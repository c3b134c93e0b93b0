"""The operator's log: its own INFO lines, without kopf's line per handler per watch event."""

from __future__ import annotations

import logging

import pytest

from dflash_operator.runtime.main import configure_logging


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_kopfs_per_event_success_lines_stay_out_of_the_log_below_debug(level: str) -> None:
    root, objects = logging.getLogger(), logging.getLogger("kopf.objects")
    saved = root.level, objects.level, list(root.handlers)
    try:
        configure_logging(level)
        assert logging.getLogger("dflash_operator.reconcile.passes").isEnabledFor(logging.INFO)
        assert objects.isEnabledFor(logging.INFO) == (level == "DEBUG")
        assert objects.isEnabledFor(logging.WARNING), "kopf's warnings (and the events posted from them) stay"
    finally:
        root.setLevel(saved[0])
        objects.setLevel(saved[1])
        root.handlers[:] = saved[2]
