"""`dflash-check-pair TARGET_DIR DRAFT_DIR`: the verdict of the vLLM in this image on a DFlash pair.

CPU only, configs and tokenizer files only: no weights are read and no GPU is touched. It runs the operator's
plain-worded rules (`dflash_cache.pairing`, the library the operator's cache Job runs too) with this vLLM's
version, and asks this vLLM itself
- to read the draft config with its own reader (`get_config`; the z-lab layout wrapped as vLLM does for method
  dflash, the speculators layout through its SpeculatorsConfig with the 1-based aux_hidden_state_layer_ids),
- whether its model registry has the draft architecture it resolves, and the target's,
- whether the target class it would load (after vLLM's general plugins, dflash-vllm's included) supports EAGLE-3
  hidden-state outputs, which a DFlash draft needs.
Where the operator's reading and vLLM's disagree, vLLM's wins: the pair is judged on what vLLM read, and a note
says what differed. Prints one JSON object (the operator's verdict format plus vllm_version and notes) on stdout,
and with --output also writes it, cut to Kubernetes' 4 KiB, to that file (the cache Job's termination message);
exit 0 compatible, 1 not, 2 unreadable input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dflash_cache import pairing
from dflash_cache.pairing import Problem

# What the pair rules read from a draft config, taken from vLLM's config object.
DRAFT_FIELDS = ("architectures", "model_type", "hidden_size", "target_hidden_size", "vocab_size", "draft_vocab_size",
                "num_attention_heads", "num_key_value_heads", "head_dim", "dflash_config", "eagle_config",
                "mask_token_id", "block_size")
# Fields of pairing.vllm_draft_view compared with vLLM's reading (values the rules judge).
COMPARED = ("architectures", "hidden_size", "target_hidden_size", "vocab_size", "draft_vocab_size",
            "num_key_value_heads", "head_dim")
DRAFTER = ("target_layer_ids", "mask_token_id")
# Problems about the draft's architecture or format: vLLM's registry and reader decide those when they can.
ARCHITECTURE_CODES = {"UnsupportedDraftArchitecture", "DraftArchitectureNeedsNewerVLLM", "UnsupportedDraftFormat"}


def read_draft_with_vllm(draft_dir: Path) -> dict[str, Any]:
    """The draft's config as vLLM's SpeculativeConfig holds it for method dflash; raises what vLLM's reader raises."""
    from vllm.transformers_utils.config import get_config
    from vllm.transformers_utils.configs.eagle import EAGLEConfig
    from vllm.transformers_utils.configs.speculators import SpeculatorsConfig

    config = get_config(str(draft_dir), trust_remote_code=False)
    if not isinstance(config, (EAGLEConfig, SpeculatorsConfig)):
        config = EAGLEConfig(config, method="dflash", model_type="eagle")
    out = {name: getattr(config, name, None) for name in DRAFT_FIELDS}
    return {name: (dict(value) if name.endswith("_config") and value is not None and not isinstance(value, dict)
                   else value) for name, value in out.items() if value is not None}


def _registry() -> Any:
    from vllm.plugins import load_general_plugins

    load_general_plugins()  # as every vLLM process does: dflash-vllm's backport lands here where it applies
    from vllm.model_executor.models import ModelRegistry

    return ModelRegistry


def target_problems(registry: Any, target: dict, version: str) -> list[Problem]:
    architectures = target.get("architectures") or []
    known = [a for a in architectures if a in registry.get_supported_archs()]
    if not known:
        return [Problem("UnsupportedTargetArchitecture",
                        f"vLLM {version}'s model registry has none of the target architectures {architectures!r}")]
    from vllm.model_executor.models.interfaces import supports_eagle3

    model_cls = registry.models[known[0]].load_model_cls()
    if supports_eagle3(model_cls):
        return []
    return [Problem(
        "TargetLacksEagle3",
        f"vLLM {version}'s {known[0]} ({model_cls.__module__}) does not support EAGLE-3 hidden-state outputs, which a "
        "DFlash draft reads: vLLM fails at load with 'Model does not support EAGLE3 interface but "
        "aux_hidden_state_outputs was requested'; load the dflash-vllm plugin (vLLM 0.20-0.23) or use vLLM 0.24+")]


def _differences(ours: dict, theirs: dict) -> list[str]:
    diffs = []
    for name in COMPARED:
        # A field the config leaves out is not a disagreement when vLLM fills a default, except where a rule
        # needs the value (sizes, vocabularies): there the default is what vLLM will use.
        if ours.get(name) is None and name in ("num_key_value_heads", "head_dim", "target_hidden_size",
                                                "draft_vocab_size"):
            continue
        if ours.get(name) != theirs.get(name):
            diffs.append((name, ours.get(name), theirs.get(name)))
    for name in DRAFTER:
        a, b = pairing.draft_value(ours, name), pairing.draft_value(theirs, name)
        if a != b:
            diffs.append((name, a, b))
    return [f"{name}: the operator reads {a!r}, vLLM reads {b!r}" for name, a, b in diffs]


def check(target_dir: Path, draft_dir: Path, num_speculative_tokens: int | None = None) -> dict[str, Any]:
    """The verdict as a dict (see the module docstring). Raises pairing.PairInputError on unreadable configs."""
    import vllm

    version = vllm.__version__
    target_dir, draft_dir = Path(target_dir), Path(draft_dir)
    target, draft = pairing.read_config(target_dir), pairing.read_config(draft_dir)
    layout = pairing.draft_layout(draft).name
    problems = pairing.check_pair(target_dir, draft_dir, num_speculative_tokens, vllm_version=version)
    notes: list[str] = []
    registry = _registry()
    try:
        theirs = read_draft_with_vllm(draft_dir)
    # Whatever vLLM's reader raises is the verdict (it would raise it at start-up too), whichever type it is.
    except Exception as error:  # noqa: BLE001
        problems.append(Problem(
            "DraftConfigUnreadable",
            f"vLLM {version} cannot read the draft config: {type(error).__name__}: {error}"))
        return pairing.verdict(problems + target_problems(registry, target, version), checked_by="vllm",
                               vllm_version=version, draft_layout=layout)

    diffs = _differences(pairing.vllm_draft_view(draft), theirs)
    if diffs:
        notes.append(f"vLLM {version} reads the draft differently from the operator; the pair is judged on vLLM's "
                     "reading, since that is what will serve it (" + "; ".join(diffs) + ")")
        problems = pairing.check_configs(
            target, theirs, target_tokenizer=pairing.tokenizer_fingerprint(target_dir),
            draft_tokenizer=pairing.tokenizer_fingerprint(draft_dir), num_speculative_tokens=num_speculative_tokens,
            draft_has_d2t=pairing.has_d2t(draft_dir) if theirs.get("draft_vocab_size") is not None else None,
            vllm_version=version)
        # Architecture problems are the registry's call, below; check_configs on vLLM's reading repeats them.
    operator_arch = [p for p in problems if p.code in ARCHITECTURE_CODES]
    problems = [p for p in problems if p.code not in ARCHITECTURE_CODES]
    resolved = theirs.get("architectures") or []
    supported = registry.get_supported_archs()
    registered = [a for a in resolved if a in supported]
    if not registered:
        known = sorted(a for a in pairing.DFLASH_ARCHITECTURES if a in supported)
        problems.insert(0, Problem(
            "UnsupportedDraftArchitecture",
            f"vLLM {version}'s model registry has none of {resolved!r} (what it makes of the draft's "
            f"{draft.get('architectures')!r}); its DFlash drafts are {', '.join(known)}"
            + (f"; the operator alone would say: {operator_arch[0].message}" if operator_arch else "")))
    elif operator_arch:
        notes.append(f"the operator's rules refuse the draft architecture ({operator_arch[0].message}), but vLLM "
                     f"{version} registers {registered[0]}: accepted, the serving vLLM decides")
    problems += target_problems(registry, target, version)
    return pairing.verdict(problems, checked_by="vllm", vllm_version=version, draft_layout=layout, notes=notes)


def _version() -> str | None:
    try:
        import vllm
    except ImportError:
        return None
    return vllm.__version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dflash-check-pair",
                                     description="judge a DFlash draft/target pair with this image's vLLM (CPU only)")
    parser.add_argument("target_dir", type=Path)
    parser.add_argument("draft_dir", type=Path)
    parser.add_argument("--num-speculative-tokens", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None,
                        help="also write the verdict here, under 4 KiB (e.g. /dev/termination-log)")
    args = parser.parse_args(argv)
    # vLLM logs to stdout by default; stdout carries only the verdict. Offline: the inputs are local directories.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        result = check(args.target_dir, args.draft_dir, args.num_speculative_tokens)
    except (pairing.PairInputError, OSError) as error:
        print(f"cannot check pair: {error}", file=sys.stderr)
        if args.output is not None:
            args.output.write_text(pairing.verdict_message(pairing.verdict(
                [Problem("PairUnreadable", f"cannot check pair: {error}")], checked_by="vllm",
                vllm_version=_version(), draft_layout="unknown")))
        return 2
    print(json.dumps(result))
    if args.output is not None:
        args.output.write_text(pairing.verdict_message(result))
    return 0 if result["compatible"] else 1


if __name__ == "__main__":
    sys.exit(main())
