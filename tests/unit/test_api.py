"""The API models are the single source of the CRD: the committed YAML must be exactly what they generate."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from dflash_operator.api import DFlashDeploymentSpec
from dflash_operator.api.crd import build_crd, render_crd_yaml
from dflash_operator.api.models import ModelRef, git_ref_problem
from dflash_operator.runtime.cli import main

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "serving.dflash.dev_dflashdeployments.yaml"
CHART_CRD_FILE = REPO / "charts" / "dflash-operator" / "files" / "crd.yaml"


@pytest.mark.parametrize("committed", [CRD_FILE, CHART_CRD_FILE], ids=["crds", "chart"])
def test_committed_crd_is_what_the_models_generate(committed: Path) -> None:
    assert committed.read_text() == render_crd_yaml(), (
        f"{committed.relative_to(REPO)} drifted from the API models: run `dflash-operator crd -o {committed}`"
    )


def test_cli_crd_writes_the_same_file(tmp_path: Path) -> None:
    out = tmp_path / "crd.yaml"
    assert main(["crd", "-o", str(out)]) == 0
    assert out.read_text() == CRD_FILE.read_text()


def _walk(schema: dict, path: str = ""):
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict) and schema["items"]:
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def _version() -> dict:
    return build_crd()["spec"]["versions"][0]


def test_every_spec_and_status_field_has_a_description_and_a_type() -> None:
    root = _version()["schema"]["openAPIV3Schema"]
    for top in ("spec", "status"):
        for path, node in _walk(root["properties"][top], top):
            if path.endswith("[]") or path.endswith("{}"):
                continue  # list items and map values are described by their field
            assert node.get("description"), f"{path} has no description (kubectl explain would be empty)"
            assert node.get("type"), f"{path} has no type (not a structural schema)"
            assert "$ref" not in node and "anyOf" not in node and "title" not in node, path


def test_defaults_live_in_the_schema() -> None:
    spec = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["numSpeculativeTokens"]["default"] == 8
    assert spec["gpuResourceName"]["default"] == "nvidia.com/gpu"
    assert spec["cache"]["default"] == {} and spec["cache"]["properties"]["retainPolicy"]["default"] == "Keep"
    assert spec["readiness"]["properties"]["minAcceptanceRate"]["default"] == 0.1
    assert spec["target"]["required"] == ["repo"]


def test_subresources_and_printer_columns() -> None:
    version = _version()
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}
    assert version["subresources"]["status"] == {}
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[:6] == ["Ready", "Replicas", "Target", "Draft", "Cache", "Acceptance"] and names[-1] == "Age"


def test_pydantic_model_rejects_what_the_schema_rejects() -> None:
    with pytest.raises(ValidationError):
        DFlashDeploymentSpec.model_validate({"target": {"repo": "a/b"}, "draft": {"repo": "c/d"},
                                             "numSpeculativeTokens": 33})
    with pytest.raises(ValidationError):
        DFlashDeploymentSpec.model_validate({"target": {"repo": "a/b"}, "draft": {"repo": "c/d"}, "typo": 1})
    spec = DFlashDeploymentSpec.model_validate({"target": {"repo": "a/b"}, "draft": {"repo": "c/d"}})
    assert spec.cache.access_mode == "ReadWriteMany" and spec.readiness.probe_max_tokens == 16


def test_the_default_image_is_the_newest_supported_vllm_release() -> None:
    from dflash_operator.api.models import DEFAULT_IMAGE, DEFAULT_VLLM_VERSION

    listed = [line.strip() for line in (REPO / "images" / "vllm" / "SUPPORTED_VLLM").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    newest = max(listed, key=lambda v: tuple(int(part) for part in v.split(".")))
    assert DEFAULT_VLLM_VERSION == newest
    assert DEFAULT_IMAGE.rsplit(":", 1)[1].startswith(f"v{newest}-")


@pytest.mark.parametrize("revision, valid", [
    ("main", True), ("v1.0", True), ("refs/pr/1", True), ("a" * 40, True), ("release/2026.12", True),
    ("v1..v2", False), ("a//b", False), ("refs/.hidden", False), ("feature/", False), ("v1.", False),
    ("x.lock", False), ("x.lock/y", False),
])
def test_revisions_follow_gits_ref_name_rules(revision: str, valid: bool) -> None:
    # git check-ref-format agrees on every case here (checked by test_the_ref_rules_agree_with_git below).
    if valid:
        assert ModelRef(repo="a/b", revision=revision).revision == revision
    else:
        with pytest.raises(ValueError, match="git's ref-name rules"):
            ModelRef(repo="a/b", revision=revision)


def test_the_ref_rules_agree_with_git() -> None:
    git = shutil.which("git")
    assert git is not None, "git is needed to check the rule against git itself"
    for revision in ["main", "v1.0", "refs/pr/1", "release/2026.12", "v1..v2", "a//b", "refs/.hidden", "feature/",
                     "v1.", "x.lock", "x.lock/y", "a.b/c-d_e"]:
        # --allow-onelevel: hub revisions are single names as often as paths.
        agrees = subprocess.run([git, "check-ref-format", "--allow-onelevel", revision]).returncode == 0
        assert (not git_ref_problem(revision)) == agrees, revision
