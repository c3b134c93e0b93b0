"""Pure renderers of the paired model cache: one PVC per (target@revision, draft@revision) and its Job.

The claim's name is derived from the pair, so every DFlashDeployment in a namespace that asks for the same pair finds
the same cache: a second deployment, a new replica or a restart downloads nothing.

The Job's pod runs two steps: the init container `fetch` (the operator image) downloads, verifies and applies the
operator's plain-worded pair rules; then `check-pair` runs the serving image's own `dflash-check-pair`, so the pair is
judged by the vLLM that will serve it (CPU only, configs and tokenizer files, read-only) and its version is known
before any GPU pod exists.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from dflash_cache.result import (
    CHECK_CONTAINER,
    CHECK_VERDICT_EXIT_CODES,
    FETCH_CONTAINER,
    NO_CHECKER,
    VERDICT_EXIT_CODES,
)
from dflash_operator import __version__
from dflash_operator.api import GROUP, DFlashDeployment
from dflash_operator.kube.ownership import MANAGED_BY, MANAGED_BY_LABEL, owner_reference

CACHE_MOUNT = "/cache"
PAIR_LABEL = f"{GROUP}/cache-pair"


@dataclass(frozen=True)
class CacheConfig:
    """Operator-level settings of the cache Job; passed in, never read from globals."""

    image: str = f"ghcr.io/dflash-dev/dflash-operator:{__version__}"  # the chart sets its own image
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
    """The cache Job's name. Sharers with different serving images, hub-token Secrets or hubs need different Jobs
    (a Job's pod template is immutable), writing to the same claim; the program's lock file keeps them from
    overlapping, and a Job that finds the cache complete only checks the pair with its own image."""
    ref, hub = dfd.spec.hub_token_secret_ref, hub_endpoint(dfd, config)
    variant = json.dumps([dfd.spec.image, f"{ref.name}/{ref.key}" if ref is not None else None, hub])
    return f"{cache_name(dfd)}-{hashlib.sha256(variant.encode()).hexdigest()[:6]}"


def cache_claim_of_job(job: str) -> str:
    """The claim a cache Job writes to: its name without the variant suffix (cache_job_name)."""
    return job.rsplit("-", 1)[0]


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


# Both containers: no privileges, nothing written outside /tmp (and the cache, for fetch only).
_RESTRICTED = {
    "runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
# The check container's shell: an image not built from images/vllm has no dflash-check-pair; then the operator's
# own verdict stands and status says the serving vLLM did not judge the pair.
_CHECK_SCRIPT = (
    "if ! command -v dflash-check-pair >/dev/null 2>&1; then "
    f"echo '{{\"{NO_CHECKER}\":\"the serving image has no dflash-check-pair (not built from images/vllm)\"}}' "
    "> /dev/termination-log; exit 0; fi; "
    'exec dflash-check-pair --output /dev/termination-log "$@"'
)


def _fetch_container(dfd: DFlashDeployment, config: CacheConfig) -> dict[str, Any]:
    spec = dfd.spec
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": "/tmp/hf"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
    ]
    hub = hub_endpoint(dfd, config)
    if hub is not None:
        env.append({"name": "HF_ENDPOINT", "value": hub})
    if spec.hub_token_secret_ref is not None:
        # The only place the token reaches: this container's environment, by reference to the user's Secret.
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": spec.hub_token_secret_ref.name, "key": spec.hub_token_secret_ref.key}}})
    return {
        "name": FETCH_CONTAINER,
        "image": config.image,
        # python3, not python: every Python image has python3; Debian's own python3 has no `python` beside it.
        "command": ["python3", "-m", "dflash_cache.fetch"],
        "args": [
            "--target", f"{spec.target.repo}@{spec.target.revision}",
            "--draft", f"{spec.draft.repo}@{spec.draft.revision}",
            "--dest", CACHE_MOUNT,
            "--pair-verdict-by-image",
        ],
        "env": env,
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "terminationMessagePolicy": "File",
        "securityContext": _RESTRICTED,
    }


def _check_container(dfd: DFlashDeployment) -> dict[str, Any]:
    # num_speculative_tokens is each sharer's own choice, checked by the operator against the draft's block size.
    return {
        "name": CHECK_CONTAINER,
        "image": dfd.spec.image,
        "command": ["sh", "-c", _CHECK_SCRIPT, CHECK_CONTAINER],
        "args": [f"{CACHE_MOUNT}/target", f"{CACHE_MOUNT}/draft"],
        # Configs and tokenizer files only: no weights read, no GPU requested, no hub reached.
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HUB_OFFLINE", "value": "1"},
                {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
                # vLLM's CUDA images set NVIDIA_VISIBLE_DEVICES=all; where the NVIDIA runtime is the node's
                # default it would hand this pod every GPU of the node without a resource request. (No
                # CUDA_VISIBLE_DEVICES="": the API server drops empty values, so the stored Job would never match
                # the rendered one and every pass would apply it again.)
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        # Importing vLLM (torch included) is the cost; nothing is loaded onto a device.
        "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
        # A crash leaves its log tail as the message, so status can say why the image could not judge the pair.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": _RESTRICTED,
    }


def claim_not_smaller(desired: dict[str, Any], observed: dict[str, Any] | None) -> dict[str, Any]:
    """The shared claim as one sharer applies it: never asking for less than the claim already has. A claim cannot
    shrink, and another sharer may have grown it; without this, sharers with different cache.size would take the
    size from each other on every pass."""
    if observed is None:
        return desired
    have = (((observed.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    want = desired["spec"]["resources"]["requests"]["storage"]
    try:
        larger = have is not None and parse_quantity(have) > parse_quantity(want)
    except ValueError:
        return desired
    if not larger:
        return desired
    spec = {**desired["spec"], "resources": {**desired["spec"]["resources"], "requests": {"storage": have}}}
    return {**desired, "spec": spec}


def render_cache_job(dfd: DFlashDeployment, config: CacheConfig) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": cache_job_name(dfd, config),
            "namespace": dfd.metadata["namespace"],
            "labels": cache_labels(dfd),
            "annotations": {**_annotations(dfd), f"{GROUP}/image": dfd.spec.image},
            # The Job is the cache's helper, not its owner: it goes with whoever uses the cache.
            "ownerReferences": [owner_reference(dfd.metadata, controller=False)],
        },
        "spec": {
            # Retries resume where the last attempt stopped; the manifest makes a finished cache a quick no-op.
            "backoffLimit": config.backoff_limit,
            # Verdicts, not accidents: fetch's 3 and 4 ("cached, but incompatible", "no such repository or
            # revision") and dflash-check-pair's 1 and 2. Retrying cannot change them.
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {
                    "containerName": FETCH_CONTAINER, "operator": "In", "values": list(VERDICT_EXIT_CODES)}},
                {"action": "FailJob", "onExitCodes": {
                    "containerName": CHECK_CONTAINER, "operator": "In", "values": list(CHECK_VERDICT_EXIT_CODES)}},
            ]},
            "template": {
                "metadata": {"labels": cache_labels(dfd)},
                "spec": {
                    "restartPolicy": "Never",
                    # The programs talk to the hub only, never to the API server.
                    "automountServiceAccountToken": False,
                    "securityContext": {"fsGroup": 65532},
                    "initContainers": [_fetch_container(dfd, config)],
                    "containers": [_check_container(dfd)],
                    "volumes": [
                        {"name": "cache", "persistentVolumeClaim": {"claimName": cache_name(dfd)}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }
