"""Pure renderers of the paired model cache: one PVC and one download Job per (target@revision, draft@revision).

The name is derived from the pair, so every DFlashDeployment in a namespace that asks for the same pair finds the
same cache: a second deployment, a new replica or a restart downloads nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from dflash_operator.api import GROUP, DFlashDeployment
from dflash_operator.cache_result import VERDICT_EXIT_CODES
from dflash_operator.ownership import MANAGED_BY, MANAGED_BY_LABEL, owner_reference

CACHE_MOUNT = "/cache"
PAIR_LABEL = f"{GROUP}/cache-pair"


@dataclass(frozen=True)
class CacheConfig:
    """Operator-level settings of the cache Job; passed in, never read from globals."""

    image: str = "ghcr.io/dflash-dev/dflash-operator:0.1.0"
    backoff_limit: int = 6
    # The hub (or hub mirror) to download from when the spec names none; None: huggingface_hub's default.
    hub_endpoint: str | None = None


def hub_endpoint(dfd: DFlashDeployment, config: CacheConfig) -> str | None:
    """The spec's hub wins over the operator's: one team may use a mirror the rest of the cluster does not."""
    return dfd.spec.hub_endpoint or config.hub_endpoint


def pair_key(dfd: DFlashDeployment) -> str:
    spec = dfd.spec
    pair = f"{spec.target.repo}@{spec.target.revision}|{spec.draft.repo}@{spec.draft.revision}"
    return hashlib.sha256(pair.encode()).hexdigest()[:12]


def cache_name(dfd: DFlashDeployment) -> str:
    return f"dflash-cache-{pair_key(dfd)}"


def cache_job_name(dfd: DFlashDeployment, config: CacheConfig) -> str:
    """The download Job's name. Sharers with different hub-token Secrets or hubs need different Jobs (a Job's pod
    template is immutable), writing to the same claim; the program's lock file keeps them from overlapping."""
    ref, hub = dfd.spec.hub_token_secret_ref, hub_endpoint(dfd, config)
    if ref is None and hub is None:
        return cache_name(dfd)
    # Without a hub the suffix is the one the token alone gave before hubs were configurable.
    variant = f"{ref.name}/{ref.key}" if ref is not None else ""
    if hub is not None:
        variant += f"@{hub}"
    return f"{cache_name(dfd)}-{hashlib.sha256(variant.encode()).hexdigest()[:6]}"


def cache_labels(dfd: DFlashDeployment) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dflash-cache",
        MANAGED_BY_LABEL: MANAGED_BY,
        PAIR_LABEL: pair_key(dfd),
    }


def _annotations(dfd: DFlashDeployment) -> dict[str, str]:
    spec = dfd.spec
    return {
        f"{GROUP}/target": f"{spec.target.repo}@{spec.target.revision}",
        f"{GROUP}/draft": f"{spec.draft.repo}@{spec.draft.revision}",
    }


def render_cache_pvc(dfd: DFlashDeployment) -> dict[str, Any]:
    cache = dfd.spec.cache
    metadata: dict[str, Any] = {
        "name": cache_name(dfd),
        "namespace": dfd.metadata["namespace"],
        "labels": cache_labels(dfd),
        "annotations": _annotations(dfd),
    }
    if cache.retain_policy == "Delete":
        metadata["ownerReferences"] = [owner_reference(dfd.metadata, controller=False)]
    spec: dict[str, Any] = {
        "accessModes": [cache.access_mode],
        "resources": {"requests": {"storage": cache.size}},
        "volumeMode": "Filesystem",
    }
    if cache.storage_class_name is not None:
        spec["storageClassName"] = cache.storage_class_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def render_cache_job(dfd: DFlashDeployment, config: CacheConfig) -> dict[str, Any]:
    spec = dfd.spec
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": "/tmp/hf"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
    ]
    hub = hub_endpoint(dfd, config)
    if hub is not None:
        env.append({"name": "HF_ENDPOINT", "value": hub})
    if spec.hub_token_secret_ref is not None:
        # The only place the token reaches: this Job's environment, by reference to the user's Secret.
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": spec.hub_token_secret_ref.name, "key": spec.hub_token_secret_ref.key}}})
    container = {
        "name": "fetch",
        "image": config.image,
        # python3, not python: every Python image has python3; Debian's own python3 has no `python` beside it.
        "command": ["python3", "-m", "dflash_operator.fetch"],
        "args": [
            "--target", f"{spec.target.repo}@{spec.target.revision}",
            "--draft", f"{spec.draft.repo}@{spec.draft.revision}",
            "--dest", CACHE_MOUNT,
        ],
        "env": env,
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "terminationMessagePolicy": "File",
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": cache_job_name(dfd, config),
            "namespace": dfd.metadata["namespace"],
            "labels": cache_labels(dfd),
            "annotations": _annotations(dfd),
            # The Job is the cache's helper, not its owner: it goes with whoever uses the cache.
            "ownerReferences": [owner_reference(dfd.metadata, controller=False)],
        },
        "spec": {
            # Retries resume where the last attempt stopped; the manifest makes a finished cache a quick no-op.
            "backoffLimit": config.backoff_limit,
            # Exits 3 and 4 are the program's verdicts ("cached, but the pair is incompatible", "no such repository
            # or revision"): retrying cannot change them.
            "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                "containerName": "fetch", "operator": "In", "values": list(VERDICT_EXIT_CODES)}}]},
            "template": {
                "metadata": {"labels": cache_labels(dfd)},
                "spec": {
                    "restartPolicy": "Never",
                    # The program talks to the hub only, never to the API server.
                    "automountServiceAccountToken": False,
                    "securityContext": {"fsGroup": 65532},
                    "containers": [container],
                    "volumes": [
                        {"name": "cache", "persistentVolumeClaim": {"claimName": cache_name(dfd)}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }
