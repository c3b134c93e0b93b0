"""Makes the GPU lane's models at run time (nothing is downloaded, nothing lands in the repository).

    python models.py tiny OUT     the vLLM tier's tiny set (tests/vllm/tiny_models.py): target, target-collapsed,
                                  draft-matching, draft-random
    python models.py mid OUT      the bounds' set: a ~4B random Qwen3Next target, collapsed (model.norm.weight = -1,
                                  so its greedy output is always token 0), and two 3-layer DFlash drafts with the
                                  target's KV geometry (2 KV heads x 256): draft-matching (norm.weight = 0: always
                                  proposes token 0, so every draft token is accepted) and draft-random
    python models.py mid-small OUT   the same code path at toy size, for a dry run on CPU

Random weights: the bounds say what speculation costs and saves on this stack, not what a real model gets.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "vllm"))
import tiny_models  # noqa: E402  (the vLLM tier's maker: tokenizer, tiny set, draft layout)

# ~4B parameters: Qwen3-Next's layer pattern (3 Gated DeltaNet layers, then 1 full attention) and head shapes, with
# fewer and narrower layers and experts. Full attention: 16 query heads, 2 KV heads x 256 (the draft matches it:
# vLLM 0.23-0.25 cannot unify KV page sizes otherwise).
MID = {
    "vocab_size": 151936, "hidden_size": 2048, "num_hidden_layers": 24,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],  # repeated below
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_experts": 32, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "intermediate_size": 5120, "decoder_sparse_step": 1,
    "max_position_embeddings": 4096, "partial_rotary_factor": 0.25, "tie_word_embeddings": False,
}
MID_DRAFT = {"num_hidden_layers": 3, "intermediate_size": 6144, "target_layer_ids": [1, 6, 11, 16, 21]}

# The same structure at toy size (CPU dry run of this file and of vLLM's loader).
MID_SMALL = MID | {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 2, "linear_num_key_heads": 2,
                   "linear_num_value_heads": 4, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "intermediate_size": 256}
MID_SMALL_DRAFT = {"num_hidden_layers": 3, "intermediate_size": 256, "target_layer_ids": [1, 2]}


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_target(out: Path, shape: dict, device: str) -> dict:
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_models.make_tokenizer(out)
    layers = shape["num_hidden_layers"]
    config = Qwen3NextConfig(**(shape | {"layer_types": shape["layer_types"] * (layers // 4)}),
                             eos_token_id=tokenizer.eos_token_id, dtype="bfloat16")
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = Qwen3NextForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        model.model.norm.weight.fill_(-1.0)  # collapsed: greedy output is always token 0
    params = count(model)
    model.save_pretrained(out, max_shard_size="4GB")
    del model
    return {"path": str(out), "params": params, "layers": layers}


def make_draft(out: Path, target: Path, shape: dict, draft: dict, *, matching: bool, device: str) -> dict:
    """The layout tiny_models.make_draft writes (layers.N.*, norm, fc, hidden_norm; embeddings/lm_head shared)."""
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model

    out.mkdir(parents=True, exist_ok=True)
    mask_id = PreTrainedTokenizerFast.from_pretrained(target).convert_tokens_to_ids(tiny_models.MASK)
    hidden, ids = shape["hidden_size"], draft["target_layer_ids"]
    config = Qwen3Config(
        vocab_size=shape["vocab_size"], hidden_size=hidden, intermediate_size=draft["intermediate_size"],
        num_hidden_layers=draft["num_hidden_layers"], num_attention_heads=shape["num_attention_heads"],
        num_key_value_heads=shape["num_key_value_heads"], head_dim=shape["head_dim"],
        max_position_embeddings=shape["max_position_embeddings"], tie_word_embeddings=False, dtype="bfloat16",
    )
    torch.manual_seed(2 if matching else 3)
    with torch.device(device):
        state = Qwen3Model(config).to(torch.bfloat16).state_dict()
        tensors = {name: t for name, t in state.items() if name.startswith("layers.")}
        tensors["norm.weight"] = torch.zeros(hidden) if matching else torch.ones(hidden)
        tensors["hidden_norm.weight"] = torch.ones(hidden)
        tensors["fc.weight"] = torch.randn(hidden, hidden * len(ids)) * 0.02
    save_file({name: t.to(torch.bfloat16).contiguous().cpu() for name, t in tensors.items()},
              str(out / "model.safetensors"))
    draft_config = config.to_dict() | {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "dflash_config": {"mask_token_id": mask_id, "target_layer_ids": ids},
    }
    (out / "config.json").write_text(json.dumps(draft_config, indent=2))
    return {"path": str(out), "params": sum(t.numel() for t in tensors.values()),
            "layers": draft["num_hidden_layers"], "target_layer_ids": ids, "matching": matching}


def make_mid(root: Path, shape: dict, draft: dict, device: str) -> dict:
    start = time.perf_counter()
    target = make_target(root / "target", shape, device)
    made = {
        "target": target,
        "draft-matching": make_draft(root / "draft-matching", root / "target", shape, draft, matching=True,
                                     device=device),
        "draft-random": make_draft(root / "draft-random", root / "target", shape, draft, matching=False,
                                   device=device),
        "shape": shape, "made_s": round(time.perf_counter() - start, 1),
    }
    (root / "made.json").write_text(json.dumps(made, indent=2))
    return made


if __name__ == "__main__":
    kind, out_dir = sys.argv[1], Path(sys.argv[2])
    if kind == "tiny":
        for name, path in tiny_models.make_all(out_dir).items():
            print(name, path)
    elif kind in ("mid", "mid-small"):
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        shape, draft_shape = (MID, MID_DRAFT) if kind == "mid" else (MID_SMALL, MID_SMALL_DRAFT)
        print(json.dumps(make_mid(out_dir, shape, draft_shape, dev), indent=2))
    else:
        sys.exit(f"unknown kind {kind}")
