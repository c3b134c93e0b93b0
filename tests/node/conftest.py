"""Fixtures for the node tier: the real control plane plus one real node (containerd + kubelet), a namespace per test.

The session fixture records the host's state before the node starts and asserts, after it stops, that every
process, mount, link, iptables chain, netns, cgroup, host folder and kernel setting is as it was.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Iterator

import kubernetes
import pytest

from dflash_testkit.controlplane import ControlPlane, build_binaries, default_crds
from dflash_testkit.flow import Stack, serving_stack
from dflash_testkit.waiting import wait_for

_PLANE: ControlPlane | None = None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "node: needs the real node (tests/node)")


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    global _PLANE
    bin_dir = build_binaries()
    started = time.monotonic()
    # No fake nodes: every pod here, cache Jobs included, must land on the real node (kwok would "run" them).
    cp = ControlPlane(workdir=tmp_path_factory.mktemp("plane"), bin_dir=bin_dir, crd_files=default_crds(),
                      real_node=True, gpu_nodes=0)
    cp.start()
    _PLANE = cp
    assert cp.node is not None
    stats = {k: {"MB": v["bytes"] >> 20, "build_s": v["seconds"], "cached": v["cached"],
                 "import_s": v.get("import_seconds")} for k, v in cp.node.image_stats.items()}
    print(f"\ncontrol plane + real node up in {time.monotonic() - started:.1f} s "
          f"(node {cp.node.start_seconds:.1f} s: {cp.node.timings}); images {stats}", file=sys.stderr)
    yield cp
    node = cp.node
    cp.stop()
    _PLANE = None
    before, after = node.host_before, node.host_after
    assert before is not None and after is not None
    stats = {k: {"MB": v["bytes"] >> 20, "build_s": v["seconds"], "cached": v["cached"],
                 "import_s": v.get("import_seconds")} for k, v in node.image_stats.items()}
    print(f"\nimages used this session: {stats}", file=sys.stderr)
    print(f"\nnode stopped and cleaned in {node.stop_seconds:.1f} s\nhost before: {before.summary()}"
          f"\nhost after:  {after.summary()}", file=sys.stderr)
    # Mounts elsewhere (image builds, other sessions' work) come and go on their own; the node's are under these.
    roots = (str(cp.workdir), "/run", "/var/lib", "/var/log", "/sys/fs/cgroup/", "/opt", "/etc")
    assert not before.diff(after, ignore_mounts_outside=roots), f"host state changed: {before.diff(after, roots)}"


@pytest.fixture(scope="session")
def stack(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The vLLM image on the node, the hub mirror with the tiny models, and the operator: shared by the flow tests."""
    with serving_stack(plane, tmp_path_factory.mktemp("flow")) as running:
        yield running


@pytest.fixture(scope="session")
def core(plane: ControlPlane) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig)))


@pytest.fixture
def namespace(core: kubernetes.client.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    readable = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"n-{readable}-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": name}})
    # Pods mount the default service account's token; its controller creates it a moment after the namespace.
    wait_for(lambda: any(sa.metadata.name == "default"
                         for sa in core.list_namespaced_service_account(name).items), "default service account", 30)
    yield name
    core.delete_namespace(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing node test shows the tail of every component's log, the node's included."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _PLANE is not None:
        report.sections.append(("control-plane and node logs", _PLANE.log_tails(lines=30)))
