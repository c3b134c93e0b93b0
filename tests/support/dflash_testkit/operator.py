"""The real operator (`dflash-operator run`) as its own process against a test API server, configured through the
same DFLASH_* variables the chart sets."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from dflash_testkit.controlplane import free_port, http_ok, stop_process
from dflash_testkit.waiting import wait_for


@contextmanager
def running_operator(kubeconfig: Path, log: Path, settings: Mapping[str, str],
                     namespaces: tuple[str, ...] = (), liveness_port: int | None = None,
                     ) -> Iterator[subprocess.Popen]:
    """Starts the operator, waits for its liveness endpoint, and stops it (SIGTERM, then SIGKILL) on exit.
    `settings` are DFLASH_* variables; `namespaces` are its -n patterns (empty: every namespace)."""
    port = liveness_port or free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), **settings}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dflash_operator", "run", *(f"--namespace={n}" for n in namespaces),
             "--liveness", f"http://127.0.0.1:{port}/healthz"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: process.poll() is not None or http_ok(f"http://127.0.0.1:{port}/healthz"),
                 "the operator's liveness endpoint", 60)
        if process.poll() is not None:
            raise RuntimeError(f"the operator exited at start:\n{log.read_text()[-3000:]}")
        yield process
    finally:
        stop_process(process)
