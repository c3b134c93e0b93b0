"""Renderers against golden files, and the checks that keep a bad spec from being rendered at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from dflash_operator.api import DFlashDeployment
from dflash_operator.reconcile.validation import reserved_flag_collisions, spec_problems
from dflash_operator.render.cache import CacheConfig, cache_name
from dflash_operator.render.desired import desired_objects
from dflash_operator.render.serving import (
    CacheFacts,
    RenderConfig,
    render_deployment,
    speculative_config,
)

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name.removesuffix(".input.yaml") for p in GOLDEN.glob("*.input.yaml"))


def load(case: str) -> DFlashDeployment:
    return DFlashDeployment.model_validate(yaml.safe_load((GOLDEN / f"{case}.input.yaml").read_text()))


def facts(dfd: DFlashDeployment) -> CacheFacts:
    # No commits: exactly what `dflash-operator render` shows before the cache Job has resolved them.
    return CacheFacts(claim_name=cache_name(dfd))


def render_all(dfd: DFlashDeployment) -> list[dict]:
    return desired_objects(dfd, RenderConfig(), CacheConfig(), facts(dfd))


@pytest.mark.parametrize("case", CASES)
def test_rendered_objects_match_golden_file(case: str) -> None:
    rendered = yaml.safe_dump_all(render_all(load(case)), sort_keys=False, width=120)
    golden = GOLDEN / f"{case}.output.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file for {case}; run with UPDATE_GOLDEN=1 and review it"
    assert rendered == golden.read_text(), f"rendering of {case} changed; if intended, UPDATE_GOLDEN=1 and review"


def test_golden_cases_exist() -> None:
    assert {"minimal", "full"} <= set(CASES)


def test_rendering_is_deterministic() -> None:
    dfd = load("full")
    assert render_all(dfd) == render_all(load("full"))


def test_gpu_limit_and_request_equal_tensor_parallel_size() -> None:
    pod = render_deployment(load("full"), RenderConfig(), facts(load("full")))["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["amd.com/gpu"] == "4"
    assert container["resources"]["requests"]["amd.com/gpu"] == "4"
    assert container["resources"]["limits"]["memory"] == "256Gi"


def test_speculative_config_is_compact_json_with_method_dflash_and_the_cached_draft() -> None:
    assert speculative_config(load("minimal").spec) == (
        '{"method":"dflash","model":"/models/draft","num_speculative_tokens":8}'
    )


@pytest.mark.parametrize("args, colliding", [
    (["--port", "9000"], ["--port"]),
    (["--port=9000"], ["--port=9000"]),
    (["--tensor_parallel_size=2"], ["--tensor_parallel_size=2"]),
    (["-tp", "2"], ["-tp"]),
    (["--speculative-config={}"], ["--speculative-config={}"]),
    (["--model-impl", "vllm", "--max-num-seqs=8"], []),
])
def test_reserved_flag_collisions(args: list[str], colliding: list[str]) -> None:
    assert reserved_flag_collisions(args) == colliding


def _with(case: str, **spec: object) -> DFlashDeployment:
    body = yaml.safe_load((GOLDEN / f"{case}.input.yaml").read_text())
    body["spec"].update(spec)
    return DFlashDeployment.model_validate(body)


@pytest.mark.parametrize("spec, reason", [
    ({"extraArgs": ["-tp", "8"]}, "ExtraArgsCollide"),
    ({"resources": {"limits": {"amd.com/gpu": "1"}}}, "GpuInResources"),
    ({"env": [{"name": "HF_HOME", "value": "/tmp"}]}, "EnvCollides"),
    ({"env": [{"name": "FOO", "value": "a"}, {"name": "FOO", "value": "b"}]}, "EnvRepeated"),
    # Before any download: the image tag declares vLLM 0.28, which has no per-request speculative metrics.
    ({"image": "registry.example/vllm-dflash:v0.28.0-dflash.1", "perRequestSpeculativeMetrics": "Summary"},
     "NeedsNewerVLLM"),
    ({"image": "registry.example/vllm:latest", "vllmVersion": "0.24.0", "perRequestSpeculativeMetrics": "Summary"},
     "NeedsNewerVLLM"),
])
def test_unrenderable_specs_have_a_problem_with_a_reason(spec: dict, reason: str) -> None:
    assert [p.reason for p in spec_problems(_with("full", **spec))] == [reason]


def test_every_problem_is_reported_at_once_and_golden_inputs_have_none() -> None:
    both = _with("full", extraArgs=["--port=1"], env=[{"name": "HF_HOME", "value": "/x"}])
    assert [p.reason for p in spec_problems(both)] == ["ExtraArgsCollide", "EnvCollides"]
    assert all(spec_problems(load(case)) == [] for case in CASES)
    bad_name = DFlashDeployment.model_validate({**load("minimal").model_dump(by_alias=True), "metadata": {
        **load("minimal").metadata, "name": "9-starts-with-a-digit"}})
    assert [p.reason for p in spec_problems(bad_name)] == ["InvalidName"]


def test_hub_token_reaches_only_the_cache_job_and_by_reference() -> None:
    objects = render_all(load("full"))
    job = next(o for o in objects if o["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    token = next(e for e in pod["initContainers"][0]["env"] if e["name"] == "HF_TOKEN")
    assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    # Not even the Job's check step, which runs the serving image and never reaches the hub.
    others = yaml.safe_dump_all([o for o in objects if o["kind"] != "Job"] + pod["containers"])
    assert "hf-token" not in others and "HF_TOKEN" not in others


def test_the_pair_is_checked_by_the_serving_image_after_the_download_without_a_gpu() -> None:
    from dflash_operator.render.cache import render_cache_job

    dfd = _with("full", image="registry.example/vllm-dflash:v0.24.0-dflash.1")
    job = render_cache_job(dfd, CacheConfig())
    pod = job["spec"]["template"]["spec"]
    (fetch,), (check,) = pod["initContainers"], pod["containers"]
    assert fetch["image"] == CacheConfig().image and "--pair-verdict-by-image" in fetch["args"]
    assert check["image"] == "registry.example/vllm-dflash:v0.24.0-dflash.1"
    assert check["args"] == ["/cache/target", "/cache/draft"]
    assert check["volumeMounts"][0] == {"name": "cache", "mountPath": "/cache", "readOnly": True}
    assert not any("gpu" in r for part in check["resources"].values() for r in part)
    env = {e["name"]: e["value"] for e in check["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    # Verdicts of either step fail the Job at once; anything else (a crash, an OOM kill) is retried.
    rules = {r["onExitCodes"]["containerName"]: r["onExitCodes"]["values"]
             for r in job["spec"]["podFailurePolicy"]["rules"]}
    assert rules == {"fetch": [3, 4], "check-pair": [1, 2]}


def test_the_check_step_without_dflash_check_pair_leaves_a_readable_note(tmp_path) -> None:
    """The check container's shell, run here: an image without the checker exits 0 and says so; with it, the
    checker gets the cache paths and writes its verdict to the termination log."""
    import json
    import os
    import subprocess

    from dflash_operator.render.cache import render_cache_job

    check = render_cache_job(load("minimal"), CacheConfig())["spec"]["template"]["spec"]["containers"][0]
    script = check["command"][2].replace("/dev/termination-log", str(tmp_path / "message"))
    bare = {"PATH": str(tmp_path / "empty-bin")}
    result = subprocess.run(["/bin/sh", "-c", script, "check-pair", *check["args"]], env=bare)
    assert result.returncode == 0
    assert "has no dflash-check-pair" in json.loads((tmp_path / "message").read_text())["noChecker"]
    fake = tmp_path / "bin" / "dflash-check-pair"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "$@" > "$2.args"; exit 1\n'.replace("$2.args", str(tmp_path / "args")))
    os.chmod(fake, 0o755)
    result = subprocess.run(["/bin/sh", "-c", script, "check-pair", *check["args"]],
                            env={"PATH": f"{fake.parent}:/usr/bin:/bin"})
    assert result.returncode == 1
    assert (tmp_path / "args").read_text().split() == ["--output", str(tmp_path / "message"), "/cache/target",
                                                       "/cache/draft"]


def test_serving_pods_mount_the_cache_read_only_and_run_offline() -> None:
    dfd = load("minimal")
    pod = render_deployment(dfd, RenderConfig(), facts(dfd))["spec"]["template"]["spec"]
    models = next(v for v in pod["volumes"] if v["name"] == "models")
    assert models["persistentVolumeClaim"] == {"claimName": cache_name(dfd), "readOnly": True}
    container = pod["containers"][0]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]
    assert container["args"][:2] == ["--model", "/models/target"]
    assert all(m.get("readOnly") for m in container["volumeMounts"] if m["name"] == "models")


def test_same_pair_shares_one_cache_and_another_pair_does_not() -> None:
    a, b = load("minimal"), _with("minimal", draft={"repo": "z-lab/Other-DFlash"})
    same = DFlashDeployment.model_validate({**a.model_dump(by_alias=True), "metadata": {
        **a.metadata, "name": "second", "uid": "other"}})
    assert cache_name(a) == cache_name(same) != cache_name(b)


def test_resolved_commits_roll_the_pods() -> None:
    dfd = load("minimal")
    before = render_deployment(dfd, RenderConfig(), facts(dfd))["spec"]["template"]
    after = render_deployment(dfd, RenderConfig(), CacheFacts(cache_name(dfd), "a" * 40, "b" * 40))["spec"]["template"]
    assert after["metadata"]["annotations"] == {"serving.dflash.dev/target-commit": "a" * 40,
                                                "serving.dflash.dev/draft-commit": "b" * 40}
    assert before != after


def test_probe_command_is_one_the_images_probe_accepts() -> None:
    """The contract between the operator and the vLLM image: the rendered probe parses with the probe's own CLI."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "vllm" / "plugin"))
    from dflash_vllm.probe import parse_args

    dfd = load("full")
    command = render_deployment(dfd, RenderConfig(), facts(dfd))["spec"]["template"]["spec"]["containers"][0][
        "readinessProbe"]["exec"]["command"]
    assert command[0] == "dflash-probe"
    args = parse_args(command[1:])
    assert (args.url, args.model, args.prompt, args.max_tokens, args.min_acceptance, args.timeout) == (
        "http://127.0.0.1:8000", "Qwen/Qwen3-Coder-Next", "print(", 8, 0.3, 20.0)


def test_sharers_with_different_token_secrets_get_their_own_job_on_the_same_claim() -> None:
    from dflash_operator.render.cache import cache_job_name, render_cache_job

    plain, gated = load("minimal"), _with("minimal", hubTokenSecretRef={"name": "hub"})
    other = _with("minimal", hubTokenSecretRef={"name": "other-hub"})
    newer = _with("minimal", image="ghcr.io/dflash-dev/vllm-dflash:v0.24.0-dflash.1")
    names = [cache_job_name(dfd, CacheConfig()) for dfd in (plain, gated, other, newer)]
    assert all(n.startswith(cache_name(plain) + "-") for n in names) and len(set(names)) == 4
    for dfd in (plain, gated, other, newer):
        volumes = render_cache_job(dfd, CacheConfig())["spec"]["template"]["spec"]["volumes"]
        assert volumes[0]["persistentVolumeClaim"]["claimName"] == cache_name(plain)


def test_hub_endpoint_from_the_spec_wins_over_the_operators_and_names_its_own_job() -> None:
    from dflash_operator.render.cache import cache_job_name, render_cache_job

    def hub_env(dfd, config: CacheConfig) -> list[str]:
        env = render_cache_job(dfd, config)["spec"]["template"]["spec"]["initContainers"][0]["env"]
        return [e["value"] for e in env if e["name"] == "HF_ENDPOINT"]

    plain, mirrored = load("minimal"), _with("minimal", hubEndpoint="https://hub.example.internal/hf")
    operator_mirror = CacheConfig(hub_endpoint="http://mirror.example.internal:8080")
    assert hub_env(plain, CacheConfig()) == []        # huggingface_hub's own default
    assert hub_env(plain, operator_mirror) == ["http://mirror.example.internal:8080"]
    assert hub_env(mirrored, operator_mirror) == ["https://hub.example.internal/hf"]
    # A Job's pod template is immutable: each hub gets its own Job, all on the one claim of the pair.
    names = {cache_job_name(plain, CacheConfig()), cache_job_name(plain, operator_mirror),
             cache_job_name(mirrored, operator_mirror)}
    assert len(names) == 3 and all(n.startswith(cache_name(plain)) for n in names)


def test_sharers_of_a_claim_never_ask_it_to_shrink() -> None:
    """Found by the fuzz test: two deployments of one pair with different cache.size took the claim's size from each
    other (and a shrink is refused). A sharer asks for more only when it wants more than the claim has."""
    from dflash_operator.render.cache import claim_not_smaller, render_cache_pvc

    def size(claim: dict) -> str:
        return claim["spec"]["resources"]["requests"]["storage"]

    wants_200 = render_cache_pvc(_with("minimal", cache={"size": "200Gi"}))
    assert claim_not_smaller(wants_200, None) == wants_200
    grown = {**wants_200, "spec": {**wants_200["spec"], "resources": {"requests": {"storage": "1.5Ti"}}}}
    assert size(claim_not_smaller(wants_200, grown)) == "1.5Ti"
    small = {**wants_200, "spec": {**wants_200["spec"], "resources": {"requests": {"storage": "100Gi"}}}}
    assert size(claim_not_smaller(wants_200, small)) == "200Gi", "a sharer that wants more still asks to grow"
    assert size(wants_200) == "200Gi", "pure: the rendered claim is not changed"


def _empty_strings(node: object, path: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for key, value in node.items() for p in _empty_strings(value, f"{path}.{key}")]
    if isinstance(node, list):
        return [p for i, value in enumerate(node) for p in _empty_strings(value, f"{path}[{i}]")]
    return [path] if node == "" else []


@pytest.mark.parametrize("case", CASES)
def test_rendered_children_hold_no_value_the_api_server_drops(case: str) -> None:
    """Found by bench/scale.py (877 Job applies in 60 s idle): an env value "" is dropped by the API server, so the
    stored Job never covered the rendered one and every pass applied it again. Empty strings in struct fields are
    what it drops (omitempty); values in maps (labels, annotations) it keeps."""
    objects = render_all(load(case))
    dropped = [p for o in objects for p in _empty_strings(o, o["kind"])
               if ".annotations." not in p and ".labels." not in p]   # map values: kept as written
    assert dropped == []
