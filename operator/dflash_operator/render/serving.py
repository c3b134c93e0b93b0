"""Pure renderers: a DFlashDeployment (+ operator config) -> the Kubernetes objects it should own. No I/O here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dflash_operator.api import GROUP, DFlashDeployment, DFlashDeploymentSpec
from dflash_operator.kube.ownership import MANAGED_BY, MANAGED_BY_LABEL, owner_reference

INSTANCE_LABEL = "app.kubernetes.io/instance"
SELECTOR_COMPONENT = "vllm"
SERVING_PORT = 8000
MODEL_MOUNT = "/models"


@dataclass(frozen=True)
class CacheFacts:
    """The verified paired cache the serving pods mount: its PVC and the commits it holds."""

    claim_name: str
    target_commit: str | None = None
    draft_commit: str | None = None


@dataclass(frozen=True)
class RenderConfig:
    """What the operator knows beyond the spec; passed in, never read from globals."""

    probe_command: str = "dflash-probe"
    startup_period_seconds: int = 10
    readiness_period_seconds: int = 30


def labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dflash-vllm",
        INSTANCE_LABEL: name,
        "app.kubernetes.io/component": SELECTOR_COMPONENT,
        MANAGED_BY_LABEL: MANAGED_BY,
    }


def selector_labels(name: str) -> dict[str, str]:
    # Only labels that never change: a Deployment's selector is immutable.
    return {"app.kubernetes.io/name": "dflash-vllm", INSTANCE_LABEL: name}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def _metadata(dfd: DFlashDeployment, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": dfd.metadata["namespace"],
        "labels": labels(dfd.metadata["name"]),
        "ownerReferences": [owner_reference(dfd.metadata, controller=True)],
    }


TARGET_PATH = f"{MODEL_MOUNT}/target"
DRAFT_PATH = f"{MODEL_MOUNT}/draft"


def speculative_config(spec: DFlashDeploymentSpec) -> str:
    # The draft is read from the cache at the commit the Job resolved, so no revision is passed to vLLM.
    config: dict[str, Any] = {"method": "dflash", "model": DRAFT_PATH,
                              "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.draft_tensor_parallel_size is not None:
        config["draft_tensor_parallel_size"] = spec.draft_tensor_parallel_size
    schedule = spec.speculation.tokens_by_batch_size
    if schedule is not None:
        config["num_speculative_tokens_per_batch_size"] = [
            [r.from_batch_size, r.to_batch_size, r.num_speculative_tokens] for r in schedule]
    # Compact and key-ordered, so the rendered args (and thus the pod template) are byte-stable across reconciles.
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def drafts_anywhere(spec: DFlashDeploymentSpec) -> bool:
    """False when spec.speculation.tokensByBatchSize proposes 0 draft tokens at every batch size: such a schedule is
    served as the target alone. vLLM 0.26 still runs the draft's pass at K = 0, and its V1 runner drops to piecewise
    CUDA graphs under any schedule: measured on the H200, 0.16-0.41x of no speculation (docs/operations.md)."""
    schedule = spec.speculation.tokens_by_batch_size
    return not schedule or any(r.num_speculative_tokens > 0 for r in schedule)


def vllm_args(dfd: DFlashDeployment, speculate: bool = True) -> list[str]:
    """`speculate` False (spec.speculation.onLowAcceptance Fallback in force): the target alone, no draft; so too
    a schedule that drafts nowhere (drafts_anywhere)."""
    spec = dfd.spec
    speculate = speculate and drafts_anywhere(spec)
    # --model rather than the positional form: both entrypoints of vLLM images (`vllm serve` from 0.9 on, the
    # api_server module before) accept it.
    args = [
        "--model", TARGET_PATH,
        "--served-model-name", spec.target.repo,
        "--host", "0.0.0.0",
        "--port", str(SERVING_PORT),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
    ]
    if speculate:
        args += ["--speculative-config", speculative_config(spec)]
    if spec.max_model_len is not None:
        args += ["--max-model-len", str(spec.max_model_len)]
    if speculate and spec.per_request_speculative_metrics is not None:
        args += ["--per-request-spec-decode-metrics", spec.per_request_speculative_metrics.lower()]
    return args + list(spec.extra_args)


def probe_speculates(spec: DFlashDeploymentSpec, speculate: bool = True) -> bool:
    """Whether the readiness probe can ask for accepted drafts: its one request runs at batch size 1, so not when
    the pods serve without the draft (`speculate` False) or their schedule proposes 0 tokens at batch size 1."""
    schedule = spec.speculation.tokens_by_batch_size
    at_one = next((r.num_speculative_tokens for r in schedule or [] if r.from_batch_size == 1), None)
    return speculate and at_one != 0


def probe_command(dfd: DFlashDeployment, config: RenderConfig, speculate: bool = True) -> list[str]:
    readiness = dfd.spec.readiness
    # Without drafts the probe still runs a real completion; it only stops asking for accepted drafts. (The
    # speculative form keeps its argument order: a changed pod template would roll every running pod.)
    judged = (["--min-acceptance", f"{readiness.min_acceptance_rate:g}"] if probe_speculates(dfd.spec, speculate)
              else ["--no-speculation"])
    return [
        config.probe_command,
        "--url", f"http://127.0.0.1:{SERVING_PORT}",
        "--model", dfd.spec.target.repo,
        "--prompt", readiness.probe_prompt,
        "--max-tokens", str(readiness.probe_max_tokens),
        *judged,
        "--timeout", str(readiness.probe_timeout_seconds),
    ]


def _resources(spec: DFlashDeploymentSpec) -> dict[str, Any]:
    # validation.spec_problems has refused a GPU count in spec.resources: it comes from tensorParallelSize.
    given = spec.resources or {}
    gpus = str(spec.tensor_parallel_size)
    return {
        **given,
        "limits": {**(given.get("limits") or {}), spec.gpu_resource_name: gpus},
        "requests": {**(given.get("requests") or {}), spec.gpu_resource_name: gpus},
    }


# Both models come from the verified cache; offline mode makes any attempt to reach a hub fail loudly.
# validation.spec_problems refuses a spec.env entry that sets one of these names.
OPERATOR_ENV: tuple[dict[str, str], ...] = (
    {"name": "HF_HUB_OFFLINE", "value": "1"},
    {"name": "HF_HOME", "value": "/tmp/hf"},
    {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
    {"name": "DO_NOT_TRACK", "value": "1"},
)


def _env(spec: DFlashDeploymentSpec) -> list[dict[str, Any]]:
    return [dict(e) for e in OPERATOR_ENV] + list(spec.env)


def render_deployment(dfd: DFlashDeployment, config: RenderConfig, cache: CacheFacts,
                      speculate: bool = True) -> dict[str, Any]:
    spec, name = dfd.spec, dfd.metadata["name"]
    probe = probe_command(dfd, config, speculate)
    readiness = spec.readiness
    container = {
        "name": "vllm",
        "image": spec.image,
        "args": vllm_args(dfd, speculate),
        "env": _env(spec),
        "ports": [{"name": "http", "containerPort": SERVING_PORT, "protocol": "TCP"}],
        "resources": _resources(spec),
        "volumeMounts": [
            {"name": "models", "mountPath": MODEL_MOUNT, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        # vLLM writes no termination message: on a failed start the kubelet keeps the log's tail instead, which is
        # where status.trouble finds vLLM's own error line (a refused flag, CUDA out of memory) for Ready's message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # Startup allows the long model load; it runs the same speculative probe, so "started" already means
        # "speculating". Readiness keeps proving it; liveness only asks whether the server process answers.
        "startupProbe": {
            "exec": {"command": probe},
            "periodSeconds": config.startup_period_seconds,
            "timeoutSeconds": readiness.probe_timeout_seconds + 5,
            "failureThreshold": max(1, readiness.startup_timeout_seconds // config.startup_period_seconds),
        },
        "readinessProbe": {
            "exec": {"command": probe},
            "periodSeconds": config.readiness_period_seconds,
            "timeoutSeconds": readiness.probe_timeout_seconds + 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [
            {"name": "models", "persistentVolumeClaim": {"claimName": cache.claim_name, "readOnly": True}},
            # NCCL and vLLM's shared-memory broadcast need more than the runtime's 64 MiB default /dev/shm.
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
        "terminationGracePeriodSeconds": 60,
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = list(spec.tolerations)
    if spec.affinity:
        pod_spec["affinity"] = dict(spec.affinity)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(dfd, name),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            # GPUs are scarce: surge one pod and never drop below the ready capacity during a rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels(name), "annotations": {
                    f"{GROUP}/target-commit": cache.target_commit or "",
                    f"{GROUP}/draft-commit": cache.draft_commit or "",
                    **({} if speculate else {f"{GROUP}/speculation": "fallback"}),
                }},
                "spec": pod_spec,
            },
        },
    }


def render_service(dfd: DFlashDeployment) -> dict[str, Any]:
    name = dfd.metadata["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(dfd, name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(name),
            "ports": [{"name": "http", "port": SERVING_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render_pdb(dfd: DFlashDeployment) -> dict[str, Any]:
    name = dfd.metadata["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(dfd, name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(name)}},
    }


def endpoint(dfd: DFlashDeployment) -> str:
    return f"http://{dfd.metadata['name']}.{dfd.metadata['namespace']}.svc:{SERVING_PORT}/v1"


def serving_objects(dfd: DFlashDeployment, config: RenderConfig, cache: CacheFacts, speculate: bool = True
                    ) -> list[dict[str, Any]]:
    """What serves traffic, in apply order; rendered only once the paired cache is verified and compatible.

    The Deployment first: it carries everything the user wrote into the pod (tolerations, affinity, env,
    resources), so when the API server refuses it nothing else is applied, and no Service is left without pods."""
    return [render_deployment(dfd, config, cache, speculate), render_service(dfd), render_pdb(dfd)]
