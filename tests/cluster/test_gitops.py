"""What a GitOps tool (Argo CD, Flux) sees: it owns spec, the operator owns status, and nothing drifts."""

from __future__ import annotations

import json

import pytest
from cachejob import fetch_result, finish_cache_job
from conftest import wait_for
from controlplane import ControlPlane
from test_dflashdeployment import condition_is, deployment, dfd, get_dfd, mark_pods_ready

pytestmark = pytest.mark.cluster
MANAGER = "argocd-controller"


def ssa(plane: ControlPlane, namespace: str, manifest: dict, *extra: str, check: bool = True):
    return plane.kubectl("-n", namespace, "apply", "--server-side", f"--field-manager={MANAGER}", *extra,
                         "-f", "-", input=json.dumps(manifest), check=check)


def test_gitops_apply_never_conflicts_and_diff_stays_empty(control_plane: ControlPlane, api_client, operator,
                                                           namespace: str) -> None:
    manifest = dfd("synced", numSpeculativeTokens=6)
    ssa(control_plane, namespace, manifest)
    finish_cache_job(api_client, namespace, fetch_result())
    wait_for(lambda: deployment(api_client, namespace, "synced"), "the Deployment")
    mark_pods_ready(api_client, namespace, "synced")
    wait_for(lambda: condition_is(api_client, namespace, "synced", "Ready", "True"), "Ready=True")
    # The speculation timer adds its condition once; after that the status holds still and a diff is meaningful.
    wait_for(lambda: condition_is(api_client, namespace, "synced", "SpeculationHealthy", "Unknown"),
             "the first speculation measurement")

    # The tool syncs again, without forcing: the operator owns nothing the tool applies.
    again = ssa(control_plane, namespace, manifest, check=False)
    assert again.returncode == 0, again.stderr
    diff = control_plane.kubectl("-n", namespace, "diff", "--server-side", f"--field-manager={MANAGER}",
                                 "-f", "-", input=json.dumps(manifest), check=False)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stdout + diff.stderr

    live = get_dfd(api_client, namespace, "synced")
    for entry in live["metadata"]["managedFields"]:
        if "f:spec" in json.dumps(entry.get("fieldsV1", {})):
            assert entry["manager"] == MANAGER, f"{entry['manager']} wrote spec: {entry}"
        if entry["manager"] != MANAGER and entry.get("subresource") != "status":
            assert "f:spec" not in json.dumps(entry.get("fieldsV1", {}))


def test_a_synced_change_rolls_out_and_observed_generation_catches_up(
    control_plane: ControlPlane, api_client, operator, namespace: str
) -> None:
    ssa(control_plane, namespace, dfd("bumped", numSpeculativeTokens=4))
    finish_cache_job(api_client, namespace, fetch_result())
    wait_for(lambda: deployment(api_client, namespace, "bumped"), "the Deployment")
    ssa(control_plane, namespace, dfd("bumped", numSpeculativeTokens=10))

    def caught_up():
        obj = get_dfd(api_client, namespace, "bumped")
        return obj if obj["metadata"]["generation"] == 2 and obj["status"].get("observedGeneration") == 2 else None

    obj = wait_for(caught_up, "observedGeneration 2")
    assert all(c["observedGeneration"] == 2 for c in obj["status"]["conditions"]
               if c["type"] in ("Ready", "Reconciling", "Stalled"))
    args = deployment(api_client, namespace, "bumped").spec.template.spec.containers[0].args
    assert '"num_speculative_tokens":10' in args[args.index("--speculative-config") + 1]
