"""Starts vLLM on CPU in a subprocess (own process group, log to a file) for the vLLM tier and its benchmark."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# Settings that make vllm-cpu serve the tiny hybrid model on 2 cores (see FACTS.md).
CPU_ARGS = ["--dtype", "bfloat16", "--enforce-eager", "--no-enable-prefix-caching",
            "--gpu-memory-utilization", "0.2", "--max-model-len", "512"]
NUM_SPEC_TOKENS = 3
# Load-stage markers in a vLLM log (0.20 to 0.32 word them alike).
CRASH = "Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested"
# The tiny draft's target_layer_ids [1, 2]: vLLM taps the outputs of the layers after them.
AUX_LAYERS = "Using auxiliary layers from speculative config: (2, 3)"
WARMUP = "Warming up model for the compilation..."
PLUGIN_SRC = Path(__file__).resolve().parents[2] / "images" / "vllm" / "plugin"
CACHE_SRC = Path(__file__).resolve().parents[2] / "dflash-cache"


def build_wheel(work: Path, python: str = sys.executable) -> Path:
    """Builds the plugin wheel, and beside it the dflash-cache wheel it requires (the pair rules), from copies of
    their sources, so no build/ or *.egg-info lands in the repository; --no-isolation uses the venv's setuptools
    instead of downloading one. Returns the plugin's wheel; install_wheel installs both, as the image does."""
    for name, source in (("plugin-src", PLUGIN_SRC), ("cache-src", CACHE_SRC)):
        src = work / name
        shutil.copytree(source, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        subprocess.run([python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(work / "wheel"), str(src)],
                       check=True, capture_output=True)
    (wheel,) = (work / "wheel").glob("dflash_vllm-*.whl")
    return wheel


def install_wheel(wheel: Path, target: Path, python: str = sys.executable) -> Path:
    """pip install --target of the plugin wheel and the wheels beside it (dflash-cache): on PYTHONPATH it is the
    plugin (entry points, console script) without touching the venv, which stays clean for the runs without it."""
    wheels = sorted(str(w) for w in wheel.parent.glob("*.whl"))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(target),
                    *wheels], check=True)
    return target


def vllm_env(plugin_dir: Path | None = None) -> dict[str, str]:
    """Offline, loopback-only environment; `plugin_dir` (a pip --target dir) goes first on PYTHONPATH."""
    env = os.environ.copy()
    env.pop("PYTHONPATH", None)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_HOST_IP="127.0.0.1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    if plugin_dir is not None:
        env["PYTHONPATH"] = str(plugin_dir)
    return env


def spec_args(draft: Path, per_request: bool = False) -> list[str]:
    config = {"method": "dflash", "model": str(draft), "num_speculative_tokens": NUM_SPEC_TOKENS}
    args = ["--speculative-config", json.dumps(config)]
    return args + (["--per-request-spec-decode-metrics", "summary"] if per_request else [])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Proc:
    """A vLLM subprocess writing to `log`; `stop()` kills its whole process group (EngineCore included)."""

    popen: subprocess.Popen
    log: Path
    started: float = field(default_factory=time.monotonic)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def wait_for(self, needles: list[str], timeout: float) -> str | None:
        """The first of `needles` to appear in the log, or None once the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            # Exit status first, log second: a process that wrote its last line and exited is then still read.
            exited = self.popen.poll() is not None
            text = self.text()
            for needle in needles:
                if needle in text:
                    return needle
            if exited or time.monotonic() >= deadline:
                return None
            time.sleep(0.5)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(15)
        # Children that outlived the leader (EngineCore) are still in the group.
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def spawn(argv: list[str], log: Path, env: dict[str, str]) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Proc(popen, log)


@dataclass
class Server:
    proc: Proc
    url: str
    model: str
    start_s: float = 0.0

    def stop(self) -> None:
        self.proc.stop()


def start_server(model: Path, log: Path, extra: list[str], plugin_dir: Path | None,
                 python: str = sys.executable, timeout: float = 300) -> Server:
    """Starts the OpenAI server and returns once /v1/models answers; raises with the log tail otherwise."""
    port = free_port()
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), *CPU_ARGS, *extra]
    proc = spawn(argv, log, vllm_env(plugin_dir))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                if resp.status == 200:
                    return Server(proc, url, "tiny", time.monotonic() - proc.started)
        except OSError:
            time.sleep(0.5)
    proc.stop()
    raise RuntimeError(f"vLLM server did not come up (exit {proc.popen.poll()}); log tail:\n{proc.tail()}")


def complete(server: Server, prompt: str, max_tokens: int = 12, timeout: float = 60, **extra) -> dict:
    payload = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
               "ignore_eos": True, "return_token_ids": True, **extra}
    req = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)


def metrics(server: Server) -> str:
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as resp:
        return resp.read().decode()


def start_to_verdict(target: Path, draft: Path, plugin_dir: Path, logs: Path, needles: list[str],
                     timeout: float = 600, python: str = sys.executable) -> dict[str, tuple[Proc, str | None]]:
    """Starts the server for target + draft twice at once, without ("bare") and with ("plugin") the plugin on the
    path, and leaves each at the first of `needles` in its log (None if it exited or timed out first). The caller
    stops the processes. Both at once: on 2 cores starting is mostly waiting."""
    from concurrent.futures import ThreadPoolExecutor

    def run(name: str, plugin: Path | None) -> tuple[Proc, str | None]:
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
                "--host", "127.0.0.1", "--port", str(free_port()), *CPU_ARGS, *spec_args(draft)]
        proc = spawn(argv, logs / f"{name}.log", vllm_env(plugin))
        return proc, proc.wait_for(needles, timeout=timeout)

    with ThreadPoolExecutor(2) as pool:
        futures = {"bare": pool.submit(run, "bare", None), "plugin": pool.submit(run, "plugin", plugin_dir)}
        return {name: future.result() for name, future in futures.items()}
