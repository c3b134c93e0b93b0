"""Who owns what: the managed-by label, field managers, owner references, and the kinds of children.

One home for these facts: the renderers stamp them, `kube` maps kinds to URLs with them, the handlers watch the
kinds listed here, and a unit test checks that the chart's RBAC grants exactly what this table needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_operator.api import GROUP, KIND, VERSION

MANAGED_BY = "dflash-operator"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
# The manager of the serving objects and of status. Cache objects are applied per sharer (see cache_field_manager).
FIELD_MANAGER = "dflash-operator"


@dataclass(frozen=True)
class ChildKind:
    """A kind of object a DFlashDeployment owns, as the API server names it."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def watch_resource(self) -> tuple[str, ...]:
        """The (group, version, plural) spelling kopf's decorators take."""
        return (self.group, self.version, self.plural) if self.group else (self.version, self.plural)


CHILD_KINDS = (
    ChildKind("apps", "v1", "deployments", "Deployment"),
    ChildKind("", "v1", "services", "Service"),
    ChildKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    ChildKind("batch", "v1", "jobs", "Job"),
    ChildKind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
)
_BY_API_VERSION_AND_KIND = {(k.api_version, k.kind): k for k in CHILD_KINDS}


def child_kind(api_version: str, kind: str) -> ChildKind:
    return _BY_API_VERSION_AND_KIND[(api_version, kind)]


def cache_field_manager(uid: str) -> str:
    # Each sharer applies the shared cache objects under its own manager, so one DFlashDeployment's apply never
    # drops another's ownerReference (a list keyed by uid that server-side apply merges per manager).
    return f"{FIELD_MANAGER}-{uid}"


def owner_reference(metadata: dict[str, Any], *, controller: bool) -> dict[str, Any]:
    """A reference to the DFlashDeployment. Serving objects have it as their one controller; a shared cache has
    one non-controller reference per sharer, so the garbage collector deletes it after the last one goes."""
    reference: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": metadata["name"],
                                 "uid": metadata["uid"]}
    if controller:
        reference.update(controller=True, blockOwnerDeletion=True)
    else:
        reference["blockOwnerDeletion"] = False
    return reference


def field_manager(obj: dict[str, Any], uid: str) -> str:
    """The manager to apply `obj` under for the DFlashDeployment `uid`: the operator's own for what it controls,
    a per-sharer one for the shared cache objects (no controller reference to this deployment)."""
    references = obj["metadata"].get("ownerReferences", [])
    controls = any(ref.get("uid") == uid and ref.get("controller") for ref in references)
    return FIELD_MANAGER if controls else cache_field_manager(uid)
