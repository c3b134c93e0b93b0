"""What this operator relies on in kopf's private modules (runtime.kopf_internals), named so a kopf upgrade that
changes any of it fails here, in one place, before anything else notices."""

from __future__ import annotations

import inspect
from pathlib import Path

from dflash_operator.runtime import kopf_internals
from dflash_operator.runtime.kopf_internals import (
    NamespaceName,
    kopf_api,
    kopf_watching,
    match_namespace,
    select_specific_namespaces,
)

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "dflash_operator"


def test_the_pinned_kopf_opens_its_streams_through_the_hooked_name() -> None:
    # observe_kopf_watches replaces module attributes; that reaches kopf only while its watch loop and its stream
    # look the functions up by those names at each call (kopf 1.45). Otherwise liveness would be blind.
    assert "continuous_watch(" in inspect.getsource(kopf_watching.infinite_watch)
    assert "await request(" in inspect.getsource(kopf_api.stream)
    assert "api.stream(" in inspect.getsource(kopf_watching.watch_objs)
    assert list(inspect.signature(kopf_watching.continuous_watch).parameters) == [
        "settings", "resource", "namespace", "operator_pause_waiter"]


def test_kopfs_namespace_patterns_behave_as_scope_expects() -> None:
    assert match_namespace(NamespaceName("team-a"), "team-*") and not match_namespace(NamespaceName("x"), "!x")
    assert select_specific_namespaces(["a", "b*"]) == {"a"}


def test_no_other_module_reaches_into_kopfs_private_modules() -> None:
    offenders = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
                 if "kopf._" in p.read_text() and p.name != "kopf_internals.py"]
    assert offenders == [], f"import kopf internals through runtime.kopf_internals: {offenders}"
    assert set(kopf_internals.__all__) == {"NamespaceName", "Resource", "kopf_api", "kopf_watching",
                                           "match_namespace", "select_specific_namespaces"}
