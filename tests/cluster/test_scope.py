"""The operator's namespace scope against the real API server: a glob pattern serves what it matches and nothing
else, and namespaces that vanish while the operator starts do not stall it. (With kopf's own per-namespace watches
for globs, a CI run on a cold machine stalled every handler for good after namespaces were deleted during start-up;
see dflash_operator.scope. This test did not reproduce that race on the old code in 8 tries: it guards the
behaviour, the design removes the race.)"""

from __future__ import annotations

import uuid

import kubernetes
import pytest

from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.dfd import API, apply, condition, dfd, get_dfd
from dflash_testkit.operator import running_operator
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_namespaces_deleted_while_the_operator_starts_do_not_stall_it(
    control_plane: ControlPlane, api_client, tmp_path
) -> None:
    # sa-*: the session's operator leaves these namespaces alone, so only the operator started here can act.
    prefix = f"sa-race-{uuid.uuid4().hex[:5]}"
    core = kubernetes.client.CoreV1Api(api_client)
    objects = kubernetes.client.CustomObjectsApi(api_client)
    doomed = [f"{prefix}-{i}" for i in range(12)]
    for name in doomed:
        core.create_namespace({"metadata": {"name": name}})
        for i in range(2):
            objects.create_namespaced_custom_object(*API, name, "dflashdeployments", dfd(f"gone-{i}"))
    live, outside = f"{prefix}-live", f"sa-other-{uuid.uuid4().hex[:5]}"
    try:
        settings = {"DFLASH_RESYNC_SECONDS": "2", "DFLASH_METRICS_ALLOWED_NETWORKS": "127.0.0.0/8"}
        with running_operator(control_plane.kubeconfig, tmp_path / "operator.log", settings,
                              namespaces=(f"{prefix}-*",)):
            for name in doomed:   # gone while the operator lists, watches and indexes them
                core.delete_namespace(name)
            for name in (live, outside):
                core.create_namespace({"metadata": {"name": name}})
                apply(control_plane, name, dfd("served"))
            wait_for(lambda: condition(get_dfd(api_client, live, "served"), "Ready"),
                     "a status on the DFlashDeployment created after the namespaces vanished", timeout=30)
            # The namespace outside the pattern got nothing: no status, no cache claim.
            assert condition(get_dfd(api_client, outside, "served"), "Ready") is None
            assert core.list_namespaced_persistent_volume_claim(outside).items == []
    finally:
        for name in (live, outside):
            core.delete_namespace(name)
