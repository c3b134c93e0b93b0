"""The probe's parsing and decisions, and its failure lines against loopback stand-ins (no vLLM needed)."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _load import load

probe = load("probe")

METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 3.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.79e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 9.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="tiny"} 6.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="other"} 100.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 3.0
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
"""


def test_parse_counters_sums_engines_of_the_model_only():
    assert probe.parse_counters(METRICS, "tiny") == probe.SpecCounters(3.0, 15.0, 7.0)
    assert probe.parse_counters(METRICS, None).draft_tokens == 115.0


def test_parse_counters_without_spec_decode_is_zero():
    assert probe.parse_counters('vllm:num_requests_running{model_name="tiny"} 1.0\n', "tiny") == probe.SpecCounters()


def test_judge_ok_reports_acceptance_and_mean_accepted_length():
    stats = probe.stats_from_counters(probe.SpecCounters(2, 6, 4), probe.SpecCounters(5, 15, 13))
    ok, check, line = probe.judge(stats, 0.5)
    assert (ok, check) == (True, "ok")
    assert line == ("OK acceptance 1.00 >= floor 0.50 (9 of 9 draft tokens accepted in 3 drafts), "
                    "mean accepted length 4.00 [metrics]")


def test_judge_fails_below_the_floor_with_the_numbers():
    stats = probe.stats_from_counters(probe.SpecCounters(), probe.SpecCounters(31, 93, 0))
    assert probe.judge(stats, 0.5) == (False, "acceptance", "FAIL acceptance 0.00 < floor 0.50: "
                                                          "0 of 93 draft tokens accepted")


def test_judge_floor_zero_passes_any_active_speculation():
    stats = probe.stats_from_counters(probe.SpecCounters(), probe.SpecCounters(31, 93, 0))
    assert probe.judge(stats, 0.0)[0] is True


def test_judge_fails_when_nothing_was_drafted():
    before = after = probe.SpecCounters(4, 12, 12)
    stats = probe.stats_from_counters(before, after)
    assert probe.judge(stats, 0.0, before, after) == (
        False, "speculation", "FAIL speculation not active: draft tokens 12 -> 12 during the probe")


def test_stats_from_response_uses_per_request_metrics():
    body = {"metrics": {"speculative_decoding": {
        "mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5, "acceptance_histogram": [0, 1, 1, 0],
        "num_spec_steps": 2, "num_accepted_draft_tokens": 3, "num_draft_tokens": 6, "num_spec_tokens": 3}}}
    stats = probe.stats_from_response(body)
    assert (stats.acceptance, stats.mean_accepted_length, stats.source) == (0.5, 2.5, "response")
    assert probe.stats_from_response({"metrics": None}) is None
    assert probe.stats_from_response({}) is None


def test_completion_tokens_rejects_an_empty_answer():
    assert probe.completion_tokens({"choices": [{"text": "ab"}], "usage": {"completion_tokens": 2}}) == 2
    with pytest.raises(probe.ProbeFailure, match="^completion: response has no completion text"):
        probe.completion_tokens({"choices": []})
    with pytest.raises(probe.ProbeFailure, match="^completion: server generated 0 tokens$"):
        probe.completion_tokens({"choices": [{"text": ""}], "usage": {"completion_tokens": 0}})


def test_min_acceptance_outside_0_1_is_a_usage_error():
    with pytest.raises(SystemExit):
        probe.parse_args(["--min-acceptance", "1.5"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_server_down_is_a_completion_failure(capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    assert probe.main(["--url", url]) == 1
    assert capsys.readouterr().out == f"FAIL completion: server unreachable at {url}: connection refused\n"


def test_a_server_that_never_answers_times_out_within_the_budget(capsys):
    # Listening but never accepting: the kernel completes the handshake, no HTTP reply ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        start = time.monotonic()
        assert probe.main(["--url", f"http://127.0.0.1:{silent.getsockname()[1]}", "--timeout", "1"]) == 1
        elapsed = time.monotonic() - start
    assert capsys.readouterr().out == "FAIL completion: timed out after 1 s\n"
    assert elapsed < 2.5


class _FakeVLLM(BaseHTTPRequestHandler):
    """A stand-in OpenAI server whose spec counters move by `step` on each completion."""

    step = probe.SpecCounters(3, 9, 9)
    counters = probe.SpecCounters()
    lag_s = 0.0
    delay_s = 0.0  # before every answer

    def do_GET(self):
        time.sleep(self.delay_s)
        if self.path == "/v1/models":
            self._send(json.dumps({"data": [{"id": "tiny"}]}), "application/json")
        elif self.path == "/metrics":
            c = type(self).counters
            self._send(f'{probe.DRAFTS}{{model_name="tiny"}} {c.drafts}\n'
                       f'{probe.DRAFT_TOKENS}{{model_name="tiny"}} {c.draft_tokens}\n'
                       f'{probe.ACCEPTED_TOKENS}{{model_name="tiny"}} {c.accepted_tokens}\n', "text/plain")

    def do_POST(self):
        time.sleep(self.delay_s)
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert request["temperature"] == 0 and request["model"] == "tiny"
        cls, step = type(self), type(self).step
        # Stats land after the response, as in vLLM's API server.
        land = threading.Timer(cls.lag_s, lambda: setattr(cls, "counters", probe.SpecCounters(
            cls.counters.drafts + step.drafts, cls.counters.draft_tokens + step.draft_tokens,
            cls.counters.accepted_tokens + step.accepted_tokens)))
        land.daemon = True
        land.start()
        self._send(json.dumps({"choices": [{"text": "!!!!"}], "usage": {"completion_tokens": 8}}),
                   "application/json")

    def _send(self, body: str, content_type: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_vllm():
    _FakeVLLM.counters = probe.SpecCounters()
    _FakeVLLM.delay_s = 0.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeVLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_probe_waits_for_counters_that_land_after_the_response(fake_vllm, capsys, tmp_path):
    _FakeVLLM.lag_s = 0.3
    out = tmp_path / "result.json"
    url = f"http://127.0.0.1:{fake_vllm.server_address[1]}"
    assert probe.main(["--url", url, "--min-acceptance", "0.9", "--json", str(out)]) == 0
    assert capsys.readouterr().out.startswith("OK acceptance 1.00 >= floor 0.90 (9 of 9 draft tokens accepted")
    result = json.loads(out.read_text())
    assert result["ok"] and result["completion_tokens"] == 8 and result["stats"]["mean_accepted_length"] == 4.0


def test_probe_reports_inactive_speculation_when_counters_never_move(fake_vllm, capsys):
    _FakeVLLM.lag_s = 5.0  # beyond --stats-wait
    url = f"http://127.0.0.1:{fake_vllm.server_address[1]}"
    assert probe.main(["--url", url, "--stats-wait", "0.3"]) == 1
    line = capsys.readouterr().out
    assert line.startswith("FAIL speculation not active: draft tokens ") and line.endswith(" during the probe\n")


def test_a_slow_server_fails_within_the_whole_probe_budget(fake_vllm, capsys):
    # Each answer alone fits in --timeout; the three of them do not.
    _FakeVLLM.delay_s = 0.3
    url = f"http://127.0.0.1:{fake_vllm.server_address[1]}"
    start = time.monotonic()
    assert probe.main(["--url", url, "--timeout", "0.8"]) == 1
    assert time.monotonic() - start < 1.2
    assert capsys.readouterr().out == "FAIL completion: timed out after 0.8 s\n"


def test_an_http_error_names_the_status_and_path():
    error = urllib.error.HTTPError("http://127.0.0.1:8000/v1/completions", 404, "Not Found", {},
                                   io.BytesIO(b'{"detail":"Not Found"}'))
    assert probe.describe_error(error, "http://127.0.0.1:8000", "/v1/completions", 10) == (
        'HTTP 404 from /v1/completions: {"detail":"Not Found"}')


def test_a_proxy_in_the_environment_is_not_used(fake_vllm, capsys, monkeypatch):
    # A proxy that does not exist: going through it would fail the probe.
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{_free_port()}")
    monkeypatch.setenv("no_proxy", "")
    _FakeVLLM.lag_s = 0.0
    assert probe.main(["--url", f"http://127.0.0.1:{fake_vllm.server_address[1]}", "--min-acceptance", "0"]) == 0


def test_without_speculation_the_probe_asks_only_for_a_completion(fake_vllm, capsys):
    # The Fallback pods serve the target alone: no counter ever moves, and that is not a failure.
    _FakeVLLM.lag_s = 5.0
    url = f"http://127.0.0.1:{fake_vllm.server_address[1]}"
    assert probe.main(["--url", url, "--no-speculation", "--stats-wait", "0.3"]) == 0
    assert capsys.readouterr().out == "OK 8 tokens generated without speculation (--no-speculation)\n"


def test_without_speculation_a_server_that_is_down_still_fails(capsys):
    assert probe.main(["--url", f"http://127.0.0.1:{_free_port()}", "--no-speculation", "--timeout", "1"]) == 1
    assert capsys.readouterr().out.startswith("FAIL completion: server unreachable")
