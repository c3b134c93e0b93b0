"""A real hub-protocol server (olah, offline, serving local git mirrors) and the repositories a test puts in it.

The hub itself cannot be reached from here, so olah is the only stand-in: huggingface_hub talks to it exactly as it
would to the hub (revision API, HEAD/GET on /resolve/ with X-Repo-Commit and ETag). Each repository is a git
repository made with `git init/add/commit` (and a tag), under <mirrors>/models/<org>/<repo>.

The hub tier runs it on 127.0.0.1; the node tier and the demo run it on the real node's bridge address, where the
cache Job's pod reaches it as a company's hub mirror.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dflash_testkit import REPO

BUILD_VENV = REPO / "tests" / "hub" / "build_venv.sh"
# Straight to the address, whatever *_PROXY says: the hub is on this machine.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HubError(RuntimeError):
    """olah could not be built or did not start; the message holds the reason and its log's tail."""


@dataclass
class Hub:
    endpoint: str
    mirrors: Path
    log: Path
    process: subprocess.Popen

    def make_repo(self, name: str, files: dict[str, bytes], *, tag: str | None = None,
                  message: str = "add model") -> str:
        """Commits `files` into the git mirror of `name` (created if new); returns the commit id."""
        path = self.mirrors / "models" / name
        fresh = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        for rel, content in files.items():
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_bytes(content)
        return self._commit(path, fresh, tag, message)

    def publish(self, name: str, folder: Path, *, tag: str | None = None, message: str = "add model") -> str:
        """Commits a model folder (config, tokenizer, weights) as the repository `name`; returns the commit id."""
        path = self.mirrors / "models" / name
        fresh = not path.exists()
        shutil.copytree(folder, path, dirs_exist_ok=True)
        return self._commit(path, fresh, tag, message)

    def _commit(self, path: Path, fresh: bool, tag: str | None, message: str) -> str:
        git = ["git", "-C", str(path), "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
        if fresh:
            subprocess.run(git + ["init", "-q", "-b", "main"], check=True)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", message], check=True)
        if tag:
            subprocess.run(git + ["tag", tag], check=True)
        return subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def olah_python() -> Path:
    """The olah venv's python, built (once, cached) by tests/hub/build_venv.sh."""
    built = subprocess.run(["bash", str(BUILD_VENV)], capture_output=True, text=True)
    if built.returncode != 0:
        raise HubError(f"cannot build the olah venv ({BUILD_VENV}):\n{built.stderr[-3000:]}")
    return Path(built.stdout.strip().splitlines()[-1])


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_hub(workdir: Path, *, host: str = "127.0.0.1", port: int | None = None, python: Path | None = None) -> Hub:
    """olah on `host` (and `port`, else a free one), serving the git mirrors under `workdir`/mirrors, offline (it
    never reaches the real hub)."""
    olah_cli = (python or olah_python()).parent / "olah-cli"
    mirrors = workdir / "mirrors"
    (mirrors / "models").mkdir(parents=True, exist_ok=True)
    port = port or _free_port(host)
    config = workdir / "olah.toml"
    # metadata-cache-ttl 0: tests move branches while the server runs, and a cached branch -> commit would go stale.
    config.write_text(f"""[basic]
host = "{host}"
port = {port}
repos-path = "{workdir / 'repos'}"
mirrors-path = ["{mirrors}"]
metadata-cache-ttl = 0

[accessibility]
offline = true
""")
    log = workdir / "olah.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(olah_cli), "-c", str(config)], cwd=workdir, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    hub = Hub(f"http://{host}:{port}", mirrors, log, process)
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise HubError(f"olah exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            # Any HTTP answer means it is serving (its index page may answer 500: a template bug, not ours).
            DIRECT.open(hub.endpoint + "/api/models/ready/probe/revision/main", timeout=2).close()
            return hub
        except urllib.error.HTTPError:
            return hub
        except OSError:
            if time.monotonic() > deadline:
                hub.stop()
                tail = log.read_text()[-3000:]
                raise HubError(f"olah did not answer on {hub.endpoint} within 60 s:\n{tail}") from None
            time.sleep(0.2)
