"""Stand-ins for the operator's watch-fed indexes, for unit tests of reconcile: plain mappings of key -> values,
the shape kopf's indexes have, holding entries packed as the operator's index functions pack them."""

from __future__ import annotations

from dflash_operator.kube.ownership import CHILD_KINDS, child_kind
from dflash_operator.reconcile.observed import (
    ALL,
    DFDS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    QUOTAS_INDEX,
    STORAGE_CLASSES_INDEX,
    Observed,
    index_id,
    packed,
)

# A cluster that can run the common spec: a default StorageClass and one node with 8 GPUs, no quota.
STANDARD_CLASS = {"name": "standard", "provisioner": "example.com/disk", "default": True,
                  "volumeBindingMode": "WaitForFirstConsumer"}
GPU_NODE = {"name": "gpu-0", "labels": {"nvidia.com/gpu.present": "true"}, "taints": [], "unschedulable": False,
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}}


def observed(children: tuple[dict, ...] | list[dict] = (), pods: dict[tuple, list[dict]] | None = None, *,
             quotas: dict[str, list[dict]] | None = None, storage_classes: tuple[dict, ...] = (STANDARD_CLASS,),
             nodes: tuple[dict, ...] | None = (GPU_NODE,)) -> Observed:
    """`quotas` by namespace (slim_quota entries); `nodes` None: the operator does not watch Nodes."""
    indexes: dict[str, dict] = {index_id(k.plural): {} for k in CHILD_KINDS}
    for child in children:
        kind = child_kind(child["apiVersion"], child["kind"])
        key = (child["metadata"]["namespace"], child["metadata"]["name"])
        indexes[index_id(kind.plural)][key] = [packed(child)]
    pod_index = {key: [packed(pod) for pod in found] for key, found in (pods or {}).items()}
    facts = {QUOTAS_INDEX: {ns: [packed(q) for q in found] for ns, found in (quotas or {}).items()},
             STORAGE_CLASSES_INDEX: {ALL: [packed(c) for c in storage_classes]} if storage_classes else {}}
    if nodes is not None:
        facts[NODES_INDEX] = {ALL: [packed(n) for n in nodes]} if nodes else {}
    return Observed({**indexes, PODS_INDEX: pod_index, DFDS_INDEX: {}, **facts})
