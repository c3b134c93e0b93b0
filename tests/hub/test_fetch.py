"""The cache Job's program against a real hub-protocol server: resolution, verified downloads, resume after SIGKILL,
corruption, errors, pairing verdicts, and a token that never leaks."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hubtools import (
    DRAFT_CONFIG,
    Hub,
    assert_no_token,
    fetch_command,
    make_env,
    run_fetch,
    safetensors_blob,
)

PAIR = ("org/target@main", "org/draft@main")


def mirror(hub: Hub, repo: str) -> Path:
    return hub.mirrors / "models" / repo


def assert_same_files(hub: Hub, repo: str, local: Path) -> None:
    src = mirror(hub, repo)
    want = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file() and ".git" not in p.parts)
    got = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert got == want
    for rel in want:
        assert (local / rel).read_bytes() == (src / rel).read_bytes(), rel


def git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture(scope="module")
def complete_cache(hub: Hub, models: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One full download of the big pair; tests that need a finished cache copy it instead of fetching again."""
    work = tmp_path_factory.mktemp("complete")
    result = run_fetch(make_env(hub, work), work / "cache", *PAIR)
    assert result.code == 0, result.stderr + result.stdout[-2000:]
    return work / "cache"


def copy_cache(complete: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "cache"
    shutil.copytree(complete, dest)
    return dest


def test_resolves_branch_and_tag_to_the_git_commits(hub: Hub, models: dict[str, str], fetch_env, tmp_path) -> None:
    dest = tmp_path / "cache"
    result = run_fetch(fetch_env, dest, "org/small-target@v2", "org/draft@v0.1")
    assert result.code == 0, result.stderr
    # draftBlockSize: the tiny draft declares block_size 16, which every deployment checks its own count against.
    assert result.termination == {"ok": True, "targetCommit": models["org/small-target"],
                                  "draftCommit": models["org/draft"], "draftBlockSize": 16, "problems": [],
                                  "error": None}
    resolved = next(e for e in result.events if e["event"] == "resolved")
    assert resolved["target"] == {"repo": "org/small-target", "revision": "v2", "commit": models["org/small-target"]}
    manifest = json.loads((dest / "manifest.json").read_text())
    assert (manifest["target"]["revision"], manifest["target"]["commit"]) == ("v2", models["org/small-target"])
    assert (manifest["draft"]["revision"], manifest["draft"]["commit"]) == ("v0.1", models["org/draft"])
    # A full commit id is a revision too.
    again = run_fetch(fetch_env, tmp_path / "by-commit", f"org/small-target@{models['org/small-target']}",
                      f"org/draft@{models['org/draft']}")
    assert again.code == 0 and again.termination["targetCommit"] == models["org/small-target"]
    assert_no_token(result, dest)


def test_downloads_both_models_byte_identical_and_verified(hub: Hub, models, complete_cache: Path, fetch_env,
                                                           tmp_path) -> None:
    assert_same_files(hub, "org/target", complete_cache / "target")
    assert_same_files(hub, "org/draft", complete_cache / "draft")
    assert not (complete_cache / ".partial").exists()
    manifest = json.loads((complete_cache / "manifest.json").read_text())
    assert manifest["compatible"] is True and manifest["problems"] == []
    for role, repo in (("target", "org/target"), ("draft", "org/draft")):
        assert manifest[role]["commit"] == models[repo]
        for item in manifest[role]["files"]:
            local = complete_cache / role / item["path"]
            assert item["size"] == local.stat().st_size
            assert item["hash"] == "gitsha1:" + git_blob_id(local)  # olah's etag of a plain git blob
    # The manifest is the last thing written.
    newest = max(p.stat().st_mtime_ns for p in complete_cache.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert (complete_cache / "manifest.json").stat().st_mtime_ns >= newest

    # A rerun on a complete cache checks sizes and fetches nothing.
    dest = copy_cache(complete_cache, tmp_path)
    start = time.monotonic()
    rerun = run_fetch(fetch_env, dest, *PAIR)
    assert rerun.code == 0, rerun.stderr
    assert rerun.last["event"] == "complete" and rerun.last["cached"] is True and rerun.last["bytesFetched"] == 0
    assert time.monotonic() - start < 20
    assert_no_token(rerun, dest)


def test_progress_lines_carry_totals_known_up_front(complete_cache: Path, hub, fetch_env, tmp_path) -> None:
    result = run_fetch(fetch_env, tmp_path / "cache", "org/small-target@main", "org/draft@main")
    assert result.code == 0
    progress = [e for e in result.events if e["event"] in ("progress", "complete")]
    assert progress, result.stdout
    totals = {(e["target"]["bytesTotal"], e["draft"]["bytesTotal"]) for e in progress}
    assert len(totals) == 1  # never revised while downloading
    assert all(0 <= e["percent"] <= 100 for e in progress)
    assert progress[-1]["percent"] == 100.0


def test_sigkill_mid_download_then_rerun_resumes(hub: Hub, models, fetch_env, tmp_path) -> None:
    dest = tmp_path / "cache"
    process = subprocess.Popen(fetch_command(dest, *PAIR), env=fetch_env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    killed_at = None
    assert process.stdout is not None
    for line in process.stdout:
        event = json.loads(line)
        # Kill once one model is complete and the other is part-way: the finished files must survive the kill.
        if (event["event"] == "progress" and event["draft"]["filesDone"] == event["draft"]["filesTotal"]
                and 0 < event["target"]["bytesDone"] < event["target"]["bytesTotal"]):
            process.send_signal(signal.SIGKILL)
            killed_at = event
            break
    process.wait(30)
    assert killed_at is not None, "the download finished before it could be killed"
    assert process.returncode == -signal.SIGKILL
    assert not (dest / "manifest.json").exists()  # no manifest after a kill
    partials = list((dest / ".partial").rglob("*.incomplete"))
    assert partials, "a killed download leaves its partial files"
    assert not list((dest / "target").rglob("*.incomplete"))  # never inside the directory vLLM loads

    total = killed_at["target"]["bytesTotal"] + killed_at["draft"]["bytesTotal"]
    rerun = run_fetch(fetch_env, dest, *PAIR)
    assert rerun.code == 0, rerun.stderr + rerun.stdout[-2000:]
    fetched = rerun.last["bytesFetched"]
    # The finished draft is reused; olah ignores Range, so a partial shard starts over (a Range-honouring hub resumes
    # it: see test_byte_range_resume_against_a_range_honouring_front).
    assert fetched <= total - killed_at["draft"]["bytesTotal"], (fetched, total)
    assert_same_files(hub, "org/target", dest / "target")
    assert_same_files(hub, "org/draft", dest / "draft")
    assert not (dest / ".partial").exists()
    assert_no_token(rerun, dest)


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as stream:
        stream.seek(offset)
        byte = stream.read(1)
        stream.seek(offset)
        stream.write(bytes([byte[0] ^ 0xFF]))


def test_truncated_cached_file_is_detected_by_size_and_refetched(hub, complete_cache, fetch_env, tmp_path) -> None:
    dest = copy_cache(complete_cache, tmp_path)
    shard = dest / "target" / "model-00002-of-00002.safetensors"
    size = shard.stat().st_size
    with shard.open("r+b") as stream:
        stream.truncate(size // 2)
    result = run_fetch(fetch_env, dest, *PAIR)
    assert result.code == 0, result.stderr
    corrupt = [e for e in result.events if e["event"] == "corrupt"]
    assert [(e["role"], e["path"]) for e in corrupt] == [("target", shard.name)]
    assert result.last["bytesFetched"] == size  # only that file came again
    assert_same_files(hub, "org/target", dest / "target")


def test_same_size_corruption_is_detected_by_hash_and_refetched(hub, complete_cache, fetch_env, tmp_path) -> None:
    dest = copy_cache(complete_cache, tmp_path)
    weights = dest / "draft" / "model.safetensors"
    flip_byte(weights, 1000)
    # With a manifest, a rerun checks sizes only, unless asked for hashes.
    quick = run_fetch(fetch_env, dest, *PAIR)
    assert quick.code == 0 and quick.last["cached"] is True
    full = run_fetch(fetch_env, dest, *PAIR, "--full-verify")
    assert full.code == 0, full.stderr
    assert [(e["role"], e["path"]) for e in full.events if e["event"] == "corrupt"] == [("draft", "model.safetensors")]
    assert full.last["bytesFetched"] == weights.stat().st_size
    assert_same_files(hub, "org/draft", dest / "draft")
    # Without a manifest (an interrupted run), every present file is hashed before it is trusted.
    flip_byte(weights, 2000)
    (dest / "manifest.json").unlink()
    again = run_fetch(fetch_env, dest, *PAIR)
    assert again.code == 0
    assert [e["path"] for e in again.events if e["event"] == "corrupt"] == ["model.safetensors"]
    assert_same_files(hub, "org/draft", dest / "draft")
    assert_no_token(again, dest)


def test_wrong_revision_fails_with_a_clear_reason(models, fetch_env, tmp_path) -> None:
    dest = tmp_path / "cache"
    result = run_fetch(fetch_env, dest, "org/target@nope", "org/draft@main")
    assert result.code == 4     # a verdict: the Job's podFailurePolicy fails at once instead of retrying
    assert result.termination == {"ok": False, "targetCommit": None, "draftCommit": None, "draftBlockSize": None,
                                  "problems": [], "error": "revision 'nope' of org/target not found on the hub"}
    assert result.stderr.strip() == "fetch failed: revision 'nope' of org/target not found on the hub"
    assert result.last == {"event": "error", "error": "revision 'nope' of org/target not found on the hub"}
    assert not (dest / "manifest.json").exists()

    missing = run_fetch(fetch_env, tmp_path / "other", "org/target@main", "org/no-such-draft@main")
    assert missing.code == 4
    assert missing.termination["targetCommit"] == models["org/target"]
    assert missing.termination["error"].startswith("repository org/no-such-draft not found on the hub")
    assert_no_token(result, dest)
    assert_no_token(missing, tmp_path / "other")


MISMATCHES = {
    "hidden": ({"target_hidden_size": 256}, "HiddenSizeMismatch", "256"),
    "vocab": ({"vocab_size": 4096}, "VocabSizeMismatch", "4096"),
    "layers": ({"dflash_config": {"mask_token_id": 1023, "target_layer_ids": [1, 6]}}, "TargetLayerIdOutOfRange",
               "target_layer_ids[1] = 6"),
}


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_mismatched_pair_is_cached_but_reported(case: str, hub: Hub, models, fetch_env, tmp_path) -> None:
    change, code, number = MISMATCHES[case]
    config = copy.deepcopy(DRAFT_CONFIG)
    config.update(change)
    repo = f"org/draft-bad-{case}"
    commit = hub.make_repo(repo, {"config.json": json.dumps(config).encode(),
                                  "model.safetensors": safetensors_blob(50_000, ("fc.weight",), seed=9)})
    dest = tmp_path / "cache"
    result = run_fetch(fetch_env, dest, "org/small-target@main", f"{repo}@main")
    assert result.code == 3, result.stderr
    term = result.termination
    assert term["ok"] is False and term["error"] is None and term["draftCommit"] == commit
    assert [p["code"] for p in term["problems"]] == [code]
    assert number in term["problems"][0]["message"]
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["compatible"] is False and manifest["problems"] == term["problems"]
    # A rerun on the cached pair gives the same verdict without fetching.
    again = run_fetch(fetch_env, dest, "org/small-target@main", f"{repo}@main")
    assert again.code == 3 and again.termination["problems"] == term["problems"] and again.last["bytesFetched"] == 0
    assert_no_token(result, dest)


def test_the_drafts_block_size_is_reported_for_each_sharer_to_check(models, fetch_env, tmp_path) -> None:
    # num_speculative_tokens is each sharer's own setting: the program reports the block size, the operator checks.
    dest = tmp_path / "cache"
    ok = run_fetch(fetch_env, dest, "org/small-target@main", "org/draft@main")
    assert ok.code == 0 and ok.termination["draftBlockSize"] == 16 and ok.termination["problems"] == []
    assert "numSpeculativeTokens" not in json.loads((dest / "manifest.json").read_text())


def test_a_cache_of_another_pair_is_not_clobbered(models, fetch_env, tmp_path) -> None:
    dest = tmp_path / "cache"
    assert run_fetch(fetch_env, dest, "org/small-target@main", "org/draft@main").code == 0
    before = (dest / "manifest.json").read_bytes()
    other = run_fetch(fetch_env, dest, "org/target@main", "org/draft@main")
    assert other.code == 1
    assert "refusing to overwrite" in other.termination["error"] and "org/small-target@" in other.termination["error"]
    assert (dest / "manifest.json").read_bytes() == before


def test_byte_range_resume_against_a_range_honouring_front(hub: Hub, models, tmp_path) -> None:
    """olah restarts a partial file (it ignores Range); the hub's CDN does not. Behind a front that honours Range,
    a killed download continues from the bytes already on disk: the rerun fetches exactly what was missing."""
    from hubtools import RangeFront

    front = RangeFront(hub.endpoint)
    try:
        env = make_env(hub, tmp_path)
        env["HF_ENDPOINT"] = front.endpoint
        dest = tmp_path / "cache"
        process = subprocess.Popen(fetch_command(dest, *PAIR, "--workers", "2"), env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None
        killed_at = None
        for line in process.stdout:
            event = json.loads(line)
            if event["event"] == "progress" and 0.2 < event["percent"] / 100 < 0.6:
                process.send_signal(signal.SIGKILL)
                killed_at = event
                break
        process.wait(30)
        assert killed_at is not None, ("the download finished before it could be killed", process.stderr.read()[-3000:])
        assert not (dest / "manifest.json").exists()
        partial_bytes = sum(p.stat().st_size for p in (dest / ".partial").rglob("*.incomplete"))
        complete_bytes = sum(p.stat().st_size for role in ("target", "draft") for p in (dest / role).rglob("*")
                             if p.is_file())
        assert partial_bytes > 0
        total = killed_at["target"]["bytesTotal"] + killed_at["draft"]["bytesTotal"]

        rerun = run_fetch(env, dest, *PAIR)
        assert rerun.code == 0, rerun.stderr + rerun.stdout[-2000:]
        assert rerun.last["bytesFetched"] == total - complete_bytes - partial_bytes
        assert any(start > 0 for _, start in front.ranges), front.ranges
        assert_same_files(hub, "org/target", dest / "target")
        assert_same_files(hub, "org/draft", dest / "draft")
        assert_no_token(rerun, dest)
    finally:
        front.close()
