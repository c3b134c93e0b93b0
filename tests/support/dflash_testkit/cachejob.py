"""Plays the kubelet for the cache Job's pod, which kwok cannot run: the pod ends with the exit code and the
termination message that dflash_operator.fetch leaves (the hub tier runs that program for real), and a
PersistentVolume is bound to the cache claim as a storage provisioner would."""

from __future__ import annotations

import datetime

import kubernetes

from dflash_operator.cache_result import CacheResult, problem_dicts
from dflash_testkit.waiting import wait_for

CACHE_SELECTOR = "app.kubernetes.io/name=dflash-cache"
TARGET_COMMIT = "1" * 40
DRAFT_COMMIT = "2" * 40


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
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{claim}"[:63]},
        "spec": {
            "capacity": {"storage": "2Ti"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
            "hostPath": {"path": f"/var/lib/dflash-test/{namespace}/{claim}"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    })
    wait_for(lambda: core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase == "Bound",
             "the cache claim to bind")


def write_fetch_log(plane, lines: list[str]) -> None:
    """What every cache container "printed", in the CRI log format kwok serves to `kubectl logs`."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    plane.fetch_log.write_text("".join(f"{stamp} stdout F {line}\n" for line in lines))


def start_cache_job(api_client, namespace: str):
    """Binds the cache claim and waits until the cache pod runs; returns (cache name, pod)."""
    job = wait_for(lambda: cache_job(api_client, namespace), "the cache Job")
    name = job.metadata.name
    claim = next(v.persistent_volume_claim.claim_name for v in job.spec.template.spec.volumes
                 if v.persistent_volume_claim is not None)
    bind_cache_volume(api_client, namespace, claim)
    core = kubernetes.client.CoreV1Api(api_client)
    pod = wait_for(lambda: next((p for p in core.list_namespaced_pod(namespace, label_selector=f"job-name={name}")
                                 .items if p.status.phase == "Running"), None), "the cache pod to run")
    return name, pod


def finish_cache_job(api_client, namespace: str, result: CacheResult, exit_code: int = 0) -> str:
    """Ends the running cache pod like the kubelet would; returns the cache name."""
    name, pod = start_cache_job(api_client, namespace)
    core = kubernetes.client.CoreV1Api(api_client)
    started = pod.status.container_statuses[0].state.running.started_at.isoformat().replace("+00:00", "Z")
    core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        "containerStatuses": [{
            "name": "fetch", "image": pod.spec.containers[0].image, "imageID": "", "ready": False,
            "restartCount": 0, "started": False,
            "state": {"terminated": {
                "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                "message": result.to_message(), "startedAt": started, "finishedAt": started,
            }},
        }],
    }})
    return name
