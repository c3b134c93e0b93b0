"""What the operator knows about the cluster without asking: kopf indexes fed by its watches.

Each index keeps a slim copy (no managedFields, only what reconcile reads) of the children, the pods of cache Jobs
and serving pods, and the DFlashDeployments themselves. Reconcile reads them instead of sending GETs and LISTs, so
a pass over an unchanged world sends nothing to the API server.

The copies are kept as compact JSON text and decoded when read: one string per object instead of a tree of dicts,
lists and strings. A cache Job's slim copy is about 18 KB as Python objects and 3 KB as text; and thousands of
small long-lived objects, interleaved with every pass's short-lived ones, keep the allocator from returning pages.
Each read gets a fresh copy, so no caller can change what the index holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dflash_operator.kube.ownership import CHILD_KINDS, child_kind
from dflash_operator.render.serving import INSTANCE_LABEL

JOB_NAME_LABEL = "job-name"  # set by the Job controller on its pods


def index_id(plural: str) -> str:
    """The kopf index of one child kind; also the keyword its handlers receive it under."""
    return f"observed_{plural}"


PODS_INDEX = "observed_pods"
DFDS_INDEX = "observed_dflashdeployments"
# What the cluster offers, read before any download (reconcile.capacity): quotas by namespace, every StorageClass,
# and every Node (only with the node check on: it needs a cluster-wide permission the chart grants by choice).
QUOTAS_INDEX = "observed_resourcequotas"
STORAGE_CLASSES_INDEX = "observed_storageclasses"
NODES_INDEX = "observed_nodes"
ALL = "all"  # the one key cluster-scoped facts are kept under
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
# What a pod's status keeps of a message (a termination message can be 4 KiB; the end holds the error).
MESSAGE_TAIL = 1024


def trim_watch_event(plural: str, event: Any) -> None:
    """Sheds, in place, what nothing in this operator reads from a watched object, before kopf queues the event:
    managedFields (often the largest part of a child), and a pod's spec (pods are only indexed, by labels and
    status). kopf holds each object's pending events until a worker takes them: during a burst, what an event
    carries is held that long."""
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        return  # a bookmark of kopf's (end of listing) or an error event
    body = event["object"]
    (body.get("metadata") or {}).pop("managedFields", None)
    if plural == "pods":
        body.pop("spec", None)
    elif plural == "nodes":  # a node's status carries its image list and heartbeats; only allocatable is read
        status = body.get("status") or {}
        body["status"] = {"allocatable": status.get("allocatable") or {}}


def slim_child(body: Mapping[str, Any]) -> dict[str, Any]:
    """The child as reconcile compares it: its metadata without managedFields, its spec and its status."""
    meta = dict(body.get("metadata") or {})
    meta.pop("managedFields", None)
    slim = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": meta}
    for part in ("spec", "status"):
        if part in body:
            slim[part] = body[part]
    return slim


def _ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _tail(text: Any) -> str:
    return str(text)[-MESSAGE_TAIL:]


def _slim_terminated(ended: Mapping[str, Any]) -> dict[str, Any]:
    kept = {key: ended[key] for key in ("exitCode", "reason") if ended.get(key) is not None}
    if ended.get("message"):
        kept["message"] = _tail(ended["message"])
    return kept


def _slim_container_statuses(statuses: list[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Per container: whether it runs, waits (and why: an image pull, a crash loop) or how it ended (exit code,
    reason, termination message), its restarts and how its last run ended."""
    slim = []
    for status in statuses or []:
        state = status.get("state") or {}
        kept: dict[str, Any]
        if "terminated" in state:
            kept = {"terminated": _slim_terminated(state["terminated"] or {})}
        elif "running" in state:
            kept = {"running": {}}
        elif (state.get("waiting") or {}).get("reason"):
            waiting = state["waiting"]
            kept = {"waiting": {"reason": waiting["reason"], "message": _tail(waiting.get("message") or "")}}
        else:
            continue
        entry: dict[str, Any] = {"name": status.get("name"), "state": kept}
        if status.get("restartCount"):
            entry["restartCount"] = status["restartCount"]
        last = (status.get("lastState") or {}).get("terminated")
        if last:
            entry["lastTerminated"] = _slim_terminated(last)
        slim.append(entry)
    return slim


def _unschedulable(status: Mapping[str, Any]) -> str | None:
    """The scheduler's message when it could not place the pod."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return _tail(cond.get("message") or cond.get("reason") or "unschedulable")
    return None


def slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """What reconcile reads of a pod: its phase, address, readiness, and which containers run or how they ended
    (the cache Job's two steps leave their results as termination messages)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "creationTimestamp": meta.get("creationTimestamp"),
                     "deletionTimestamp": meta.get("deletionTimestamp")},
        "status": {"phase": status.get("phase"), "podIP": status.get("podIP"), "ready": _ready(status),
                   "unschedulable": _unschedulable(status),
                   "initContainerStatuses": _slim_container_statuses(status.get("initContainerStatuses")),
                   "containerStatuses": _slim_container_statuses(status.get("containerStatuses"))},
    }


def slim_quota(body: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceQuota's limits (status.hard once the quota controller has seen it, else spec.hard) and use."""
    status = body.get("status") or {}
    return {"name": (body.get("metadata") or {}).get("name"),
            "hard": status.get("hard") or (body.get("spec") or {}).get("hard") or {},
            "used": status.get("used") or {}}


def slim_storage_class(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {"name": meta.get("name"), "provisioner": body.get("provisioner"),
            "default": (meta.get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true",
            "volumeBindingMode": body.get("volumeBindingMode") or "Immediate"}


def slim_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """What decides whether a pod could ever run on the node: labels, taints, allocatable, cordoned."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    return {"name": meta.get("name"), "labels": meta.get("labels") or {},
            "taints": [{k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None}
                       for t in spec.get("taints") or []],
            "unschedulable": bool(spec.get("unschedulable")),
            "allocatable": (body.get("status") or {}).get("allocatable") or {}}


def pod_keys(namespace: str, labels: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """The pod's keys in the pod index: the cache Job it runs for, or the DFlashDeployment it serves."""
    keys = []
    if JOB_NAME_LABEL in labels:
        keys.append(("job", namespace, labels[JOB_NAME_LABEL]))
    if INSTANCE_LABEL in labels:
        keys.append(("serving", namespace, labels[INSTANCE_LABEL]))
    return keys


def packed(entry: Mapping[str, Any]) -> str:
    """An index entry as it is kept: compact JSON text."""
    return json.dumps(entry, separators=(",", ":"))


def _values(index: Any, key: Any) -> list[Any]:
    try:
        return [json.loads(entry) for entry in index[key]]
    except KeyError:
        return []


@dataclass(frozen=True)
class Observed:
    """Read-only view over the indexes kopf passes to every handler (as keyword arguments)."""

    indexes: Mapping[str, Any]

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> Observed:
        ids = [index_id(k.plural) for k in CHILD_KINDS] + [PODS_INDEX, DFDS_INDEX, QUOTAS_INDEX,
                                                              STORAGE_CLASSES_INDEX]
        optional = [NODES_INDEX]  # registered only with the node check on
        return cls({i: kwargs[i] for i in ids} | {i: kwargs[i] for i in optional if i in kwargs})

    def quotas(self, namespace: str) -> list[dict[str, Any]]:
        return _values(self.indexes[QUOTAS_INDEX], namespace)

    def storage_classes(self) -> list[dict[str, Any]]:
        return _values(self.indexes[STORAGE_CLASSES_INDEX], ALL)

    def nodes(self) -> list[dict[str, Any]] | None:
        """Every Node, or None when the operator does not watch them (node check off or not permitted)."""
        return _values(self.indexes[NODES_INDEX], ALL) if NODES_INDEX in self.indexes else None

    def child(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = _values(self.indexes[index_id(child_kind(api_version, kind).plural)], (namespace, name))
        return found[0] if found else None

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return _values(self.indexes[PODS_INDEX], ("job", namespace, job))

    def serving_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return _values(self.indexes[PODS_INDEX], ("serving", namespace, name))

    def running_pods(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """(name, IP) of the serving pods whose vLLM may answer /metrics: running, ready or not. An unready pod's
        counters are how the operator can say why it is unready (its own probes' drafts were rejected)."""
        return [(p["metadata"]["name"], p["status"]["podIP"]) for p in self.serving_pods(namespace, name)
                if p["status"]["phase"] == "Running" and p["status"]["podIP"]
                and not p["metadata"]["deletionTimestamp"]]

    def running_pod_ips(self, namespace: str, name: str) -> list[str]:
        return [ip for _, ip in self.running_pods(namespace, name)]

    def dfd_keys(self) -> list[tuple[str, str]]:
        """Every indexed DFlashDeployment; a snapshot, safe to take while the watches update the index."""
        index = self.indexes[DFDS_INDEX]
        for _ in range(5):
            try:
                return list(index)
            except RuntimeError:  # the index changed size while being copied: take it again
                continue
        return []

    def dfd(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = _values(self.indexes[DFDS_INDEX], (namespace, name))
        return found[0] if found else None
