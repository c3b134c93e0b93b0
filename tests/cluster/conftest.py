"""Fixtures for the cluster tier: one real control plane per test session, a fresh namespace per test."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import kubernetes
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane, build_binaries, default_crds  # noqa: E402

T = TypeVar("T")
_PLANE: ControlPlane | None = None


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    global _PLANE
    plane = ControlPlane(
        workdir=tmp_path_factory.mktemp("control-plane"), bin_dir=build_binaries(), crd_files=default_crds()
    )
    plane.start()
    _PLANE = plane
    print(f"\ncontrol plane up in {plane.start_seconds:.1f} s at {plane.server}", file=sys.stderr)
    yield plane
    pids = plane.pids()
    plane.stop()
    _PLANE = None
    survivors = [pid for pid in pids if _alive(pid)]
    assert not survivors, f"control-plane processes still running after stop: {survivors}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig))


@pytest.fixture
def namespace(api_client: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def wait_for(condition: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.25) -> T:
    """Polls until condition() returns something truthy; the failure says what was awaited and the last value."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value: {last!r}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing cluster test shows the tail of every component's log, where the reason usually is."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _PLANE is not None:
        report.sections.append(("control-plane logs", _PLANE.log_tails(lines=25)))
