"""The chart's monitoring objects as Prometheus and Grafana read them: its alert rules as a rule file, and every
query of its dashboard with Grafana's variables filled in, for promtool and for a real Prometheus."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

from dflash_testkit.helm import CHART

RELEASE = "dfo"


def render(helm_binary: Path, *values: str) -> list[dict]:
    """`helm template` of the chart with the monitoring objects on, plus `values` (--set pairs)."""
    args = [str(helm_binary), "template", RELEASE, str(CHART), "-n", "dflash-system",
            "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.podMonitor.enabled=true",
            "--set", "metrics.dashboard.enabled=true"]
    for value in values:
        args += ["--set", value]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout
    return [o for o in yaml.safe_load_all(out) if o]


def rule_file(objects: list[dict], path: Path) -> Path:
    """The PrometheusRule's groups, written as the rule file a plain Prometheus (and promtool) loads."""
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def dashboard(objects: list[dict]) -> dict:
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    (text,) = config_map["data"].values()
    return json.loads(text)


def dashboard_queries(board: dict, rate_interval: str = "1m") -> dict[str, str]:
    """'panel title / refId' -> PromQL as Grafana sends it with every variable at All."""
    queries = {}
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", rate_interval)
            expr = re.sub(r"\$(namespace|dflashdeployment)\b", ".*", expr)
            queries[f"{panel['title']} / {target['refId']}"] = expr
    return queries
