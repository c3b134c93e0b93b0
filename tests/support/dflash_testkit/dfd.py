"""DFlashDeployment helpers for tests: build, apply and read CRs, their conditions and their serving objects."""

from __future__ import annotations

import json
from typing import cast

import kubernetes

from dflash_testkit.cachejob import fetch_result, finish_cache_job
from dflash_testkit.controlplane import READY_ANNOTATION, ControlPlane
from dflash_testkit.waiting import found, wait_for

API = ("serving.dflash.dev", "v1alpha1")
SELECTOR = "app.kubernetes.io/name=dflash-vllm,app.kubernetes.io/instance={}"


def dfd(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "serving.dflash.dev/v1alpha1",
        "kind": "DFlashDeployment",
        "metadata": {"name": name},
        "spec": {
            "target": {"repo": "Qwen/Qwen3-Coder-Next"},
            "draft": {"repo": "z-lab/Qwen3-Coder-Next-DFlash"},
            **spec,
        },
    }


def apply(plane: ControlPlane, namespace: str, obj: dict, check: bool = True):
    return plane.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(obj), check=check)


def apply_with_cache(plane: ControlPlane, api_client, namespace: str, obj: dict) -> None:
    """Applies a DFlashDeployment and lets its cache Job finish with a compatible pair."""
    apply(plane, namespace, obj)
    finish_cache_job(api_client, namespace, fetch_result())


def get_dfd(api_client, namespace: str, name: str) -> dict:
    return cast(dict, kubernetes.client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        *API, namespace, "dflashdeployments", name))


def condition(obj: dict, kind: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), None)


def condition_is(api_client, namespace: str, name: str, kind: str, status: str) -> dict | None:
    obj = get_dfd(api_client, namespace, name)
    found = condition(obj, kind)
    return obj if found and found["status"] == status else None


def mark_pods_ready(api_client, namespace: str, name: str, count: int = 1) -> int:
    """Waits for `count` live serving pods, then marks them ready (kwok's stand-in for passing the probe)."""
    core = kubernetes.client.CoreV1Api(api_client)

    def live():
        pods = core.list_namespaced_pod(namespace, label_selector=SELECTOR.format(name)).items
        pods = [p for p in pods if getattr(p.metadata, "deletion_timestamp", None) is None]
        return pods if len(pods) >= count else None

    pods = wait_for(live, f"{count} pod(s) of {name}")
    for pod in pods:
        core.patch_namespaced_pod(pod.metadata.name, namespace,
                                  {"metadata": {"annotations": {READY_ANNOTATION: "true"}}})
    return len(pods)


def deployment(api_client, namespace: str, name: str):
    return found(lambda: kubernetes.client.AppsV1Api(api_client).read_namespaced_deployment(name, namespace))
