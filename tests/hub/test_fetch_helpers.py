"""The fetch program's pure helpers: hash rules, Range parsing, progress and termination formats, redaction."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from dflash_cache.fetch import (
    FetchError,
    RemoteFile,
    content_range_start,
    expected_hash,
    hash_file,
    parse_ref,
    progress_line,
    redactor,
    verify_local,
    write_atomic,
)
from dflash_cache.pairing import Problem
from dflash_testkit.cachejob import termination_message


def test_etags_name_their_algorithm() -> None:
    assert expected_hash('"' + "a" * 64 + '"') == ("sha256", "a" * 64)
    assert expected_hash('W/"' + "B" * 40 + '"') == ("gitsha1", "b" * 40)
    with pytest.raises(FetchError):
        expected_hash('"xet-abc"')
    with pytest.raises(FetchError):
        expected_hash(None)


def test_git_blob_id_matches_git(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"some model bytes\n" * 1000)
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    assert hash_file(path, "gitsha1", path.stat().st_size) == git
    assert hash_file(path, "sha256", path.stat().st_size) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_verify_local_checks_size_before_hash(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    digest = hashlib.sha256(b"abc").hexdigest()
    assert verify_local(path, RemoteFile("f", 3, "sha256", digest), hashes=True) is None
    assert verify_local(path, RemoteFile("f", 4, "sha256", digest), hashes=True) == "size 3 != 4"
    assert verify_local(path, RemoteFile("f", 3, "sha256", "0" * 64), hashes=False) is None
    assert verify_local(path, RemoteFile("f", 3, "sha256", "0" * 64), hashes=True).startswith("sha256 ")
    assert verify_local(tmp_path / "nope", RemoteFile("f", 3, "sha256", digest), hashes=True) == "missing"


def test_content_range() -> None:
    assert content_range_start("bytes 100-199/200") == 100
    assert content_range_start("bytes 0-0/*") == 0
    assert content_range_start(None) is None and content_range_start("items 1-2/3") is None


def test_refs() -> None:
    assert (parse_ref("org/m@v1").repo, parse_ref("org/m@v1").revision) == ("org/m", "v1")
    assert parse_ref("org/m").revision == "main"
    with pytest.raises(ValueError):
        parse_ref("no-org@main")


def test_progress_line() -> None:
    snap = {"target": {"bytesDone": 50, "bytesTotal": 100, "filesDone": 0, "filesTotal": 1},
            "draft": {"bytesDone": 0, "bytesTotal": 100, "filesDone": 0, "filesTotal": 1}}
    line = json.loads(progress_line(snap))
    assert line["event"] == "progress" and line["percent"] == 25.0 and line["target"]["bytesDone"] == 50
    empty = {r: {"bytesDone": 0, "bytesTotal": 0, "filesDone": 0, "filesTotal": 0} for r in ("target", "draft")}
    assert json.loads(progress_line(empty))["percent"] == 100.0


def test_termination_message_stays_under_4k() -> None:
    many = [Problem("TargetLayerIdOutOfRange", "x" * 500) for _ in range(50)]
    text = termination_message(ok=False, target_commit="a" * 40, draft_commit="b" * 40, problems=many,
                               error="e" * 5000)
    assert len(text.encode()) < 4096
    data = json.loads(text)
    assert data["problems"] and data["error"].endswith("...") and data["targetCommit"] == "a" * 40
    small = json.loads(termination_message(ok=True, target_commit="t", draft_commit="d", problems=[], error=None))
    assert small == {"ok": True, "targetCommit": "t", "draftCommit": "d", "draftBlockSize": None, "problems": [],
                     "error": None}


def test_redactor() -> None:
    assert redactor("hf_secret")("token hf_secret here") == "token <redacted> here"
    assert redactor(None)("hf_secret") == "hf_secret"


def test_write_atomic_replaces_whole(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    write_atomic(path, b"one")
    write_atomic(path, b"two")
    assert path.read_bytes() == b"two" and [p.name for p in tmp_path.iterdir()] == ["m.json"]
