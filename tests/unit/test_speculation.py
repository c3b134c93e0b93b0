"""Reading vLLM's spec-decode counters, and the rule that only allowed addresses are dialled."""

from __future__ import annotations

import ipaddress

import pytest

from dflash_operator.speculation.counters import (
    AddressNotAllowed,
    PodMetrics,
    SpecCounters,
    metrics_url,
    parse_pod_metrics,
)

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
vllm:num_requests_running{engine="1",model_name="m"} 12.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 6.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 4.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 48.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 32.0
# HELP vllm:spec_decode_num_draft_tokens_created Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_created gauge
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="m"} 1.7e9
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 10.0
"""


def test_counters_are_summed_over_engines_and_each_engine_keeps_its_running_batch() -> None:
    metrics = parse_pod_metrics(VLLM_METRICS)
    assert metrics is not None
    counters = metrics.counters
    assert counters == SpecCounters(drafts=10, draft_tokens=80, accepted_tokens=40)
    # Batch sizes are per engine, never summed: engine 1's 12 running requests are not a batch of 12 on engine 0.
    assert metrics.running == (0, 12)
    assert counters.acceptance_rate == pytest.approx(0.5)
    assert counters.mean_accepted_length == pytest.approx(5.0)


def test_server_without_speculation_has_no_counters() -> None:
    assert parse_pod_metrics(VLLM_METRICS.split("# HELP vllm:spec_decode_num_drafts_total")[0]) is None


def test_a_server_without_the_running_gauge_still_gives_its_counters() -> None:
    text = VLLM_METRICS.split("# HELP vllm:spec_decode_num_drafts_total")[1]
    assert parse_pod_metrics("# HELP vllm:spec_decode_num_drafts_total" + text) == PodMetrics(
        SpecCounters(drafts=10, draft_tokens=80, accepted_tokens=40), running=())


def test_no_drafts_means_no_rate() -> None:
    assert SpecCounters().acceptance_rate is None and SpecCounters().mean_accepted_length is None


def test_only_allowed_networks_are_dialled() -> None:
    loopback = [ipaddress.ip_network("127.0.0.0/8")]
    assert metrics_url("127.1.0.7", 8000, loopback) == "http://127.1.0.7:8000/metrics"
    with pytest.raises(AddressNotAllowed):
        metrics_url("10.244.1.7", 8000, loopback)
    assert metrics_url("fd00::7", 8000, []) == "http://[fd00::7]:8000/metrics"
