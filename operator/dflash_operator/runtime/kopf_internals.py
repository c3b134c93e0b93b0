"""The one door to kopf's private modules (`kopf._cogs`), which the pinned kopf line (pyproject: >=1.45.2,<1.46)
does not promise to keep. Everything else imports them from here, so a kopf upgrade that moves or changes them fails
in one place: tests/unit/test_kopf_internals.py names each one and what is relied on.

- `kopf_watching.continuous_watch` and `kopf_api.request`: wrapped by runtime.watch_health to see every watch
  stream's signs of life (kopf has no public hook for them).
- `NamespaceName`, `match_namespace`, `select_specific_namespaces`: kopf's own namespace patterns, so
  runtime.scope filters namespaces exactly as kopf's `--namespace` does.
- `Resource`: kopf's resource reference, for tests that drive the wrapped watch.
"""

from __future__ import annotations

from kopf._cogs.clients import api as kopf_api
from kopf._cogs.clients import watching as kopf_watching
from kopf._cogs.structs.references import NamespaceName, Resource, match_namespace, select_specific_namespaces

__all__ = ["NamespaceName", "Resource", "kopf_api", "kopf_watching", "match_namespace", "select_specific_namespaces"]
