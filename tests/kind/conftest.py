"""The kind tier (issue 25, docs/kind.md): runs against the cluster `bash scripts/kind/cluster.sh up` leaves running.

Not part of scripts/test.sh yet. Run it as
    eval "$(bash scripts/kind/cluster.sh env)" && .venv/bin/python -m pytest tests/kind -q
Skips when that cluster is not reachable.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kind: needs the kind cluster of scripts/kind/cluster.sh (tests/kind)")
