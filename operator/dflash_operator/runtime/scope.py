"""Which namespaces the operator serves, and how kopf is asked to watch them.

Exact names (the chart's `watch.namespaces`) go to kopf as they are: one watch per kind and namespace, which is what
namespaced RBAC allows. Globs ("team-*", "!sa-*") are not handed to kopf. For globs kopf watches the namespaces and
runs one watch per kind and matching namespace, and (kopf 1.45.2) when a namespace is deleted before its first
listing, or with events still queued, the readiness toggles of those watches are never dropped: every handler of
the operator then waits forever. Globs therefore mean one cluster-wide watch per kind and a filter on the
namespace, which also costs one watch per kind instead of one per kind and namespace.

A pattern follows kopf's syntax and is read by kopf's own functions: comma-separated globs, `!` excludes, a leading
exclusion implies a leading `*`; a namespace is served when any pattern matches it.
"""

from __future__ import annotations

from dataclasses import dataclass

# kopf's own pattern reader, so a pattern means here what it means to kopf. Private to kopf: pyproject pins the
# kopf line (>=1.45.2,<1.46) that this module was written against.
from dflash_operator.runtime.kopf_internals import NamespaceName, match_namespace, select_specific_namespaces


@dataclass(frozen=True)
class WatchScope:
    patterns: tuple[str, ...] = ()

    @property
    def exact_namespaces(self) -> tuple[str, ...]:
        """The namespaces kopf watches one by one; empty when the scope is the cluster (filtered or not)."""
        exact = select_specific_namespaces(self.patterns)
        if self.patterns and all(pattern in exact for pattern in self.patterns):
            return self.patterns
        return ()

    @property
    def clusterwide(self) -> bool:
        return not self.exact_namespaces

    @property
    def filtered(self) -> bool:
        """True when kopf watches the whole cluster but only some namespaces are served."""
        return bool(self.patterns) and self.clusterwide

    def serves(self, namespace: str | None) -> bool:
        if not self.patterns:
            return True
        if namespace is None:
            return False
        return any(match_namespace(NamespaceName(namespace), pattern) for pattern in self.patterns)
