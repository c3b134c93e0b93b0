"""`dflash-operator render` prints exactly what the operator would apply, and says why when it cannot."""

from __future__ import annotations

from pathlib import Path

import yaml

from dflash_operator.runtime.cli import main

GOLDEN = Path(__file__).parent / "golden"


def test_render_prints_the_golden_objects(capsys) -> None:
    assert main(["render", "-f", str(GOLDEN / "full.input.yaml")]) == 0
    assert capsys.readouterr().out == (GOLDEN / "full.output.yaml").read_text()


def test_render_reports_an_unrenderable_spec(tmp_path: Path, capsys) -> None:
    body = yaml.safe_load((GOLDEN / "minimal.input.yaml").read_text())
    body["spec"]["extraArgs"] = ["--port=1"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    assert main(["render", "-f", str(path)]) == 1
    assert capsys.readouterr().err.startswith("ExtraArgsCollide: spec.extraArgs ['--port=1']")


def test_render_reports_a_schema_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: serving.dflash.dev/v1alpha1\nkind: DFlashDeployment\nmetadata: {name: x}\n"
                    "spec: {target: {repo: a/b}}\n")
    assert main(["render", "-f", str(path)]) == 1
    assert "draft" in capsys.readouterr().err


def test_check_pair_on_unreadable_dirs_fails_with_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["check-pair", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "cannot check pair" in capsys.readouterr().err


def test_run_without_any_cluster_configuration_says_so(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["run"]) == 2
    assert "no Kubernetes configuration" in capsys.readouterr().err
