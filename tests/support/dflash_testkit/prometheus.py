"""A real Prometheus server (built from its Go module by tests/cluster/build.sh) for tests: it scrapes only what the
test names (the operator on loopback, serving pods on the test's own bridge), loads the chart's rules, and answers
PromQL over its HTTP API on loopback."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from dflash_testkit.controlplane import free_port, http_ok, stop_process
from dflash_testkit.hub import DIRECT
from dflash_testkit.waiting import wait_for

SCRAPE_SECONDS = 2


@dataclass
class Prometheus:
    url: str
    targets_file: Path

    def set_pod_targets(self, pods: list[tuple[str, str, str, str]], port: int) -> None:
        """(namespace, pod, DFlashDeployment, pod IP) -> scraped with the labels the chart's PodMonitor gives."""
        groups = [{"targets": [f"{ip}:{port}"], "labels": {"namespace": ns, "pod": pod, "dflashdeployment": dfd}}
                  for ns, pod, dfd, ip in pods]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_file)

    def query(self, expr: str) -> list[dict]:
        """An instant query; raises on a PromQL error (what a dashboard panel would show as an error)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with DIRECT.open(url, timeout=30) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise AssertionError(f"{expr}: {body}")
        return body["data"]["result"]

    def firing(self, alert: str) -> list[dict]:
        return self.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')


@contextmanager
def running_prometheus(binary: Path, workdir: Path, rules: Path, operator_port: int,
                       operator_job: str) -> Iterator[Prometheus]:
    workdir.mkdir(parents=True, exist_ok=True)
    targets = workdir / "pods.json"
    targets.write_text("[]")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            # As the chart's ServiceMonitor: the Service's name is the job, and the operator's own labels win.
            {"job_name": operator_job, "honor_labels": True,
             "static_configs": [{"targets": [f"127.0.0.1:{operator_port}"]}]},
            {"job_name": "dflash-vllm", "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]},
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [str(binary), f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: process.poll() is not None or http_ok(f"{url}/-/ready"), "Prometheus ready", 60)
        if process.poll() is not None:
            raise RuntimeError(f"Prometheus exited:\n{(workdir / 'prometheus.log').read_text()[-3000:]}")
        yield Prometheus(url, targets)
    finally:
        stop_process(process)
        log.close()
