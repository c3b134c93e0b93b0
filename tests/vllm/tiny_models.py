"""Makes tiny random models for the vLLM tier at test time: nothing is downloaded, nothing lands in the repo.

- a Qwen3Next target (hidden 128, 4 layers alternating linear/full attention, 4 experts, head_dim 64, bf16) with a
  byte-level BPE tokenizer trained here;
- DFlash drafts for it in the layout vLLM's DFlashQwen3ForCausalLM loads (`layers.0.*`, `norm.weight`,
  `fc.weight`, `hidden_norm.weight`; embeddings and lm_head are shared from the target).

Exact acceptance: Qwen3Next's final norm scales by (1 + weight), so `collapsed=True` (weight -1) zeroes the final
hidden state and greedy decoding always picks token 0. A draft whose `norm.weight` is 0 likewise always proposes
token 0, so every draft token is accepted; a random draft almost never matches.

Run as `python tiny_models.py OUT_DIR` to make the standard set (target, target-collapsed, draft-matching,
draft-random, and draft-matching-speculators: the matching draft with its config in the speculators layout) under
OUT_DIR; run.sh does, once for all its sessions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3Model,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

VOCAB = 512  # embedding rows; the trained tokenizer uses fewer
HIDDEN = 128
HEAD_DIM = 64  # vLLM's CPU attention rejects 32
TARGET_LAYERS = 4
TARGET_LAYER_IDS = [1, 2]  # what the draft reads; vLLM taps the outputs of layers 2 and 3 (it adds 1)
EOS, MASK = "<|endoftext|>", "<|mask|>"

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens with a small model and "
    "verifies them with the target in one forward pass. Kubernetes operators reconcile desired state. "
    "DFlash drafts a whole block of tokens in parallel from the target's hidden states. "
)


def make_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # No special tokens in training: they would take ids 0 and 1, and id 0 must be an ordinary token (see above).
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([_CORPUS] * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, additional_special_tokens=[MASK])
    assert len(fast) <= VOCAB and fast.convert_tokens_to_ids(EOS) != 0
    fast.save_pretrained(out)
    return fast


def make_target(out: Path, *, collapsed: bool, seed: int = 0) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(out)
    torch.manual_seed(seed)
    config = Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=256, num_hidden_layers=TARGET_LAYERS,
        layer_types=["linear_attention", "full_attention"] * (TARGET_LAYERS // 2),
        num_attention_heads=2, num_key_value_heads=1, head_dim=HEAD_DIM,
        linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=HEAD_DIM,
        linear_value_head_dim=HEAD_DIM, linear_conv_kernel_dim=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
        decoder_sparse_step=1, max_position_embeddings=512, tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id, dtype="bfloat16",
    )
    model = Qwen3NextForCausalLM(config).to(torch.bfloat16)
    # Random init at std 0.02 gives near-flat logits; a larger lm_head makes the uncollapsed target's greedy
    # output vary with the context, so "same output with and without speculation" compares something.
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 1.0)
        if collapsed:
            model.model.norm.weight.fill_(-1.0)
    model.save_pretrained(out)
    return out


def make_draft(out: Path, target: Path, *, matching: bool, seed: int = 1) -> Path:
    """A 1-layer DFlash draft; `matching` zeroes its final norm so it always proposes token 0."""
    out.mkdir(parents=True, exist_ok=True)
    target_config = json.loads((target / "config.json").read_text())
    mask_id = PreTrainedTokenizerFast.from_pretrained(target).convert_tokens_to_ids(MASK)
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=target_config["vocab_size"], hidden_size=HIDDEN, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=HEAD_DIM, max_position_embeddings=512,
        tie_word_embeddings=False, dtype="bfloat16",
    )
    layers = Qwen3Model(config).to(torch.bfloat16).state_dict()
    tensors = {name: t for name, t in layers.items() if name.startswith("layers.")}
    tensors["norm.weight"] = torch.zeros(HIDDEN) if matching else torch.ones(HIDDEN)
    tensors["hidden_norm.weight"] = torch.ones(HIDDEN)
    tensors["fc.weight"] = torch.randn(HIDDEN, HIDDEN * len(TARGET_LAYER_IDS)) * 0.05
    save_file({name: t.to(torch.bfloat16).contiguous() for name, t in tensors.items()},
              str(out / "model.safetensors"))
    draft_config = config.to_dict() | {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "dflash_config": {"mask_token_id": mask_id, "target_layer_ids": TARGET_LAYER_IDS},
    }
    (out / "config.json").write_text(json.dumps(draft_config, indent=2))
    return out


# DFlash2's extra dflash_config keys (convolution and candidate selector), small values for a 128-wide draft.
DFLASH2_KEYS = {"conv_kernel_size": 4, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 4}


def to_layout(config: dict, layout: str) -> dict:
    """A z-lab draft config (what make_draft writes) in another layout vLLM serves.

    - "z-lab": unchanged;
    - "dflash2": architectures DFlash2DraftModel (vLLM >= 0.28), DFLASH2_KEYS in dflash_config;
    - "speculators": speculators_model_type dflash, the draft's own fields under transformer_layer_config,
      mask_token_id / target_hidden_size / draft_vocab_size at the top, aux_hidden_state_layer_ids counted from 1.
    """
    config = json.loads(json.dumps(config))
    if layout == "z-lab":
        return config
    if layout == "dflash2":
        config["architectures"] = ["DFlash2DraftModel"]
        config["dflash_config"] |= DFLASH2_KEYS
        return config
    assert layout == "speculators", layout
    dflash = config.pop("dflash_config")
    config.pop("architectures")
    return {
        "speculators_model_type": "dflash",
        "architectures": ["DFlashSpeculator"],
        "transformer_layer_config": config,
        "mask_token_id": dflash["mask_token_id"],
        "target_hidden_size": config.pop("target_hidden_size", config["hidden_size"]),
        "draft_vocab_size": config["vocab_size"],
        "aux_hidden_state_layer_ids": [i + 1 for i in dflash["target_layer_ids"]],
        "speculators_config": {"algorithm": "dflash",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                               "verifier": {"name_or_path": "tiny-target", "architectures": ["Qwen3NextForCausalLM"]}},
    }


def relayout(draft: Path, out: Path, layout: str) -> Path:
    """A copy of `draft` (weights included) whose config.json is in `layout`."""
    out.mkdir(parents=True, exist_ok=True)
    for item in draft.iterdir():
        if item.name != "config.json":
            (out / item.name).write_bytes(item.read_bytes())
    (out / "config.json").write_text(json.dumps(to_layout(json.loads((draft / "config.json").read_text()), layout),
                                                indent=2))
    return out


def make_all(root: Path) -> dict[str, Path]:
    target = make_target(root / "target", collapsed=False)
    collapsed = make_target(root / "target-collapsed", collapsed=True)
    return {
        "target": target,
        "target-collapsed": collapsed,
        "draft-matching": make_draft(root / "draft-matching", collapsed, matching=True),
        "draft-random": make_draft(root / "draft-random", target, matching=False),
    } | {"draft-matching-speculators": relayout(root / "draft-matching", root / "draft-matching-speculators",
                                                "speculators")}


if __name__ == "__main__":
    for name, path in make_all(Path(sys.argv[1])).items():
        print(name, path)
