"""Which namespaces the operator serves, and how kopf is asked to watch them (dflash_operator.runtime.scope)."""

from __future__ import annotations

import pytest

from dflash_operator.runtime.scope import WatchScope


@pytest.mark.parametrize(("namespace", "pattern", "served"), [
    ("team-a", "team-*", True),
    ("other", "team-*", False),
    ("sa-1", "!sa-*", False),          # a leading exclusion implies a leading "*"
    ("anything", "!sa-*", True),
    ("myapp-pr-123", "myapp-*, !*-pr-*, *pr-123", True),     # re-included after the exclusion
    ("myapp-pr-456", "myapp-*, !*-pr-*, *pr-123", False),
    ("otherapp-pr-123", "myapp-*, !*-pr-*, *pr-123", False),  # never included by the first glob
    ("Team-A", "team-*", False),        # namespace names are case-sensitive
])
def test_patterns_follow_kopfs_syntax(namespace: str, pattern: str, served: bool) -> None:
    assert WatchScope((pattern,)).serves(namespace) is served


def test_exact_names_are_watched_one_by_one_as_namespaced_rbac_allows() -> None:
    scope = WatchScope(("team-a", "team-b"))
    assert scope.exact_namespaces == ("team-a", "team-b")
    assert not scope.clusterwide and not scope.filtered
    assert scope.serves("team-a") and not scope.serves("team-c")


def test_globs_are_watched_cluster_wide_and_filtered() -> None:
    scope = WatchScope(("!sa-*",))
    assert scope.clusterwide and scope.filtered and scope.exact_namespaces == ()
    assert scope.serves("t-one") and not scope.serves("sa-chart")
    assert not scope.serves(None)   # a cluster-scoped object belongs to no served namespace


def test_one_glob_among_exact_names_makes_the_whole_scope_filtered() -> None:
    scope = WatchScope(("team-a", "ci-*"))
    assert scope.filtered and scope.serves("ci-7") and scope.serves("team-a") and not scope.serves("team-b")


def test_no_patterns_is_the_whole_cluster_unfiltered() -> None:
    scope = WatchScope()
    assert scope.clusterwide and not scope.filtered and scope.serves("anything")
