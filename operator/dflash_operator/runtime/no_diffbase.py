"""A kopf diff-base storage that keeps nothing: this operator has only event handlers and indexes.

kopf builds a diff-base on every watch event of every watched kind (a deep copy of the whole body, managedFields
and all) so that on.create/on.update handlers can see what changed. Nothing here reads it: reconcile compares the
desired objects with the indexed ones instead. Profiled at 1,000 DFlashDeployments applied at once, that copy and
the progress storage's copy of it were 8% of the operator's CPU samples, all on kopf's event-loop thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kopf


class NoDiffBase(kopf.DiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None
