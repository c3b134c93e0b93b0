"""The kind tier (issue 25, docs/kind.md): runs against the cluster `bash scripts/kind/cluster.sh up` leaves running.

scripts/test.sh runs it as `bash tests/kind/run.sh` (cluster up, these tests, cluster down). By hand, against a
cluster left up:
    eval "$(bash scripts/kind/cluster.sh env)" && .venv/bin/python -m pytest tests/kind -q
Fails (never skips) when that cluster is not reachable.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kind: needs the kind cluster of scripts/kind/cluster.sh (tests/kind)")
