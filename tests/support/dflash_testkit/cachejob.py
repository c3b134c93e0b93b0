"""Plays the kubelet for the cache Job's pod, which kwok cannot run: its two steps end with the exit codes and
termination messages that dflash_cache.fetch (the hub tier runs it for real) and the serving image's
dflash-check-pair (the vLLM tier runs it for real, the node tier both in a real pod) leave, and a PersistentVolume
is bound to the cache claim as a storage provisioner would."""

from __future__ import annotations

import datetime
from typing import Any

import kubernetes

from dflash_cache.pairing import verdict_message
from dflash_cache.result import CHECK_CONTAINER, FETCH_CONTAINER, CacheResult, problem_dicts
from dflash_testkit.waiting import found, wait_for

CACHE_SELECTOR = "app.kubernetes.io/name=dflash-cache"
TARGET_COMMIT = "1" * 40
DRAFT_COMMIT = "2" * 40
IMAGE_VLLM_VERSION = "0.32.0"


def termination_message(*, problems: list, **fields: object) -> str:
    """The termination message the program leaves for `problems` (pairing Problem objects) and other fields."""
    return CacheResult(problems=problem_dicts(problems), **fields).to_message()  # type: ignore[arg-type]


def fetch_result(problems: list[dict] | None = None, error: str | None = None,
                 draft_block_size: int | None = None) -> CacheResult:
    """What the program would leave: the operator's own contract type, so the stand-in cannot drift from it."""
    return CacheResult(ok=not problems and not error, target_commit=TARGET_COMMIT, draft_commit=DRAFT_COMMIT,
                       draft_block_size=draft_block_size, problems=problems or [], error=error)


def cache_job(api_client, namespace: str):
    jobs = kubernetes.client.BatchV1Api(api_client).list_namespaced_job(namespace, label_selector=CACHE_SELECTOR)
    return jobs.items[0] if jobs.items else None


def bind_cache_volume(api_client, namespace: str, claim: str) -> None:
    """A volume made for the claim, in the claim's class (the default class the API server gave it, or none)."""
    core = kubernetes.client.CoreV1Api(api_client)
    claim_spec = core.read_namespaced_persistent_volume_claim(claim, namespace).spec
    storage_class = getattr(claim_spec, "storage_class_name", None) or ""
    volume: Any = {  # a plain manifest; the client serialises dicts as they are
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{claim}"[:63]},
        "spec": {
            "capacity": {"storage": "2Ti"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": storage_class,
            "hostPath": {"path": f"/var/lib/dflash-test/{namespace}/{claim}"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }
    core.create_persistent_volume(volume)
    wait_for(lambda: getattr(core.read_namespaced_persistent_volume_claim(claim, namespace).status, "phase",
                             None) == "Bound",
             "the cache claim to bind")


def write_fetch_log(plane, lines: list[str]) -> None:
    """What every cache container "printed", in the CRI log format kwok serves to `kubectl logs`."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    plane.fetch_log.write_text("".join(f"{stamp} stdout F {line}\n" for line in lines))


def start_cache_job(api_client, namespace: str, job_name: str | None = None):
    """Binds the cache claim and waits until the cache pod runs; returns (the claim's name, pod). `job_name`: that
    Job (default: the namespace's only one)."""
    batch = kubernetes.client.BatchV1Api(api_client)
    job = wait_for(lambda: _read_job(batch, namespace, job_name) if job_name else cache_job(api_client, namespace),
                   "the cache Job")
    name = job.metadata.name
    claim = next(v.persistent_volume_claim.claim_name for v in job.spec.template.spec.volumes
                 if v.persistent_volume_claim is not None)
    bind_cache_volume(api_client, namespace, claim)
    core = kubernetes.client.CoreV1Api(api_client)
    pod = wait_for(lambda: next((p for p in core.list_namespaced_pod(namespace, label_selector=f"job-name={name}")
                                 .items if getattr(p.status, "phase", None) == "Running"), None),
                   "the cache pod to run")
    return claim, pod


def _read_job(batch: kubernetes.client.BatchV1Api, namespace: str, name: str):
    """The Job, or None while the operator has not created it yet."""
    return found(lambda: batch.read_namespaced_job(name, namespace))


def image_verdict(problems: list[dict] | None = None, vllm_version: str = IMAGE_VLLM_VERSION,
                  notes: list[str] | None = None) -> dict:
    """What the serving image's dflash-check-pair decides, in its own format (pairing.verdict)."""
    return {"compatible": not problems, "problems": problems or [], "checked_by": "vllm",
            "vllm_version": vllm_version, "draft_layout": "z-lab", "notes": notes or []}


def _terminated(name: str, image: str, code: int, message: str, at: str) -> dict:
    return {"name": name, "image": image, "imageID": "", "ready": False, "restartCount": 0, "started": False,
            "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     "message": message, "startedAt": at, "finishedAt": at}}}


def cache_pod_status(result: CacheResult, fetch_exit: int = 0, verdict: dict | str | None = None,
                     images: tuple[str, str] = ("operator", "vllm"), at: str = "2026-01-01T00:00:00Z") -> dict:
    """The pod status the kubelet reports when both steps have run (the check only when fetch exited 0). `verdict`:
    the check's verdict (default: the image agrees with `result.problems`) or a raw termination message."""
    fetch = _terminated(FETCH_CONTAINER, images[0], fetch_exit, result.to_message(), at)
    if fetch_exit != 0:
        check = {"name": CHECK_CONTAINER, "image": images[1], "imageID": "", "ready": False, "restartCount": 0,
                 "started": False, "state": {"waiting": {"reason": "PodInitializing"}}}
        return {"phase": "Failed", "initContainerStatuses": [fetch], "containerStatuses": [check]}
    if verdict is None:
        verdict = image_verdict(list(result.problems))
    message = verdict if isinstance(verdict, str) else verdict_message(verdict)
    check_exit = 0 if isinstance(verdict, str) or verdict["compatible"] else 1
    return {"phase": "Succeeded" if check_exit == 0 else "Failed", "initContainerStatuses": [fetch],
            "containerStatuses": [_terminated(CHECK_CONTAINER, images[1], check_exit, message, at)]}


def mark_fetching(api_client, namespace: str, pod) -> None:
    """Reports the download step running, as the kubelet does while the init container works. (The phase stays as
    kwok set it: a Pending phase would make kwok start the pod over.)"""
    at = pod.status.start_time.isoformat().replace("+00:00", "Z")
    core = kubernetes.client.CoreV1Api(api_client)
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
        "initContainerStatuses": [{"name": FETCH_CONTAINER, "image": pod.spec.init_containers[0].image,
                                   "imageID": "", "ready": False, "restartCount": 0, "started": True,
                                   "state": {"running": {"startedAt": at}}}],
        "containerStatuses": [{"name": CHECK_CONTAINER, "image": pod.spec.containers[0].image, "imageID": "",
                               "ready": False, "restartCount": 0, "started": False,
                               "state": {"waiting": {"reason": "PodInitializing"}}}],
    }})


def finish_cache_job(api_client, namespace: str, result: CacheResult, exit_code: int = 0,
                     verdict: dict | str | None = None, job_name: str | None = None) -> str:
    """Ends the running cache pod like the kubelet would: the fetch step with `exit_code` and `result`, then (on 0)
    the check step with `verdict` (default: the image agrees with the fetch step). Returns the cache's (claim's)
    name."""
    name, pod = start_cache_job(api_client, namespace, job_name)
    core = kubernetes.client.CoreV1Api(api_client)
    at = pod.status.start_time.isoformat().replace("+00:00", "Z")
    status = cache_pod_status(result, exit_code, verdict,
                              (pod.spec.init_containers[0].image, pod.spec.containers[0].image), at)
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
        **status, "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]}})
    return name
