"""Which namespaces the operator serves, and how kopf is asked to watch them.

Exact names (the chart's `watch.namespaces`) go to kopf as they are: one watch per kind and namespace, which is what
namespaced RBAC allows. Globs ("team-*", "!sa-*") are not handed to kopf. For globs kopf watches the namespaces and
runs one watch per kind and matching namespace, and (kopf 1.45.2) when a namespace is deleted before its first
listing, or with events still queued, the readiness toggles of those watches are never dropped: every handler of
the operator then waits forever. Globs therefore mean one cluster-wide watch per kind and a filter on the
namespace, which also costs one watch per kind instead of one per kind and namespace.

A pattern follows kopf's syntax: comma-separated globs, `!` excludes, a leading exclusion implies a leading `*`;
a namespace is served when any pattern matches it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

GLOB_CHARACTERS = frozenset("*?[!,")


def is_exact(pattern: str) -> bool:
    return not GLOB_CHARACTERS.intersection(pattern)


def matches(namespace: str, pattern: str) -> bool:
    """kopf's documented pattern semantics: the first glob includes, `!globs` exclude, later globs re-include only
    what the first one included."""
    globs = [glob.strip() for glob in pattern.split(",") if glob.strip()]
    if not globs or globs[0].startswith("!"):
        globs.insert(0, "*")
    first = fnmatch.fnmatchcase(namespace, globs[0])
    served = first
    for glob in globs[1:]:
        if glob.startswith("!"):
            served = served and not fnmatch.fnmatchcase(namespace, glob[1:])
        else:
            served = served or (first and fnmatch.fnmatchcase(namespace, glob))
    return served


@dataclass(frozen=True)
class WatchScope:
    patterns: tuple[str, ...] = ()

    @property
    def clusterwide(self) -> bool:
        return not self.exact_namespaces

    @property
    def exact_namespaces(self) -> tuple[str, ...]:
        """The namespaces kopf watches one by one; empty when the scope is the cluster (filtered or not)."""
        if self.patterns and all(is_exact(pattern) for pattern in self.patterns):
            return self.patterns
        return ()

    @property
    def filtered(self) -> bool:
        """True when kopf watches the whole cluster but only some namespaces are served."""
        return bool(self.patterns) and self.clusterwide

    def serves(self, namespace: str | None) -> bool:
        if not self.patterns:
            return True
        return namespace is not None and any(matches(namespace, pattern) for pattern in self.patterns)
