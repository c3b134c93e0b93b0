"""Makes the GPU lane's models at run time (nothing is downloaded, nothing lands in the repository).

    python models.py tiny OUT     the vLLM tier's tiny set (tests/vllm/tiny_models.py): target, target-collapsed,
                                  draft-matching, draft-random
    python models.py mid OUT      the bounds' set: a ~4B random Qwen3Next target, collapsed (model.norm.weight = -1,
                                  so its greedy output is always token 0), and two 3-layer DFlash drafts with the
                                  target's KV geometry (2 KV heads x 256): draft-matching (norm.weight = 0: always
                                  proposes token 0, so every draft token is accepted) and draft-random
    python models.py mid-small OUT   the same code path at toy size, for a dry run on CPU
    python models.py partial OUT  (after mid) OUT/target-partial: the partial pair's target at mid size (below)

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


# The partial pair at mid size (issue 26's cost-partial set), as proof.py makes it for the tiny one: the target
# uncollapsed (model.norm.weight = 0, Qwen3Next's zero-centred RMSNorm at its identity) with lm_head row 0 scaled, so
# that token 0, what draft-matching always proposes, wins at some positions only. The factor is the one whose greedy
# output (transformers on the GPU, bf16, the bench's own prompts) has token 0's share nearest PARTIAL_SHARE: a
# mid-range acceptance is what tells a cost that grows with accepted tokens apart from one that does not. The
# acceptance that counts is what vLLM measures per cell (bench.py records it); this only aims.
PARTIAL_SCALES = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0)
PARTIAL_SHARE = 0.5
PARTIAL_FALLBACK_SCALE = 6.0  # when the calibration fails: the report says so
PARTIAL_CALIBRATION_S = 150  # transformers' eager MoE is slow; tune-start's call has 600 s for unpack and all


def partial_shares(target: Path, prompts: list[list[int]], new_tokens: int, device: str) -> dict[str, float]:
    """Token 0's share of the greedy output for each candidate factor (lm_head row 0 x factor, in place)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.bfloat16).to(device).eval()
    with torch.no_grad():
        model.model.norm.weight.zero_()
        row = model.lm_head.weight[0].detach().clone()
        shares = {}
        until = time.monotonic() + PARTIAL_CALIBRATION_S
        for scale in PARTIAL_SCALES:
            model.lm_head.weight[0] = row * scale
            ids = torch.tensor(prompts, device=device)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False)[:, ids.shape[1]:]
            shares[f"{scale:g}"] = round(float((out == 0).float().mean()), 3)
            # The share grows with the factor: past the wanted range, larger ones only cost the device's time.
            if shares[f"{scale:g}"] >= 0.9 or time.monotonic() > until:
                break
    del model
    return shares


def make_partial(root: Path, prompts: list[list[int]], device: str, new_tokens: int = 48) -> dict:
    """root/target-partial from root/target (made by make_mid); its facts in root/partial.json."""
    import shutil

    from safetensors.torch import load_file

    start = time.perf_counter()
    out = root / "target-partial"
    facts: dict = {"path": str(out), "share_wanted": PARTIAL_SHARE}
    try:
        shares = partial_shares(root / "target", prompts, new_tokens, device)
        usable = {float(k): v for k, v in shares.items() if 0.1 <= v <= 0.9} or {float(k): v for k, v in shares.items()}
        facts |= {"shares": shares, "scale": min(usable, key=lambda k: abs(usable[k] - PARTIAL_SHARE))}
    except Exception as exc:  # noqa: BLE001 - a fixed factor still makes the pair; the facts say why
        facts |= {"scale": PARTIAL_FALLBACK_SCALE, "error": f"{type(exc).__name__}: {exc}"[:300]}
    if device == "cuda":
        torch.cuda.empty_cache()  # the engines start right after, each with its own share of the card
    shutil.copytree(root / "target", out, dirs_exist_ok=True)
    for path in out.glob("*.safetensors"):
        tensors = load_file(str(path))
        touched = False
        if "model.norm.weight" in tensors:
            tensors["model.norm.weight"] = torch.zeros_like(tensors["model.norm.weight"])
            touched = True
        if "lm_head.weight" in tensors:
            weight = tensors["lm_head.weight"].clone()
            weight[0] *= facts["scale"]
            tensors["lm_head.weight"] = weight.contiguous()
            touched = True
        if touched:
            save_file(tensors, str(path), metadata={"format": "pt"})
    facts["made_s"] = round(time.perf_counter() - start, 1)
    (root / "partial.json").write_text(json.dumps(facts, indent=2))
    return facts


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
    elif kind == "partial":
        import bench

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        print(json.dumps(make_partial(out_dir, bench.prompts((16,)), dev), indent=2))
    else:
        sys.exit(f"unknown kind {kind}")
