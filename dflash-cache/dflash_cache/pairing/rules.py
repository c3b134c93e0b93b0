"""The pair rules: a chain of small checks over one `PairFacts`, each returning the problems it finds.

Order matters only for how problems are listed (stable, the way users read them): the draft's format first, then
the numbers both sides must agree on, then the rules that depend on the serving vLLM, the tokenizer and the
deployment's own token count. A rule that cannot judge (a number missing on one side) says nothing; the missing
number is reported once, by the rule that reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dflash_cache.pairing.layout import (
    DFLASH2_KEYS,
    DFLASH_ARCHITECTURES,
    KV_GEOMETRY_FIXED_IN,
    SPECULATORS,
    SPECULATORS_TYPES,
    DraftLayout,
    Problem,
    draft_layout,
    draft_value,
    is_hybrid_linear_attention,
    is_int,
    kv_width,
    parse_version,
    short,
    text_value,
    vllm_draft_view,
)


@dataclass(frozen=True)
class PairFacts:
    """Both configs as vLLM reads them, and what the caller knows besides (tokenizers, d2t, the serving vLLM)."""

    target: dict
    draft: dict  # as written
    view: dict  # as vLLM turns it into its model config (vllm_draft_view)
    layout: DraftLayout
    target_tokenizer: str | None
    draft_tokenizer: str | None
    num_speculative_tokens: int | None
    draft_has_d2t: bool | None
    vllm_version: str | None
    version: tuple[int, int] | None

    def target_int(self, name: str) -> int | None:
        return positive_int(text_value(self.target, name))

    @property
    def draft_hidden_field(self) -> str:
        return "target_hidden_size" if self.view.get("target_hidden_size") is not None else \
            self.layout.own_prefix + "hidden_size"

    @property
    def draft_hidden(self) -> Any:
        declared = self.view.get("target_hidden_size")
        return declared if declared is not None else self.view.get("hidden_size")


Rule = Callable[[PairFacts], list[Problem]]


def positive_int(value: Any) -> int | None:
    return value if is_int(value) and value > 0 else None


def incomplete(who: str, name: str, value: Any) -> list[Problem]:
    """A config number a rule needs that is absent or not a positive integer."""
    if positive_int(value) is not None:
        return []
    shown = "absent" if value is None else repr(value)
    return [Problem(f"{who}ConfigIncomplete",
                    f"{who.lower()} config field {name} is {shown}, expected a positive integer")]


def speculators_format(facts: PairFacts) -> list[Problem]:
    """A speculators draft must be a DFlash one, carry its layer config, and be readable by vLLM's reader."""
    if facts.layout is not SPECULATORS:
        return []
    draft, problems = facts.draft, []
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
    return problems


def draft_architecture(facts: PairFacts) -> list[Problem]:
    """A z-lab draft names an architecture vLLM registers as a DFlash draft (after its DFlash prefixing)."""
    if facts.layout is SPECULATORS:
        return []
    written = facts.draft.get("architectures") or []
    known = [a for a in facts.view.get("architectures") or [] if a in DFLASH_ARCHITECTURES]
    if isinstance(written, list) and known:
        return []
    return [Problem(
        "UnsupportedDraftArchitecture",
        f"draft architectures {written!r} include none vLLM runs as a DFlash draft "
        f"({', '.join(sorted(DFLASH_ARCHITECTURES))}; vLLM prefixes a name with DFlash unless it starts or "
        "ends with it)")]


def architecture_release(facts: PairFacts) -> list[Problem]:
    """The serving vLLM registers the draft's architecture (applied only when the version is known)."""
    if facts.version is None:
        return []
    problems = []
    for arch in facts.view.get("architectures") or []:
        since = DFLASH_ARCHITECTURES.get(arch)
        if since is not None and facts.version < since:
            problems.append(Problem(
                "DraftArchitectureNeedsNewerVLLM",
                f"draft architecture {arch} is served from vLLM {since[0]}.{since[1]} on; the serving vLLM is "
                f"{facts.vllm_version}"))
    return problems


def dflash2_keys(facts: PairFacts) -> list[Problem]:
    """DFlash2DraftModel builds its convolution and candidate selector from keys vLLM reads without defaults."""
    if "DFlash2DraftModel" not in (facts.view.get("architectures") or []):
        return []
    nested = facts.view.get("dflash_config")
    dflash: dict = nested if isinstance(nested, dict) else {}
    missing = [k for k in DFLASH2_KEYS if dflash.get(k) is None]
    if not missing:
        return []
    where = "" if facts.layout is SPECULATORS else "dflash_config."
    return [Problem(
        "DraftConfigIncomplete",
        f"DFlash2DraftModel needs {', '.join(where + k for k in missing)} (its convolution and candidate "
        "selector); vLLM fails without them when it builds the draft")]


def target_numbers(facts: PairFacts) -> list[Problem]:
    """The target numbers the rules below compare against."""
    return [p for name in ("hidden_size", "vocab_size", "num_hidden_layers")
            for p in incomplete("Target", name, text_value(facts.target, name))]


def hidden_size(facts: PairFacts) -> list[Problem]:
    """The draft consumes the target's hidden states: its target_hidden_size (or hidden_size) is the target's."""
    problems = incomplete("Draft", facts.draft_hidden_field, facts.draft_hidden)
    theirs, ours = facts.target_int("hidden_size"), positive_int(facts.draft_hidden)
    if theirs is not None and ours is not None and ours != theirs:
        problems.append(Problem(
            "HiddenSizeMismatch",
            f"draft expects target hidden size {ours} (its {facts.draft_hidden_field}), target hidden_size is "
            f"{theirs}"))
    return problems


def vocabulary(facts: PairFacts) -> list[Problem]:
    """The draft embeds target token ids; a reduced output vocabulary needs its d2t mapping."""
    own = facts.layout.own_prefix
    problems = incomplete("Draft", own + "vocab_size", facts.view.get("vocab_size"))
    t_vocab, d_vocab = facts.target_int("vocab_size"), positive_int(facts.view.get("vocab_size"))
    if t_vocab is not None and d_vocab is not None and d_vocab != t_vocab:
        problems.append(Problem(
            "VocabSizeMismatch",
            f"draft {own}vocab_size {d_vocab} differs from target vocab_size {t_vocab} (the draft embeds target "
            "token ids)"))
    d_out_vocab = facts.view.get("draft_vocab_size")
    if d_out_vocab is None or t_vocab is None:
        return problems
    if not is_int(d_out_vocab) or not 0 < d_out_vocab <= t_vocab:
        problems.append(Problem(
            "DraftVocabSizeInvalid",
            f"draft_vocab_size {d_out_vocab!r} must be a positive integer no larger than target vocab_size "
            f"{t_vocab}"))
    elif d_out_vocab < t_vocab and facts.draft_has_d2t is False:
        problems.append(Problem(
            "DraftVocabMappingMissing",
            f"draft_vocab_size {d_out_vocab} is below target vocab_size {t_vocab} but the draft ships no d2t "
            "tensor mapping draft ids to target ids"))
    return problems


def target_layers(facts: PairFacts) -> list[Problem]:
    """target_layer_ids (0-based, as vLLM holds them) against the target's layers, worded in the draft's layout."""
    layout, t_layers = facts.layout, facts.target_int("num_hidden_layers")
    layer_ids = draft_value(facts.view, "target_layer_ids")
    written = facts.draft.get("aux_hidden_state_layer_ids")
    field = layout.layer_field
    if not isinstance(layer_ids, list) or not layer_ids:
        shown = written if layout is SPECULATORS else layer_ids
        return [Problem(
            "TargetLayerIdsMissing",
            f"{field} is {'absent' if shown is None else repr(shown)}, expected a non-empty list of target layer "
            + ("numbers counted from 1" if layout is SPECULATORS else "indices"))]
    problems = []
    for index, layer_id in enumerate(layer_ids):
        if not is_int(layer_id):
            shown = written[index] if layout is SPECULATORS and isinstance(written, list) else layer_id
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


def mask_token(facts: PairFacts) -> list[Problem]:
    """vLLM requires the mask token, and it must be a target token id."""
    field, t_vocab = facts.layout.mask_field, facts.target_int("vocab_size")
    mask = draft_value(facts.view, "mask_token_id")
    if mask is None:
        return [Problem("MaskTokenIdMissing", f"{field} is absent; vLLM requires it")]
    if not is_int(mask):
        return [Problem("MaskTokenIdOutOfRange", f"{field} {mask!r} is not an integer")]
    if t_vocab is not None and not 0 <= mask < t_vocab:
        return [Problem("MaskTokenIdOutOfRange", f"{field} {mask} is outside the target vocabulary [0, {t_vocab})")]
    return []


def kv_geometry(facts: PairFacts) -> list[Problem]:
    """Before 0.26, vLLM cannot fit a hybrid target's state page and a draft with other KV geometry in one page size
    (layout.py, KV_GEOMETRY_FIXED_IN). Applied only when the serving vLLM is known."""
    if facts.version is None or facts.version >= KV_GEOMETRY_FIXED_IN or not is_hybrid_linear_attention(facts.target):
        return []
    t_kv = kv_width(facts.target, lambda name: text_value(facts.target, name))
    d_kv = kv_width(facts.view)
    if t_kv is None or d_kv is None or t_kv == d_kv:
        return []
    return [Problem(
        "KVGeometryMismatch",
        f"draft attention KV heads x head_dim = {d_kv}, the hybrid linear-attention target's = {t_kv}: "
        f"vLLM {facts.vllm_version} cannot fit both in one KV-cache page size and fails at GPU start-up "
        "(AssertionError in unify_kv_cache_spec_page_size); use vLLM 0.26+ or a draft whose "
        "num_key_value_heads x head_dim matches the target's")]


def tokenizer(facts: PairFacts) -> list[Problem]:
    """A draft without a tokenizer uses the target's (as vLLM does); a present one must be the same."""
    ours, theirs = facts.draft_tokenizer, facts.target_tokenizer
    if ours is None:
        return []
    if theirs is None:
        return [Problem(
            "TokenizerUnverifiable",
            f"the draft ships a tokenizer ({short(ours)}) but the target has none to compare it with")]
    if ours != theirs:
        return [Problem("TokenizerMismatch",
                        f"draft tokenizer {short(ours)} differs from target tokenizer {short(theirs)}")]
    return []


def speculative_tokens(facts: PairFacts) -> list[Problem]:
    if facts.num_speculative_tokens is None:
        return []
    return speculative_tokens_problems(facts.num_speculative_tokens, draft_block_size(facts.draft))


RULES: tuple[Rule, ...] = (
    speculators_format, draft_architecture, architecture_release, dflash2_keys,
    target_numbers, hidden_size, vocabulary, target_layers, mask_token, kv_geometry, tokenizer, speculative_tokens,
)


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

    The draft may be in the z-lab or the speculators layout (layout.py); messages name the field as written.
    Tokenizers are compared by `tokenizer_fingerprint`: a draft without one (None) uses the target's, as vLLM does
    (it loads the draft with the target's tokenizer), so only a present-and-different draft tokenizer is a mismatch;
    a draft tokenizer next to a target without one cannot be verified and is reported.
    `draft_has_d2t` says whether the draft checkpoint carries a `d2t` tensor; None means unknown (configs alone do not
    say), and then a reduced draft vocabulary is not reported as missing its mapping.
    `vllm_version` is the serving vLLM's; rules that hold only for some releases are applied only when it is given.
    """
    facts = PairFacts(
        target=target, draft=draft, view=vllm_draft_view(draft), layout=draft_layout(draft),
        target_tokenizer=target_tokenizer, draft_tokenizer=draft_tokenizer,
        num_speculative_tokens=num_speculative_tokens, draft_has_d2t=draft_has_d2t,
        vllm_version=vllm_version, version=parse_version(vllm_version))
    return [problem for rule in RULES for problem in rule(facts)]


def draft_block_size(draft: dict) -> int | None:
    """The block size the draft was trained with, where it declares one (dflash_config, else top level)."""
    value = draft_value(draft, "block_size")
    return value if is_int(value) and value >= 1 else None


def speculative_tokens_problems(num_speculative_tokens: Any, block_size: int | None) -> list[Problem]:
    """Separate from check_configs because a cache is shared by deployments that each choose their own count."""
    if not is_int(num_speculative_tokens) or num_speculative_tokens < 1:
        return [Problem("SpeculativeTokensInvalid",
                        f"num_speculative_tokens {num_speculative_tokens!r} must be a positive integer")]
    if block_size is not None and num_speculative_tokens > block_size - 1:
        return [Problem(
            "TooManySpeculativeTokens",
            f"num_speculative_tokens {num_speculative_tokens} exceeds the draft's block_size {block_size} - 1 = "
            f"{block_size - 1} tokens it was trained to propose per step")]
    return []


