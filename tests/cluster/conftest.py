"""Fixtures for the cluster tier: one real control plane per test session, a fresh namespace per test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from dflash_testkit.controlplane import ControlPlane, build_binaries, default_crds, free_port
from dflash_testkit.operator import running_operator

_PLANE: ControlPlane | None = None
_OPERATOR_LOG: Path | None = None
_OPERATOR_METRICS_PORT = free_port()


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
    readable = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"t-{readable}-{uuid.uuid4().hex[:5]}"
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def own_namespace(api_client: kubernetes.client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace outside the session operator's scope (it serves every namespace but sa-*), for a test that runs
    an operator of its own there."""
    readable = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[5:25].strip("-")
    name = f"sa-{readable}-{uuid.uuid4().hex[:6]}"
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing cluster test shows the tail of every component's log, where the reason usually is."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _PLANE is not None:
        report.sections.append(("control-plane logs", _PLANE.log_tails(lines=25)))
    if report.failed and _OPERATOR_LOG is not None and _OPERATOR_LOG.exists():
        tail = _OPERATOR_LOG.read_text(errors="replace").splitlines()[-60:]
        report.sections.append(("operator log", "\n".join(tail)))


@pytest.fixture(scope="session")
def operator(control_plane: ControlPlane) -> Iterator[subprocess.Popen]:
    """The real operator (`dflash-operator run`) as its own process, against the test API server."""
    global _OPERATOR_LOG
    _OPERATOR_LOG = control_plane.workdir / "logs" / "operator.log"
    # Pod IPs of the test cluster are loopback; the operator refuses to dial anything else.
    settings = {"DFLASH_RESYNC_SECONDS": "2", "DFLASH_METRICS_ALLOWED_NETWORKS": "127.0.0.0/8",
                "DFLASH_METRICS_PORT": str(_OPERATOR_METRICS_PORT), "DFLASH_METRICS_ADDRESS": "127.0.0.1"}
    # Every namespace but sa-*, where test_chart runs an operator with the chart's RBAC on its own.
    with running_operator(control_plane.kubeconfig, _OPERATOR_LOG, settings, namespaces=("!sa-*",)) as process:
        yield process


@pytest.fixture
def operator_metrics_url(operator: subprocess.Popen) -> str:
    """The session operator's own metrics: what it alone did, where the API server counts every client's requests."""
    return f"http://127.0.0.1:{_OPERATOR_METRICS_PORT}/metrics"
