"""The chart's alert rules under the real promtool: `check rules`, then the cases in prometheus/alerts-test.yaml
(each alert fires when it should, after its `for`, with its annotations, and not otherwise)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dflash_testkit.controlplane import build_binaries
from dflash_testkit.monitoring import dashboard, dashboard_queries, render, rule_file

pytestmark = pytest.mark.cluster

CASES = Path(__file__).parent / "prometheus" / "alerts-test.yaml"


@pytest.fixture(scope="module")
def binaries() -> Path:
    return build_binaries()


def promtool(binaries: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(binaries / "promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_charts_rules_pass_promtools_check_and_every_case(binaries: Path, tmp_path: Path) -> None:
    rules = rule_file(render(binaries / "helm"), tmp_path / "rules.yaml")
    checked = promtool(binaries, "check", "rules", str(rules), cwd=tmp_path)
    assert checked.returncode == 0 and "SUCCESS: 6 rules found" in checked.stdout, checked.stdout + checked.stderr
    shutil.copy(CASES, tmp_path / CASES.name)
    tested = promtool(binaries, "test", "rules", CASES.name, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_a_broken_expectation_fails_promtool(binaries: Path, tmp_path: Path) -> None:
    # The cases above can fail: the same file with one alert expected too early is refused.
    rule_file(render(binaries / "helm"), tmp_path / "rules.yaml")
    text = CASES.read_text().replace("  - eval_time: 16m\n    alertname: DFlashStalled", "  - eval_time: 12m\n"
                                     "    alertname: DFlashStalled", 1)
    assert "eval_time: 12m" in text
    (tmp_path / CASES.name).write_text(text)
    tested = promtool(binaries, "test", "rules", CASES.name, cwd=tmp_path)
    assert tested.returncode != 0 and "DFlashStalled" in tested.stdout + tested.stderr


def test_the_for_durations_come_from_values(binaries: Path, tmp_path: Path) -> None:
    objects = render(binaries / "helm", "metrics.prometheusRule.for.acceptanceBelowFloor=2m")
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    durations = {r["alert"]: r.get("for") for g in rule["spec"]["groups"] for r in g["rules"]}
    assert durations["DFlashAcceptanceBelowFloor"] == "2m" and durations["DFlashStalled"] == "15m"


def test_every_dashboard_query_is_valid_promql(binaries: Path, tmp_path: Path) -> None:
    # promtool parses each query the way Prometheus does; the node tier runs them against live vLLM too.
    queries = dashboard_queries(dashboard(render(binaries / "helm")))
    assert len(queries) >= 10
    for title, expr in queries.items():
        parsed = promtool(binaries, "promql", "--experimental", "format", expr, cwd=tmp_path)
        assert parsed.returncode == 0, f"{title}: {expr}\n{parsed.stderr}"
