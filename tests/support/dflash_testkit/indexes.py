"""Stand-ins for the operator's watch-fed indexes, for unit tests of reconcile: plain mappings of key -> values,
the shape kopf's indexes have, holding entries packed as the operator's index functions pack them."""

from __future__ import annotations

from dflash_operator.kube.ownership import CHILD_KINDS, child_kind
from dflash_operator.reconcile.observed import DFDS_INDEX, PODS_INDEX, Observed, index_id, packed


def observed(children: tuple[dict, ...] | list[dict] = (), pods: dict[tuple, list[dict]] | None = None) -> Observed:
    indexes: dict[str, dict] = {index_id(k.plural): {} for k in CHILD_KINDS}
    for child in children:
        kind = child_kind(child["apiVersion"], child["kind"])
        key = (child["metadata"]["namespace"], child["metadata"]["name"])
        indexes[index_id(kind.plural)][key] = [packed(child)]
    pod_index = {key: [packed(pod) for pod in found] for key, found in (pods or {}).items()}
    return Observed({**indexes, PODS_INDEX: pod_index, DFDS_INDEX: {}})
