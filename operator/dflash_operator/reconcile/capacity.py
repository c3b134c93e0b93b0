"""Can this spec ever run here? Answered from the watched indexes, before anything is downloaded. Pure.

Three questions, each about one serving pod and the cache claim as rendered:
- ResourceQuota: a quota whose hard limit is below what one pod (or the claim) needs can never admit it: a stall.
  A quota that is only full now (hard fits, hard - used does not) frees when other pods go: a note, not a stall.
- StorageClass: a claim naming a class that does not exist, or naming none where no class is the default, never
  binds. (A class with WaitForFirstConsumer is normal: the claim binds when the Job's pod is scheduled.)
- Nodes: whether any node has the allocatable GPUs and matches the pod's nodeSelector, required node affinity and
  tolerations. A cordoned node counts (it may be uncordoned); a cluster autoscaler may add one (config, annotation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

QUOTA_EXCEEDED = "QuotaExceeded"
STORAGE_CLASS_NOT_FOUND = "StorageClassNotFound"
NO_NODE_FITS = "NoNodeFits"
CLASS_QUOTA = ".storageclass.storage.k8s.io/"
# Taints the node controllers put on and take off with a node's state (cordoned, not ready, unreachable, a cloud node
# not yet initialised): temporary, so they never make a node unfit for good.
TRANSIENT_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/uninitialized")


@dataclass(frozen=True)
class Finding:
    """Why the spec cannot run here (`stall`), or what it waits for (not a stall: said in Ready's message)."""

    reason: str
    message: str
    stall: bool = True


def _quantity(value: Any) -> Decimal | None:
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError):
        return None


def _shown(value: Decimal) -> str:
    return format(value.normalize(), "f")


def pod_needs(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """What one pod counts against a quota: requests.X and limits.X summed over its containers (the init containers'
    largest where it is larger), its bare-name forms (cpu, memory are requests), and one pod."""
    def summed(containers: Iterable[Mapping[str, Any]], part: str) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for container in containers:
            for name, value in ((container.get("resources") or {}).get(part) or {}).items():
                amount = _quantity(value)
                if amount is not None:
                    total[name] = total.get(name, Decimal(0)) + amount
        return total

    needs: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for part in ("requests", "limits"):
        main = summed(pod_spec.get("containers") or [], part)
        for init in pod_spec.get("initContainers") or []:
            for name, amount in summed([init], part).items():
                main[name] = max(main.get(name, Decimal(0)), amount)
        for name, amount in main.items():
            needs[f"{part}.{name}"] = amount
            if part == "requests":
                needs[name] = amount  # the bare form: cpu, memory, and an extended resource's request
    return needs


def claim_needs(claim: Mapping[str, Any], class_name: str | None) -> dict[str, Decimal]:
    """What the cache claim counts against a quota, with the per-class forms of its (possibly default) class."""
    storage = _quantity(((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage"))
    needs = {"persistentvolumeclaims": Decimal(1), "count/persistentvolumeclaims": Decimal(1)}
    if storage is not None:
        needs["requests.storage"] = storage
    if class_name:
        needs[f"{class_name}{CLASS_QUOTA}persistentvolumeclaims"] = Decimal(1)
        if storage is not None:
            needs[f"{class_name}{CLASS_QUOTA}requests.storage"] = storage
    return needs


def quota_finding(quotas: Iterable[Mapping[str, Any]], needs: Mapping[str, Decimal], what: str
                  ) -> Finding | None:
    """The first quota that can never admit `what` (a stall), else the first that cannot admit it now (a wait)."""
    full_now: Finding | None = None
    for quota in sorted(quotas, key=lambda q: q.get("name") or ""):
        hard, used = quota.get("hard") or {}, quota.get("used") or {}
        for resource in sorted(needs):
            if resource not in hard:
                continue
            limit, need = _quantity(hard[resource]), needs[resource]
            spent = _quantity(used.get(resource, "0")) or Decimal(0)
            if limit is None:
                continue
            where = (f"ResourceQuota {quota.get('name')} allows {resource}: {_shown(limit)} (used {_shown(spent)}); "
                     f"{what} needs {_shown(need)}")
            if need > limit:
                return Finding(QUOTA_EXCEEDED, f"{where}: raise the quota or ask for less")
            if full_now is None and spent + need > limit:
                full_now = Finding(QUOTA_EXCEEDED, f"{where}: waiting for the quota to free", stall=False)
    return full_now


def storage_class_finding(claim: Mapping[str, Any], classes: Sequence[Mapping[str, Any]]) -> tuple[str | None,
                                                                                                Finding | None]:
    """The class the claim will get (named, or the default), and why it will never bind where that is known.
    An explicit empty class means pre-provisioned volumes: nothing to check."""
    named = (claim.get("spec") or {}).get("storageClassName")
    if named == "":
        return None, None
    names = sorted(c.get("name") or "" for c in classes)
    if named is not None:
        if named in names:
            return named, None
        return named, Finding(STORAGE_CLASS_NOT_FOUND, f"spec.cache.storageClassName {named!r} names no StorageClass "
                                                       f"(the cluster has: {', '.join(names) or 'none'}); the cache "
                                                       "claim would never bind")
    defaults = sorted(c.get("name") or "" for c in classes if c.get("default"))
    if defaults:
        return defaults[-1], None  # the API server picks the newest default; any one serves for the quota names
    return None, Finding(STORAGE_CLASS_NOT_FOUND, "spec.cache.storageClassName is not set and no StorageClass is the "
                                                  f"default (the cluster has: {', '.join(names) or 'none'}); name "
                                                  "one in spec.cache.storageClassName or mark one as the default")


def _tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (
                taint.get("value") or ""):
            return True
    return False


def _expression_holds(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression.get("key", ""), expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and values:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _affinity_holds(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Required node affinity: any term whose every expression holds (matchFields: only metadata.name)."""
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": node.get("name") or ""}
    return any(all(_expression_holds(e, node.get("labels") or {}) for e in term.get("matchExpressions") or [])
               and all(_expression_holds(e, fields) for e in term.get("matchFields") or [])
               for term in terms)


def node_lacks(pod_spec: Mapping[str, Any], needs: Mapping[str, Decimal], gpu_resource: str,
               node: Mapping[str, Any]) -> list[str]:
    """Everything that keeps one pod off this node for good; [] when it could run there."""
    lacks = []
    need = needs.get(f"limits.{gpu_resource}") or needs.get(gpu_resource) or Decimal(0)
    have = _quantity((node.get("allocatable") or {}).get(gpu_resource, "0")) or Decimal(0)
    if have < need:
        lacks.append(f"allocatable {gpu_resource} {_shown(have)} < {_shown(need)}")
    labels = node.get("labels") or {}
    for key, value in sorted((pod_spec.get("nodeSelector") or {}).items()):
        if labels.get(key) != value:
            lacks.append(f"nodeSelector {key}={value} (node has {labels[key]!r})" if key in labels
                         else f"nodeSelector {key}={value} (no such label)")
    if not _affinity_holds(pod_spec, node):
        lacks.append("required node affinity")
    tolerations = pod_spec.get("tolerations") or []
    for taint in node.get("taints") or []:
        if str(taint.get("key", "")).startswith(TRANSIENT_TAINTS):
            continue
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            lacks.append(f"untolerated taint {taint.get('key')}{value}:{taint.get('effect')}")
    return lacks


def node_finding(pod_spec: Mapping[str, Any], needs: Mapping[str, Decimal], gpu_resource: str,
                 nodes: Sequence[Mapping[str, Any]], autoscaling: bool) -> Finding | None:
    """None when some node could hold one serving pod; else the closest node and what it lacks."""
    # Closest: a node the pod is meant for (its selector and affinity hold) before one it is not, then the fewest
    # lacks, then by name.
    def placement_misses(lacks: list[str]) -> int:
        return sum(1 for lack in lacks if lack.startswith(("nodeSelector", "required node affinity")))

    verdicts = sorted(((node_lacks(pod_spec, needs, gpu_resource, n), n.get("name") or "") for n in nodes),
                      key=lambda v: (placement_misses(v[0]), len(v[0]), v[1]))
    if any(not lacks for lacks, _ in verdicts):
        return None
    if not verdicts:
        message = "the cluster has no nodes"
    else:
        lacks, name = verdicts[0]
        message = f"no node of {len(verdicts)} can hold one serving pod; closest: {name} ({'; '.join(lacks)})"
    if autoscaling:
        return Finding(NO_NODE_FITS, f"{message}; waiting for a cluster autoscaler to add one", stall=False)
    return Finding(NO_NODE_FITS, message)
