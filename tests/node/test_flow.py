"""The whole product on the real node: kubectl apply -> a speculative completion, and its three negative twins.

Nothing is played by the test: the cache Job's pod (the operator image) downloads from the hub mirror on the node's
bridge into a claim bound by the real provisioner; the kubelet starts the vLLM CPU image with the rendered args and
runs the rendered exec probes (dflash-probe); the operator reads the pod's real /metrics. The test only applies CRs
with kubectl and reads what a user can read (kubectl get, events, port-forward).
"""

from __future__ import annotations

import json
import subprocess
import time

import kubernetes
import pytest
import yaml

from dflash_testkit import REPO
from dflash_testkit.dfd import SELECTOR, get_dfd
from dflash_testkit.flow import (
    NUM_SPECULATIVE_TOKENS,
    RANDOM_DRAFT,
    TARGET,
    WIDE_DRAFT,
    Stack,
    complete_through_port_forward,
    conditions,
    dfd,
    stopped_reason,
)
from dflash_testkit.node import NODE_NAME, STORAGE_CLASS
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.node
# A CPU vLLM on this 2-core machine loads in about a minute or two; the image's first start takes longer.
SERVING_TIMEOUT = 900


def apply(stack: Stack, namespace: str, manifest: dict) -> None:
    stack.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))


def until(core, namespace: str, name: str, done, what: str, timeout: float) -> dict:
    """Waits for done(obj); fails at once, with the CR's own reason, if it stops short of that."""
    def check() -> dict | None:
        obj = get_dfd(core.api_client, namespace, name)
        if done(obj):
            return obj
        reason = stopped_reason(obj)
        assert reason is None, f"{name} stopped: {reason}"
        return None
    return wait_for(check, what, timeout)


def serving_pods(core, namespace: str, name: str) -> list:
    return [p for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR.format(name)).items
            if p.metadata.deletion_timestamp is None]


def job_pods(core, namespace: str, job: str) -> list:
    return core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}").items


def events(core, namespace: str, name: str) -> list:
    return [e for e in core.list_namespaced_event(namespace).items
            if e.involved_object.kind == "DFlashDeployment" and e.involved_object.name == name]


def test_apply_to_a_speculative_completion(stack: Stack, core, namespace: str) -> None:
    manifest = dfd("tiny", stack.vllm_image)
    apply(stack, namespace, manifest)
    obj = until(core, namespace, "tiny", lambda o: conditions(o).get("Ready", {}).get("status") == "True",
                "the DFlashDeployment Ready", SERVING_TIMEOUT)

    # The cache: a real pod of the operator image ran the download on the real node into a provisioned claim.
    cache = obj["status"]["cache"]
    assert cache["phase"] == "Complete" and cache["percent"] == 100
    assert obj["status"]["resolved"] == {"targetCommit": stack.commits[TARGET],
                                         "draftCommit": stack.commits[manifest["spec"]["draft"]["repo"]]}
    claim = core.read_namespaced_persistent_volume_claim(cache["name"], namespace)
    assert claim.status.phase == "Bound" and claim.spec.storage_class_name == STORAGE_CLASS
    batch = kubernetes.client.BatchV1Api(core.api_client)
    (job,) = batch.list_namespaced_job(namespace).items
    assert job.status.succeeded == 1
    (fetcher,) = job_pods(core, namespace, job.metadata.name)
    assert fetcher.spec.node_name == NODE_NAME
    assert fetcher.spec.init_containers[0].image == stack.plane.node.images["operator"]
    assert fetcher.status.init_container_statuses[0].state.terminated.exit_code == 0
    # ... then the serving image's own vLLM judged the pair in the same pod, without a GPU: its version is known.
    assert fetcher.spec.containers[0].image == stack.vllm_image
    assert fetcher.status.container_statuses[0].state.terminated.exit_code == 0
    assert obj["status"]["pairCheck"] == {"checkedBy": "vllm", "vllmVersion": "0.32.0", "draftLayout": "z-lab"}
    wide = stack.kubectl("-n", namespace, "get", "dfd", "tiny", "-o", "wide").stdout.splitlines()
    assert "VLLM" in wide[0].split() and "0.32.0" in wide[1].split(), wide

    # The serving pod: on the real node, the rendered args exactly, the cache read-only, Ready through the probes.
    (pod,) = serving_pods(core, namespace, "tiny")
    assert pod.spec.node_name == NODE_NAME
    rendered = subprocess.run([str(REPO / ".venv" / "bin" / "dflash-operator"), "render", "-n", namespace, "-f", "-"],
                              input=json.dumps(manifest), capture_output=True, text=True, check=True).stdout
    deployment = next(o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert pod.spec.containers[0].args == container["args"]
    assert pod.spec.containers[0].startup_probe._exec.command[0] == "dflash-probe"
    assert pod.spec.containers[0].readiness_probe._exec.command == container["readinessProbe"]["exec"]["command"]
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    written = stack.kubectl("-n", namespace, "exec", pod.metadata.name, "--", "touch", "/models/target/x",
                            check=False)
    assert written.returncode != 0 and "Read-only file system" in written.stderr

    # The operator read the pod's /metrics: every draft token the probes proposed was accepted.
    obj = until(core, namespace, "tiny",
                lambda o: conditions(o).get("SpeculationHealthy", {}).get("status") == "True",
                "SpeculationHealthy=True", 120)
    figures = obj["status"]["speculation"]
    assert figures["acceptanceRate"] == 1.0 and figures["windowSeconds"] == 300, figures
    assert figures["meanAcceptedLength"] == pytest.approx(1 + NUM_SPECULATIVE_TOKENS, rel=0.05), figures
    assert figures["podsMeasured"] == 1 and obj["status"]["readyReplicas"] == 1
    header, row = stack.kubectl("-n", namespace, "get", "dfd", "tiny").stdout.splitlines()
    columns = dict(zip(header.split(), row.split(), strict=False))
    assert (columns["READY"], columns["CACHE"], columns["ACCEPTANCE"]) == ("True", "Complete", "1"), columns

    # A user's completion through kubectl port-forward to the Service.
    answer = complete_through_port_forward(stack.kubectl_argv(), namespace, "tiny", max_tokens=8)
    assert answer["model"] == TARGET and answer["usage"]["completion_tokens"] == 8, answer


def test_a_draft_below_the_floor_leaves_the_pod_unready_and_says_why(stack: Stack, core, namespace: str) -> None:
    apply(stack, namespace, dfd("random", stack.vllm_image, draft=RANDOM_DRAFT, min_acceptance=0.5))
    obj = wait_for(lambda: (o := get_dfd(core.api_client, namespace, "random")) and
                   conditions(o).get("SpeculationHealthy", {}).get("status") == "False" and o,
                   "SpeculationHealthy=False", SERVING_TIMEOUT)
    found = conditions(obj)
    assert found["SpeculationHealthy"]["reason"] == "AcceptanceBelowFloor"
    assert "under the floor 0.5" in found["SpeculationHealthy"]["message"]
    assert found["Ready"]["status"] == "False"
    assert obj["status"]["speculation"]["acceptanceRate"] < 0.5 and obj["status"]["speculation"]["podsMeasured"] == 1
    (pod,) = serving_pods(core, namespace, "random")
    assert pod.status.phase == "Running"
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"
    # The kubelet says the same in the pod's events: the rendered probe's own FAIL line.
    probe_failures = [e.message for e in core.list_namespaced_event(namespace).items
                      if e.involved_object.name == pod.metadata.name and e.reason == "Unhealthy"]
    assert any("FAIL" in m and "acceptance" in m for m in probe_failures), probe_failures
    # ... and status says it where the user looks: Ready carries the probe's FAIL line (within a resync).
    failing = wait_for(lambda: (o := get_dfd(core.api_client, namespace, "random")) and
                       conditions(o)["Ready"]["reason"] == "ProbeFailing" and o, "Ready reason ProbeFailing", 120)
    message = conditions(failing)["Ready"]["message"]
    # (the startup probe is the speculative probe too: a pod whose drafts are rejected fails there first)
    assert f"serving pod {pod.metadata.name} runs and fails its startup probe: FAIL acceptance" in message, message
    assert "< floor 0.50" in message, message
    # kopf posts events in the background: they follow the status shortly.
    wait_for(lambda: any(e.reason == "AcceptanceBelowFloor" and e.type == "Warning"
                         for e in events(core, namespace, "random")), "the AcceptanceBelowFloor warning event", 30)


def test_an_incompatible_pair_stops_before_any_serving_pod(stack: Stack, core, namespace: str) -> None:
    apply(stack, namespace, dfd("wide", stack.vllm_image, draft=WIDE_DRAFT))
    obj = wait_for(lambda: (o := get_dfd(core.api_client, namespace, "wide")) and
                   conditions(o).get("ModelsCompatible", {}).get("status") == "False" and o,
                   "ModelsCompatible=False", 300)
    found = conditions(obj)
    assert found["ModelsCompatible"]["reason"] == "IncompatiblePair"
    assert "hidden" in found["ModelsCompatible"]["message"], found["ModelsCompatible"]
    assert found["Stalled"]["status"] == "True" and found["CacheReady"]["status"] == "True"
    assert obj["status"]["pairCheck"]["checkedBy"] == "vllm", "the serving vLLM's verdict, not only the operator's"
    apps = kubernetes.client.AppsV1Api(core.api_client)
    assert apps.list_namespaced_deployment(namespace).items == []
    assert serving_pods(core, namespace, "wide") == []
    (job,) = kubernetes.client.BatchV1Api(core.api_client).list_namespaced_job(namespace).items
    assert len(job_pods(core, namespace, job.metadata.name)) == 1   # a verdict: the Job is not retried
    wait_for(lambda: any(e.reason == "IncompatiblePair" and e.type == "Warning"
                         for e in events(core, namespace, "wide")), "the IncompatiblePair warning event", 30)


def test_a_wrong_revision_fails_the_cache_once_with_a_readable_reason(stack: Stack, core, namespace: str) -> None:
    apply(stack, namespace, dfd("lost", stack.vllm_image, draft_revision="v9"))
    obj = wait_for(lambda: (o := get_dfd(core.api_client, namespace, "lost")) and
                   conditions(o).get("CacheReady", {}).get("reason") == "CacheFailed" and o,
                   "CacheReady=False CacheFailed", 300)
    found = conditions(obj)
    assert found["CacheReady"]["message"] == "revision 'v9' of org/tiny-draft not found on the hub"
    assert found["Stalled"]["status"] == "True" and found["Ready"]["status"] == "False"
    batch = kubernetes.client.BatchV1Api(core.api_client)
    (job,) = batch.list_namespaced_job(namespace).items
    assert any(c.type == "Failed" and c.reason == "PodFailurePolicy" for c in job.status.conditions or [])
    # No retry storm: one pod, and still one after a wait longer than the Job's first back-off.
    time.sleep(15)
    assert len(job_pods(core, namespace, job.metadata.name)) == 1
    assert batch.read_namespaced_job(job.metadata.name, namespace).status.failed == 1
    assert kubernetes.client.AppsV1Api(core.api_client).list_namespaced_deployment(namespace).items == []


def test_a_serving_image_that_does_not_exist_shows_in_status_while_the_cache_waits(
        stack: Stack, core, namespace: str) -> None:
    """The cache Job's check step runs the serving image, so a wrong spec.image shows there first: Ready says the
    kubelet cannot pull it, naming the image, while the download itself has finished."""
    image = "localhost/dflash/no-such-vllm:v0.32.0"
    apply(stack, namespace, dfd("noimage", image))
    obj = wait_for(lambda: (o := get_dfd(core.api_client, namespace, "noimage")) and
                   conditions(o).get("Ready", {}).get("reason") == "ImagePullBackOff" and o,
                   "Ready reason ImagePullBackOff", 300)
    found = conditions(obj)
    assert image in found["Ready"]["message"] and "check-pair" in found["Ready"]["message"], found["Ready"]
    assert found["CacheReady"]["status"] == "False"
    wait_for(lambda: any(e.reason == "ImagePullBackOff" and e.type == "Warning"
                         for e in events(core, namespace, "noimage")), "the ImagePullBackOff warning event", 30)


def test_a_flag_vllm_refuses_is_a_crash_loop_with_vllms_own_error_line(stack: Stack, core, namespace: str) -> None:
    manifest = dfd("badflag", stack.vllm_image)
    manifest["spec"]["extraArgs"] = [*manifest["spec"]["extraArgs"], "--no-such-flag"]
    apply(stack, namespace, manifest)
    obj = wait_for(lambda: (o := get_dfd(core.api_client, namespace, "badflag")) and
                   conditions(o).get("Ready", {}).get("reason") == "CrashLoopBackOff" and o,
                   "Ready reason CrashLoopBackOff", SERVING_TIMEOUT)
    message = conditions(obj)["Ready"]["message"]
    assert "--no-such-flag" in message and "keeps crashing" in message, message
    wait_for(lambda: any(e.reason == "CrashLoopBackOff" and e.type == "Warning"
                         for e in events(core, namespace, "badflag")), "the CrashLoopBackOff warning event", 30)
    # After three restarts the cluster will not fix it by itself: Stalled, with the same reason.
    obj = wait_for(lambda: (o := get_dfd(core.api_client, namespace, "badflag")) and
                   conditions(o).get("Stalled", {}).get("status") == "True" and o,
                   "Stalled=True after three restarts", 600)
    assert conditions(obj)["Stalled"]["reason"] == "CrashLoopBackOff"
