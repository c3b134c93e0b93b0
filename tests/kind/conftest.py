"""The kind tier (issue 25, docs/kind.md): runs against the cluster `bash scripts/kind/cluster.sh up` leaves running.

scripts/test.sh runs it as `bash tests/kind/run.sh` (cluster up, these tests, cluster down). By hand, against a
cluster left up:
    eval "$(bash scripts/kind/cluster.sh env)" && .venv/bin/python -m pytest tests/kind -q
Fails (never skips) when that cluster is not reachable.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from dflash_testkit.kindpath import kubectl, settings


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kind: needs the kind cluster of scripts/kind/cluster.sh (tests/kind)")


@pytest.fixture(scope="session", autouse=True)
def kind_cluster() -> None:
    if kubectl("get", "--raw", "/readyz", check=False).returncode != 0:
        pytest.fail(f"no kind cluster at {settings()['KUBECONFIG']}: run `bash scripts/kind/cluster.sh up`",
                    pytrace=False)


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"t-kind-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")
