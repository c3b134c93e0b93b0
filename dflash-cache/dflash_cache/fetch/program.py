"""The cache Job's program: fetch a target and its DFlash draft, pinned and verified, then check the pair.

    python -m dflash_cache.fetch --target ORG/REPO@REV --draft ORG/REPO@REV --dest DIR

The volume's layout is in layout.py, the transfers (and why not `hf_hub_download`) in transport.py.

Exit codes: 0 cached and compatible, 3 cached but incompatible, 1 download/verification error, 2 bad arguments,
4 no such repository or revision. With --pair-verdict-by-image the pair's problems are reported but the exit is 0
once both models are cached: the serving image's `dflash-check-pair`, which runs next in the same pod, decides.
HF_TOKEN is sent to the hub only; it is redacted from every line this program writes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dflash_cache.fetch.layout import (
    CLAIM,
    MANIFEST,
    PARTIAL,
    ROLES,
    build_manifest,
    cached_block_size,
    cleanup_partials,
    describe_pair,
    json_bytes,
    manifest_files,
    pair_identity,
    pair_problems,
    read_json,
    remove_strays,
    same_pair,
    take_lock,
    write_atomic,
)
from dflash_cache.fetch.progress import Progress, ProgressPrinter, emit_redacted, progress_line, redactor
from dflash_cache.fetch.transport import (
    COMMIT_RE,
    FetchError,
    Hub,
    NotFoundError,
    RemoteFile,
    RepoRef,
    download,
    first_line,
    parse_ref,
    verify_local,
)
from dflash_cache.pairing import Problem
from dflash_cache.result import (
    EXIT_ERROR,
    EXIT_OK,
    INCOMPATIBLE_EXIT_CODE,
    NOT_FOUND_EXIT_CODE,
    CacheResult,
    problem_dicts,
)

# --- pure helpers -------------------------------------------------------------------------------------------------

# --- the program --------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    code: int
    commits: dict[str, str | None]
    problems: list[Problem]
    error: str | None


def run(args: argparse.Namespace, emit: Callable[[str], None], commits: dict[str, str | None]) -> Outcome:
    """Make DIR a complete, verified cache of the pair; fills `commits` as soon as they are known."""
    refs = {"target": args.target, "draft": args.draft}
    dest: Path = args.dest
    started = time.monotonic()
    dest.mkdir(parents=True, exist_ok=True)
    take_lock(dest, emit)
    manifest = read_json(dest / MANIFEST)

    # A pod restarted on a complete cache pinned by commit need not reach the hub at all.
    hub: Hub | None = None
    if manifest and all(COMMIT_RE.match(refs[r].revision) for r in ROLES) and same_pair(
            manifest, {r: {"repo": refs[r].repo, "commit": refs[r].revision} for r in ROLES}):
        resolved = {r: refs[r].revision for r in ROLES}
        listing: dict[str, list[str]] | None = None
    else:
        hub = Hub(args.token)
        resolved, listing = {}, {}
        for role in ROLES:
            resolved[role], listing[role] = hub.resolve(refs[role])
            commits[role] = resolved[role]
    commits.update(resolved)
    identity = pair_identity(refs, resolved)
    emit(json.dumps({"event": "resolved", **{r: {"repo": refs[r].repo, "revision": refs[r].revision,
                                                  "commit": resolved[r]} for r in ROLES}}, separators=(",", ":")))

    if manifest is not None and not same_pair(manifest, identity):
        raise FetchError(f"{dest} holds the cache of {describe_pair(manifest)}, not {describe_pair(identity)}; "
                         "refusing to overwrite it")
    claim = read_json(dest / CLAIM)
    if claim is not None and not same_pair(claim, identity):
        raise FetchError(f"{dest} holds a partial cache of {describe_pair(claim)}, not {describe_pair(identity)}; "
                         "refusing to overwrite it")

    if manifest is not None:
        files = {r: manifest_files(manifest, r) for r in ROLES}
        bad = [(r, f.path, why) for r in ROLES for f in files[r]
               if (why := verify_local(dest / r / f.path, f, hashes=args.full_verify))]
        if not bad:
            problems = pair_problems(dest)
            if [p.to_dict() for p in problems] != manifest.get("problems"):
                write_atomic(dest / MANIFEST, json_bytes({**manifest, "compatible": not problems,
                                                           "problems": [p.to_dict() for p in problems]}))
            sizes = {r: sum(f.size for f in files[r]) for r in ROLES}
            snap = {r: {"bytesDone": sizes[r], "bytesTotal": sizes[r], "filesDone": len(files[r]),
                        "filesTotal": len(files[r])} for r in ROLES}
            emit(progress_line(snap, "complete", bytesFetched=0, cached=True, compatible=not problems,
                               seconds=round(time.monotonic() - started, 2)))
            return Outcome(INCOMPATIBLE_EXIT_CODE if problems else EXIT_OK, commits, problems, None)
        # The manifest no longer tells the truth: drop it first, so a kill from here on leaves no false "complete".
        (dest / MANIFEST).unlink()
        for role, path, why in bad:
            emit(json.dumps({"event": "corrupt", "role": role, "path": path, "reason": why}, separators=(",", ":")))
            (dest / role / path).unlink(missing_ok=True)
        if hub is None or listing is None:
            hub = Hub(args.token)
            listing = {r: hub.resolve(RepoRef(refs[r].repo, resolved[r]))[1] for r in ROLES}

    assert hub is not None and listing is not None
    write_atomic(dest / CLAIM, json_bytes(identity))
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        metas = {r: list(pool.map(lambda p, r=r: hub.metadata(refs[r].repo, resolved[r], p), listing[r]))
                 for r in ROLES}

    progress = Progress(totals={r: sum(f.size for f in metas[r]) for r in ROLES},
                        files_total={r: len(metas[r]) for r in ROLES})
    for role in ROLES:
        for rel in remove_strays(dest / role, {f.path for f in metas[role]}):
            emit(json.dumps({"event": "stray", "role": role, "path": rel}, separators=(",", ":")))

    todo: list[tuple[str, RemoteFile]] = []
    for role in ROLES:
        for remote in metas[role]:
            why = verify_local(dest / role / remote.path, remote, hashes=True)
            if why is None:
                progress.add(role, remote.size, network=False)
                progress.file_done(role)
                continue
            if why != "missing":
                emit(json.dumps({"event": "corrupt", "role": role, "path": remote.path, "reason": why},
                                separators=(",", ":")))
                (dest / role / remote.path).unlink()
            todo.append((role, remote))
    # Interleave the two models so both advance together; biggest first keeps the pool busy to the end.
    todo.sort(key=lambda item: -item[1].size)
    todo = _interleave(todo)

    printer = ProgressPrinter(progress, emit, interval=args.progress_interval)
    printer.start()
    try:
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            futures = [pool.submit(_fetch_one, hub, refs[role].repo, resolved[role], remote, dest, role, progress)
                       for role, remote in todo]
            for future in futures:
                future.result()
    finally:
        printer.stop()

    problems = pair_problems(dest)
    write_atomic(dest / MANIFEST, json_bytes(build_manifest(refs, resolved, metas, problems)))
    cleanup_partials(dest)
    emit(progress_line(progress.snapshot(), "complete", bytesFetched=progress.fetched, cached=False,
                       compatible=not problems, seconds=round(time.monotonic() - started, 2)))
    return Outcome(INCOMPATIBLE_EXIT_CODE if problems else EXIT_OK, commits, problems, None)


def _interleave(items: list[tuple[str, RemoteFile]]) -> list[tuple[str, RemoteFile]]:
    queues = {r: [i for i in items if i[0] == r] for r in ROLES}
    out: list[tuple[str, RemoteFile]] = []
    while any(queues.values()):
        for role in ROLES:
            if queues[role]:
                out.append(queues[role].pop(0))
    return out


def _fetch_one(hub: Hub, repo: str, commit: str, remote: RemoteFile, dest: Path, role: str,
               progress: Progress) -> None:
    partial = dest / PARTIAL / role / (remote.path + ".incomplete")
    if partial.exists():  # bytes a killed run left: they count as done, not as fetched by this run
        progress.add(role, min(partial.stat().st_size, remote.size), network=False)
    download(hub, repo, commit, remote, dest / role / remote.path, partial,
             lambda n: progress.add(role, n), lambda n: progress.discard(role, n))
    progress.file_done(role)


def _ref_arg(text: str) -> RepoRef:
    try:
        return parse_ref(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dflash_cache.fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, type=_ref_arg, help="ORG/REPO@REVISION of the target model")
    parser.add_argument("--draft", required=True, type=_ref_arg, help="ORG/REPO@REVISION of the DFlash draft")
    parser.add_argument("--dest", required=True, type=Path, help="cache directory (the volume's mount)")
    parser.add_argument("--termination-log", type=Path, default=Path("/dev/termination-log"))
    parser.add_argument("--workers", type=int, default=4, help="parallel file downloads across both models")
    parser.add_argument("--full-verify", action="store_true",
                        help="hash every file even when a manifest exists (default there: sizes only)")
    parser.add_argument("--progress-interval", type=float, default=1.0, help="seconds between progress lines")
    parser.add_argument("--pair-verdict-by-image", action="store_true",
                        help="exit 0 on a cached pair even when the operator's rules find problems: the serving "
                             "image's vLLM judges the pair next (its reading wins where the two disagree)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Read once, here: the token goes to the hub client and to the redactor, nowhere else.
    args.token = os.environ.get("HF_TOKEN") or None
    redact = redactor(args.token)

    def emit(line: str) -> None:
        emit_redacted(line, redact)

    commits: dict[str, str | None] = dict.fromkeys(ROLES)
    try:
        outcome = run(args, emit, commits)
        if args.pair_verdict_by_image and outcome.code == INCOMPATIBLE_EXIT_CODE:
            outcome.code = EXIT_OK
    except NotFoundError as error:
        outcome = Outcome(NOT_FOUND_EXIT_CODE, commits, [], redact(str(error)))
    except FetchError as error:
        outcome = Outcome(EXIT_ERROR, commits, [], redact(str(error)))
    except Exception as error:  # noqa: BLE001 - the Job must always leave a reason behind
        outcome = Outcome(EXIT_ERROR, commits, [], redact(f"{type(error).__name__}: {first_line(error)}"))
    if outcome.error:
        emit(json.dumps({"event": "error", "error": outcome.error}, separators=(",", ":")))
        print(f"fetch failed: {outcome.error}", file=sys.stderr)
    message = CacheResult(ok=outcome.code == EXIT_OK, target_commit=outcome.commits.get("target"),
                          draft_commit=outcome.commits.get("draft"), draft_block_size=cached_block_size(args.dest),
                          problems=problem_dicts(outcome.problems), error=outcome.error).to_message()
    try:
        args.termination_log.write_text(redact(message))
    except OSError as error:
        print(f"cannot write {args.termination_log}: {error}", file=sys.stderr)
    return outcome.code

if __name__ == "__main__":
    sys.exit(main())

