"""The hub tier's fixtures: the real hub-protocol server (dflash_testkit.hub: olah, offline) on 127.0.0.1, tiny
models in it, and the fetch program run against it."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dflash_testkit.hub import Hub, HubError, olah_python, start_hub

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
FAKE_TOKEN = "hf_FAKEtokenThatMustNeverBePrinted0123456789"

TARGET_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 128,
    "vocab_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
}
DRAFT_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 128,
    "target_hidden_size": 128,
    "vocab_size": 1024,
    "num_hidden_layers": 1,
    "block_size": 16,
    "dflash_config": {"mask_token_id": 1023, "target_layer_ids": [1, 2]},
}


def tokenizer_json(vocab_size: int = 1024) -> bytes:
    """A small but well-formed BPE tokenizer.json (byte-level vocab plus merges-free filler tokens)."""
    vocab = {f"<t{i}>": i for i in range(vocab_size - 1)}
    data = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab_size - 1, "content": "<|MASK|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                              "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    return json.dumps(data, indent=2).encode()


def safetensors_blob(size: int, names: tuple[str, ...] = ("w",), seed: int = 0) -> bytes:
    """A valid safetensors file of about `size` bytes: U8 tensors over random bytes (incompressible, like weights)."""
    per = max(1, size // len(names))
    header = {n: {"dtype": "U8", "shape": [per], "data_offsets": [i * per, (i + 1) * per]} for i, n in enumerate(names)}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    rng = __import__("random").Random(seed)
    return struct.pack("<Q", len(raw)) + raw + rng.randbytes(per * len(names))


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    try:
        python = Path(os.environ["OLAH_PYTHON"]) if os.environ.get("OLAH_PYTHON") else olah_python()
        started = start_hub(tmp_path_factory.mktemp("olah"), python=python)
    except HubError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def models(hub: Hub) -> dict[str, str]:
    """The repositories every test uses, made once: name -> commit of main."""
    tok = tokenizer_json()
    made = {}
    made["org/target"] = hub.make_repo("org/target", {
        "config.json": json.dumps(TARGET_CONFIG, indent=2).encode(),
        "tokenizer.json": tok,
        "model-00001-of-00002.safetensors": safetensors_blob(12_000_000, ("model.embed_tokens.weight",), seed=1),
        "model-00002-of-00002.safetensors": safetensors_blob(12_000_000, ("lm_head.weight",), seed=2),
    }, tag="v1.0")
    made["org/draft"] = hub.make_repo("org/draft", {
        "config.json": json.dumps(DRAFT_CONFIG, indent=2).encode(),
        "model.safetensors": safetensors_blob(8_000_000, ("fc.weight", "norm.weight", "hidden_norm.weight"), seed=3),
    }, tag="v0.1")
    # A small target for the pairing cases, so each does not move 24 MB.
    made["org/small-target"] = hub.make_repo("org/small-target", {
        "config.json": json.dumps(TARGET_CONFIG, indent=2).encode(),
        "tokenizer.json": tok,
        "model.safetensors": safetensors_blob(100_000, ("w",), seed=4),
    }, tag="v2")
    return made


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    termination: dict | None

    @property
    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    @property
    def last(self) -> dict:
        return self.events[-1]


def make_env(hub: Hub, home: Path) -> dict[str, str]:
    """The fetch program's environment: only loopback, a private HF_HOME, and a fake token to look for."""
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY") and not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(home / "hf-home"),
               HF_TOKEN=FAKE_TOKEN, NO_PROXY="127.0.0.1,localhost", HF_HUB_DISABLE_XET="1",
               PYTHONPATH=str(REPO_ROOT / "operator"), PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def fetch_env(hub: Hub, tmp_path: Path) -> dict[str, str]:
    return make_env(hub, tmp_path)


def fetch_command(dest: Path, target: str, draft: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dflash_cache.fetch", "--target", target, "--draft", draft, "--dest", str(dest),
            "--termination-log", str(dest.parent / f"{dest.name}.termination-log"), "--progress-interval", "0.2",
            *extra]


def run_fetch(env: dict[str, str], dest: Path, target: str, draft: str, *extra: str, timeout: float = 180) -> Run:
    log = dest.parent / f"{dest.name}.termination-log"
    log.unlink(missing_ok=True)
    done = subprocess.run(fetch_command(dest, target, draft, *extra), env=env, capture_output=True, text=True,
                          timeout=timeout)
    termination = None
    if log.exists():
        text = log.read_bytes()
        assert len(text) < 4096, "a termination message over Kubernetes' 4 KiB cap"
        termination = json.loads(text)
    return Run(done.returncode, done.stdout, done.stderr, termination)


def assert_no_token(result: Run, dest: Path) -> None:
    """The fake HF_TOKEN must appear in nothing this program wrote."""
    texts = {"stdout": result.stdout, "stderr": result.stderr, "termination log": json.dumps(result.termination)}
    for path in dest.rglob("*.json"):
        texts[str(path)] = path.read_text()
    for where, text in texts.items():
        assert FAKE_TOKEN not in text and FAKE_TOKEN[3:20] not in text, f"the token leaked into {where}"


class RangeFront:
    """A pass-through in front of olah that honours `Range: bytes=N-`, as the hub's CDN does and olah's local
    mirrors do not. It forwards every request to olah unchanged and, for a ranged GET, skips the first N bytes of
    olah's answer and replies 206 with Content-Range. It serves bytes only olah gave it; it records the ranges asked.
    """

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading

        front = self
        self.upstream = upstream
        self.ranges: list[tuple[str, int]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet: pytest shows failures, not access logs
                pass

            def _forward(self, method: str) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "range", "connection")}
                request = urllib.request.Request(front.upstream + self.path, method=method, headers=headers)
                start = 0
                wanted = self.headers.get("Range", "")
                if method == "GET" and wanted.startswith("bytes=") and wanted.endswith("-"):
                    start = int(wanted[6:-1])
                    front.ranges.append((self.path, start))
                try:
                    upstream = urllib.request.urlopen(request, timeout=30)
                except urllib.error.HTTPError as error:
                    upstream = error
                with upstream:
                    status = upstream.status if hasattr(upstream, "status") else upstream.code
                    length = upstream.headers.get("Content-Length")
                    if length is None and status == 200:  # olah streams GET bodies chunked: HEAD tells the size
                        head = urllib.request.Request(front.upstream + self.path, method="HEAD", headers=headers)
                        with urllib.request.urlopen(head, timeout=30) as answer:
                            length = answer.headers.get("Content-Length")
                    length = int(length or 0)
                    passthrough = {k: v for k, v in upstream.headers.items()
                                   if k.lower() not in ("content-length", "transfer-encoding", "connection", "date",
                                                        "server")}
                    if start and status == 200:
                        if start >= length:
                            self.send_response(416)
                            self.send_header("Content-Range", f"bytes */{length}")
                            self.send_header("Content-Length", "0")
                            self.end_headers()
                            return
                        self.send_response(206)
                        self.send_header("Content-Range", f"bytes {start}-{length - 1}/{length}")
                        body_length = length - start
                    else:
                        self.send_response(status)
                        body_length = length
                    for key, value in passthrough.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(body_length))
                    self.end_headers()
                    if method == "HEAD":
                        return
                    skip = start if status == 200 else 0
                    while block := upstream.read(256 * 1024):
                        if skip:
                            cut = min(skip, len(block))
                            block, skip = block[cut:], skip - cut
                        if block:
                            self.wfile.write(block)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_HEAD(self) -> None:
                self._forward("HEAD")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
