"""What a GitOps tool (Argo CD, Flux) sees: it owns spec, the operator owns status, and nothing drifts."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from dflash_testkit.cachejob import fetch_result, finish_cache_job
from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.dfd import condition_is, deployment, dfd, get_dfd, mark_pods_ready
from dflash_testkit.waiting import wait_for

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
    # Nothing changes, so nothing is written: several resync periods (2 s here) leave the object untouched.
    time.sleep(5)
    assert get_dfd(api_client, namespace, "synced")["metadata"]["resourceVersion"] == \
        live["metadata"]["resourceVersion"], "the operator rewrote an unchanged status"
    spec_writers = {e["manager"] for e in live["metadata"]["managedFields"] if "f:spec" in e.get("fieldsV1", {})}
    assert spec_writers == {MANAGER}, f"spec written by {spec_writers}"
    status_writers = {e["manager"] for e in live["metadata"]["managedFields"] if e.get("subresource") == "status"}
    assert status_writers == {"dflash-operator"}, status_writers


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


def kstatus(plane: ControlPlane, obj: dict) -> dict:
    """What Flux's health check library (sigs.k8s.io/cli-utils kstatus) makes of the live object."""
    result = subprocess.run([plane.binary("kstatus")], input=json.dumps(obj) + "\n", capture_output=True,
                            text=True, timeout=30, check=True)
    return json.loads(result.stdout)


def test_flux_kstatus_reads_the_lifecycle(control_plane: ControlPlane, api_client, operator, namespace: str) -> None:
    ssa(control_plane, namespace, dfd("fluxed"))
    wait_for(lambda: condition_is(api_client, namespace, "fluxed", "CacheReady", "False"), "CacheReady=False")
    assert kstatus(control_plane, get_dfd(api_client, namespace, "fluxed"))["status"] == "InProgress"

    finish_cache_job(api_client, namespace, fetch_result())
    wait_for(lambda: deployment(api_client, namespace, "fluxed"), "the Deployment")
    mark_pods_ready(api_client, namespace, "fluxed")
    ready = wait_for(lambda: condition_is(api_client, namespace, "fluxed", "Ready", "True"), "Ready=True")
    assert kstatus(control_plane, ready)["status"] == "Current"

    # A new generation the operator has not observed yet is never Current, whatever the old conditions say.
    stale = {**ready, "metadata": {**ready["metadata"], "generation": ready["metadata"]["generation"] + 1}}
    assert kstatus(control_plane, stale)["status"] == "InProgress"


def test_flux_kstatus_fails_an_incompatible_pair(control_plane: ControlPlane, api_client, operator,
                                                 namespace: str) -> None:
    ssa(control_plane, namespace, dfd("unfit"))
    problem = {"code": "VocabSizeMismatch", "message": "target vocab_size 1024 != draft vocab_size 2048"}
    finish_cache_job(api_client, namespace, fetch_result(problems=[problem]))
    stalled = wait_for(lambda: condition_is(api_client, namespace, "unfit", "Stalled", "True"), "Stalled=True")
    verdict = kstatus(control_plane, stalled)
    assert verdict["status"] == "Failed" and "vocab_size" in verdict["message"], verdict
