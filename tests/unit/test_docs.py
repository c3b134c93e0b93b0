"""The generated docs match the code, and every reason the code can put in a condition is documented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dflash_operator.api.reference import api_reference_markdown
from dflash_operator.runtime.cli import main
from dflash_operator.status.reasons import REASONS, troubleshooting_markdown

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "dflash_operator"
# Modules that decide conditions' and events' reasons.
DECIDERS = ["status/conditions.py", "status/trouble.py", "reconcile/capacity.py", "reconcile/validation.py",
            "reconcile/passes.py", "speculation/autopilot.py", "speculation/auto.py", "speculation/vllm_features.py"]
# CamelCase strings in those modules that are not our reasons: condition types, kinds, the kubelet's own reasons.
NOT_REASONS = {"CacheReady", "ModelsCompatible", "SpeculationHealthy", "ReplicaFailure", "PodScheduled",
               "PersistentVolumeClaim", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName", "DFlashDeployment",
               "ProvisioningFailed",  # the provisioner's event reason (reconcile.passes reads it)
               # node affinity operators and taint effects (reconcile.capacity)
               "NotIn", "DoesNotExist", "NoSchedule", "NoExecute", "PreferNoSchedule",
               "MeasuredBatchSizes"}  # a value of status.speculation.tuned.weightedBy (speculation.auto), no reason
CAMEL = re.compile(r"^(?=(?:.*[A-Z]){2})[A-Z][A-Za-z]*[a-z][A-Za-z]*$")


@pytest.mark.parametrize(("name", "render"), [("api.md", api_reference_markdown),
                                              ("troubleshooting.md", troubleshooting_markdown)])
def test_the_committed_docs_are_what_the_code_generates(name: str, render) -> None:
    assert (REPO / "docs" / name).read_text() == render(), f"docs/{name} drifted: run `dflash-operator docs`"


def test_the_docs_command_writes_them(tmp_path: Path) -> None:
    assert main(["docs", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "troubleshooting.md").read_text() == troubleshooting_markdown()


def test_every_reason_the_code_decides_is_in_the_table_and_the_table_has_no_other() -> None:
    strings = set()
    for module in DECIDERS:
        for node in ast.walk(ast.parse((PACKAGE / module).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
    decided = {s for s in strings if CAMEL.match(s)} - NOT_REASONS
    assert decided - set(REASONS) == set(), "reasons the code decides but docs/troubleshooting.md lacks"
    assert set(REASONS) - strings == set(), "documented reasons no code decides any more"
    table = (REPO / "docs" / "troubleshooting.md").read_text()
    assert all(f"| `{name}` |" in table for name in REASONS)
