"""Draft/target compatibility: each mismatch yields exactly its problem, with the numbers; several yield all."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

import pytest

from dflash_cache.pairing import (
    Problem,
    check_configs,
    check_pair,
    draft_layout,
    main_check_pair,
    parse_version,
    tokenizer_fingerprint,
    vllm_draft_view,
)

TARGET = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 128,
    "vocab_size": 2048,
    "num_hidden_layers": 4,
}
DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 128,
    "target_hidden_size": 128,
    "vocab_size": 2048,
    "num_hidden_layers": 1,
    "block_size": 16,
    "dflash_config": {"mask_token_id": 2047, "target_layer_ids": [1, 2]},
}
TOKENIZER = {
    "version": "1.0",
    "added_tokens": [{"id": 2047, "content": "<|MASK|>", "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
}


def check(target: dict | None = None, draft: dict | None = None, *, tok_t: str | None = "t", tok_d: str | None = None,
          k: int | None = 15, d2t: bool | None = None, vllm: str | None = None) -> list[Problem]:
    return check_configs(target or TARGET, draft or DRAFT, target_tokenizer=tok_t, draft_tokenizer=tok_d,
                         num_speculative_tokens=k, draft_has_d2t=d2t, vllm_version=vllm)


def with_(base: dict, **changes) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if key in ("mask_token_id", "target_layer_ids"):
            out["dflash_config"][key] = value
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, problems
    return problems[0]


def test_compatible_pair_has_no_problem() -> None:
    assert check() == []
    assert check(tok_d="t") == []  # same tokenizer on both sides
    assert check(k=None) == []


def test_hidden_size_mismatch() -> None:
    p = only(check(target=with_(TARGET, hidden_size=256)))
    assert p.code == "HiddenSizeMismatch"
    assert "128" in p.message and "256" in p.message and "target_hidden_size" in p.message


def test_hidden_size_falls_back_to_the_drafts_hidden_size() -> None:
    p = only(check(draft=with_(DRAFT, target_hidden_size=None, hidden_size=64)))
    assert p.code == "HiddenSizeMismatch" and "64 (its hidden_size)" in p.message


def test_vocab_mismatch() -> None:
    p = only(check(draft=with_(DRAFT, vocab_size=4096)))
    assert p.code == "VocabSizeMismatch"
    assert "4096" in p.message and "2048" in p.message


def test_reduced_draft_vocab_needs_d2t_only_when_known_missing() -> None:
    draft = with_(DRAFT, draft_vocab_size=1024)
    assert check(draft=draft, d2t=True) == []
    assert check(draft=draft, d2t=None) == []  # configs alone cannot tell
    p = only(check(draft=draft, d2t=False))
    assert p.code == "DraftVocabMappingMissing" and "1024" in p.message and "2048" in p.message
    assert only(check(draft=with_(DRAFT, draft_vocab_size=4096))).code == "DraftVocabSizeInvalid"


@pytest.mark.parametrize("bad", [4, 7, -1])
def test_each_bad_layer_id(bad: int) -> None:
    p = only(check(draft=with_(DRAFT, target_layer_ids=[1, bad])))
    assert p.code == "TargetLayerIdOutOfRange"
    assert f"target_layer_ids[1] = {bad}" in p.message and "4 layers [0, 4)" in p.message


def test_every_bad_layer_id_is_reported() -> None:
    problems = check(draft=with_(DRAFT, target_layer_ids=[0, 9, 3, 12]))
    assert [p.code for p in problems] == ["TargetLayerIdOutOfRange"] * 2
    assert "[1] = 9" in problems[0].message and "[3] = 12" in problems[1].message


def test_layer_ids_missing_or_not_integers() -> None:
    draft = with_(DRAFT)
    del draft["dflash_config"]["target_layer_ids"]
    assert only(check(draft=draft)).code == "TargetLayerIdsMissing"
    assert only(check(draft=with_(DRAFT, target_layer_ids=[1, "2"]))).code == "TargetLayerIdInvalid"


def test_mask_token_out_of_range() -> None:
    p = only(check(draft=with_(DRAFT, mask_token_id=2048)))
    assert p.code == "MaskTokenIdOutOfRange" and "2048" in p.message and "[0, 2048)" in p.message


def test_mask_token_missing() -> None:
    draft = with_(DRAFT)
    del draft["dflash_config"]["mask_token_id"]
    assert only(check(draft=draft)).code == "MaskTokenIdMissing"


def test_mask_token_at_top_level_is_accepted_as_vllm_does() -> None:
    draft = with_(DRAFT, mask_token_id=None)
    del draft["dflash_config"]["mask_token_id"]
    draft["mask_token_id"] = 5
    assert check(draft=draft) == []


def test_tokenizer_differs() -> None:
    p = only(check(tok_t="tokenizer.json:sha256:" + "a" * 64, tok_d="tokenizer.json:sha256:" + "b" * 64))
    assert p.code == "TokenizerMismatch" and "aaaaaaaaaaaa" in p.message and "bbbbbbbbbbbb" in p.message


def test_draft_tokenizer_without_target_tokenizer_cannot_be_verified() -> None:
    assert only(check(tok_t=None, tok_d="x:y")).code == "TokenizerUnverifiable"
    assert check(tok_t=None, tok_d=None) == []


def test_wrong_architecture() -> None:
    p = only(check(draft=with_(DRAFT, architectures=["Qwen3ForCausalLM"])))
    assert p.code == "UnsupportedDraftArchitecture" and "Qwen3ForCausalLM" in p.message


def test_too_many_speculative_tokens() -> None:
    assert check(k=15) == []
    p = only(check(k=16))
    assert p.code == "TooManySpeculativeTokens" and "16" in p.message and "= 15" in p.message
    nested = with_(DRAFT, block_size=None)
    nested["dflash_config"]["block_size"] = 8
    assert only(check(draft=nested, k=8)).code == "TooManySpeculativeTokens"
    assert check(draft=with_(DRAFT, block_size=None), k=64) == []  # no declared block size: nothing to check
    assert only(check(k=0)).code == "SpeculativeTokensInvalid"


def test_target_fields_under_text_config() -> None:
    target = {"architectures": ["X"], "text_config": {"hidden_size": 128, "vocab_size": 2048, "num_hidden_layers": 2}}
    p = only(check(target=target))
    assert p.code == "TargetLayerIdOutOfRange" and "[1] = 2" in p.message


def test_incomplete_configs_are_problems_not_crashes() -> None:
    problems = check(target=with_(TARGET, vocab_size=None, hidden_size="128"))
    assert sorted(p.code for p in problems) == ["TargetConfigIncomplete"] * 2


def test_several_problems_at_once_are_all_reported() -> None:
    draft = with_(DRAFT, target_hidden_size=64, vocab_size=1000, mask_token_id=5000, target_layer_ids=[2, 4, 8],
                  architectures=["Nope"])
    codes = [p.code for p in check(draft=draft, tok_t="a:1", tok_d="a:2", k=20)]
    assert codes == ["UnsupportedDraftArchitecture", "HiddenSizeMismatch", "VocabSizeMismatch",
                     "TargetLayerIdOutOfRange", "TargetLayerIdOutOfRange", "MaskTokenIdOutOfRange",
                     "TokenizerMismatch", "TooManySpeculativeTokens"]


# --- on directories ---

def write_model(path: Path, config: dict, tokenizer: dict | None = None, tensors: list[str] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if tokenizer is not None:
        (path / "tokenizer.json").write_text(json.dumps(tokenizer, indent=2))
    if tensors is not None:
        header = json.dumps({n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
                             for i, n in enumerate(tensors)}).encode()
        (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4 * len(tensors))
    return path


def test_fingerprint_ignores_formatting_and_decoder_but_not_vocab(tmp_path: Path) -> None:
    a = write_model(tmp_path / "a", TARGET, TOKENIZER)
    b = write_model(tmp_path / "b", TARGET)
    reordered = dict(reversed(list(TOKENIZER.items())))
    reordered["decoder"] = {"type": "ByteLevel"}
    (b / "tokenizer.json").write_text(json.dumps(reordered))
    assert tokenizer_fingerprint(a) == tokenizer_fingerprint(b) is not None
    changed = copy.deepcopy(TOKENIZER)
    changed["model"]["vocab"]["c"] = 2
    c = write_model(tmp_path / "c", TARGET, changed)
    assert tokenizer_fingerprint(c) != tokenizer_fingerprint(a)
    assert tokenizer_fingerprint(write_model(tmp_path / "d", TARGET)) is None
    (tmp_path / "d" / "vocab.json").write_text('{"a": 0}')
    assert tokenizer_fingerprint(tmp_path / "d").startswith("vocab-files:sha256:")


def test_check_pair_on_directories(tmp_path: Path) -> None:
    target = write_model(tmp_path / "t", TARGET, TOKENIZER)
    draft = write_model(tmp_path / "d", DRAFT)  # no tokenizer: shares the target's
    assert check_pair(target, draft, 15) == []
    other = copy.deepcopy(TOKENIZER)
    other["added_tokens"][0]["content"] = "<|mask|>"
    (draft / "tokenizer.json").write_text(json.dumps(other))
    assert [p.code for p in check_pair(target, draft)] == ["TokenizerMismatch"]


def test_check_pair_reads_d2t_from_safetensors_headers(tmp_path: Path) -> None:
    target = write_model(tmp_path / "t", TARGET, TOKENIZER)
    reduced = with_(DRAFT, draft_vocab_size=1024)
    without = write_model(tmp_path / "d1", reduced, tensors=["fc.weight", "norm.weight"])
    assert [p.code for p in check_pair(target, without)] == ["DraftVocabMappingMissing"]
    with_map = write_model(tmp_path / "d2", reduced, tensors=["fc.weight", "d2t"])
    assert check_pair(target, with_map) == []


def test_cli_exit_codes_and_output(tmp_path: Path, capsys) -> None:
    target = write_model(tmp_path / "t", TARGET, TOKENIZER)
    draft = write_model(tmp_path / "d", with_(DRAFT, vocab_size=1000))
    assert main_check_pair([str(target), str(target.parent / "missing")]) == 2
    assert "config.json" in capsys.readouterr().err
    assert main_check_pair([str(target), str(draft), "--num-speculative-tokens", "16"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["VocabSizeMismatch", "TooManySpeculativeTokens"]
    assert main_check_pair([str(target), str(draft), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["compatible"] is False and report["problems"][0]["code"] == "VocabSizeMismatch"
    (draft / "config.json").write_text(json.dumps(DRAFT))
    assert main_check_pair([str(target), str(draft)]) == 0
    assert capsys.readouterr().out.strip() == "compatible"
    (draft / "config.json").write_text("{not json")
    assert main_check_pair([str(target), str(draft)]) == 2


# --- every draft format vLLM serves ---

SPEC_DRAFT = {  # the speculators layout of DRAFT: aux ids count from 1
    "speculators_model_type": "dflash",
    "architectures": ["DFlashSpeculator"],
    "transformer_layer_config": {"model_type": "qwen3", "hidden_size": 128, "vocab_size": 2048,
                                 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                                 "head_dim": 64},
    "target_hidden_size": 128,
    "draft_vocab_size": 2048,
    "mask_token_id": 2047,
    "aux_hidden_state_layer_ids": [2, 3],
    "speculators_config": {"proposal_methods": [{"speculative_tokens": 3}], "verifier": {"name_or_path": "t"}},
}
DFLASH2_KEYS = {"conv_kernel_size": 4, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 4}


def spec(**changes) -> dict:
    out = copy.deepcopy(SPEC_DRAFT)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def test_vllm_view_of_the_speculators_layout_is_what_vllms_reader_makes() -> None:
    view = vllm_draft_view(spec())
    assert view["architectures"] == ["DFlashDraftModel"]
    assert view["dflash_config"] == {"mask_token_id": 2047, "target_layer_ids": [1, 2]}
    assert view["eagle_aux_hidden_state_layer_ids"] == [2, 3]
    assert (view["hidden_size"], view["vocab_size"], view["target_hidden_size"]) == (128, 2048, 128)
    two = vllm_draft_view(spec(speculators_model_type="dflash2", **DFLASH2_KEYS))
    assert two["architectures"] == ["DFlash2DraftModel"] and two["dflash_config"]["selector_top_k"] == 4
    assert draft_layout(spec()).name == "speculators" and draft_layout(DRAFT).name == "z-lab"


def test_speculators_layout_good_pair_and_each_bad_field_named_as_written() -> None:
    assert check(draft=spec()) == []
    assert check(draft=spec(speculators_model_type="dflash2", **DFLASH2_KEYS)) == []
    p = only(check(draft=spec(target_hidden_size=256)))
    assert p.code == "HiddenSizeMismatch" and "256 (its target_hidden_size)" in p.message
    layer = copy.deepcopy(SPEC_DRAFT["transformer_layer_config"]) | {"vocab_size": 4096}
    p = only(check(draft=spec(transformer_layer_config=layer)))
    assert p.code == "VocabSizeMismatch" and "transformer_layer_config.vocab_size 4096" in p.message
    p = only(check(draft=spec(mask_token_id=2048)))
    assert p.code == "MaskTokenIdOutOfRange" and p.message.startswith("mask_token_id 2048 ")
    assert only(check(draft=spec(mask_token_id=None))).message == "mask_token_id is absent; vLLM requires it"
    assert only(check(draft=spec(aux_hidden_state_layer_ids=None))).code == "TargetLayerIdsMissing"


@pytest.mark.parametrize(("aux", "ok"), [([1, 4], True), ([0, 2], False), ([2, 5], False)],
                         ids=["both-ends-good", "low-end-0", "high-end-5"])
def test_speculators_aux_ids_count_from_one(aux: list[int], ok: bool) -> None:
    problems = check(draft=spec(aux_hidden_state_layer_ids=aux))
    if ok:
        assert problems == []
        return
    p = only(problems)
    bad = aux[0] if aux[0] == 0 else aux[1]
    assert p.code == "TargetLayerIdOutOfRange"
    assert f"= {bad} (target layer {bad - 1} counted from 0; vLLM subtracts 1)" in p.message
    assert "4 layers [1, 4]" in p.message


def test_z_lab_layer_ids_at_both_ends() -> None:
    assert check(draft=with_(DRAFT, target_layer_ids=[0, 3])) == []


def test_speculators_layout_that_is_not_dflash_or_not_readable() -> None:
    p = only(check(draft=spec(speculators_model_type="eagle3")))
    assert p.code == "UnsupportedDraftFormat" and "'eagle3'" in p.message
    p = only(check(draft=spec(speculators_config=None, model_type="dflash")))
    assert p.code == "DraftConfigUnreadable" and "'dflash'" in p.message
    assert check(draft=spec(speculators_config=None, model_type="speculators")) == []


def test_every_dflash_architecture_vllm_registers_is_accepted_with_vllms_prefixing() -> None:
    for arch in ("DFlashDraftModel", "DFlashLagunaForCausalLM", "MuseGlimmerAssistantModel",
                 "DFlashMuseGlimmerAssistantModel", "LagunaForCausalLM"):  # the last becomes DFlashLaguna...
        assert check(draft=with_(DRAFT, architectures=[arch])) == [], arch
    assert vllm_draft_view(with_(DRAFT, architectures=["MuseGlimmerAssistantModel"]))["architectures"] == [
        "DFlashMuseGlimmerAssistantModel"]
    p = only(check(draft=with_(DRAFT, architectures=["Qwen3ForCausalLM"])))
    assert p.code == "UnsupportedDraftArchitecture" and "prefixes a name with DFlash" in p.message


def test_dflash2_needs_its_convolution_and_selector_keys() -> None:
    draft = with_(DRAFT, architectures=["DFlash2DraftModel"])
    draft["dflash_config"] |= DFLASH2_KEYS
    assert check(draft=draft) == []
    del draft["dflash_config"]["selector_rank"], draft["dflash_config"]["conv_group_size"]
    p = only(check(draft=draft))
    assert p.code == "DraftConfigIncomplete"
    assert "dflash_config.conv_group_size, dflash_config.selector_rank" in p.message
    p = only(check(draft=spec(speculators_model_type="dflash2")))
    assert p.code == "DraftConfigIncomplete" and "needs conv_kernel_size, conv_group_size" in p.message


def test_architecture_newer_than_the_serving_vllm() -> None:
    draft = with_(DRAFT, architectures=["DFlash2DraftModel"])
    draft["dflash_config"] |= DFLASH2_KEYS
    p = only(check(draft=draft, vllm="0.23.0"))
    assert p.code == "DraftArchitectureNeedsNewerVLLM"
    assert p.message == ("draft architecture DFlash2DraftModel is served from vLLM 0.28 on; the serving vLLM is "
                         "0.23.0")
    assert check(draft=draft, vllm="0.28.0") == [] == check(draft=draft, vllm=None)
    assert check(vllm="0.20.1") == []  # DFlashDraftModel: every DFlash release


HYBRID = TARGET | {"layer_types": ["linear_attention", "full_attention"] * 2, "num_attention_heads": 2,
                   "num_key_value_heads": 1, "head_dim": 64}


@pytest.mark.parametrize(("vllm", "heads", "flagged"), [
    ("0.23.0", 1, False), ("0.23.0", 2, True), ("0.25.1", 2, True), ("0.26.0", 2, False), ("0.32.0", 2, False),
    (None, 2, False)])
def test_kv_geometry_rule_bites_only_before_vllm_0_26(vllm: str | None, heads: int, flagged: bool) -> None:
    draft = with_(DRAFT, num_attention_heads=2, num_key_value_heads=heads, head_dim=64)
    problems = check(target=HYBRID, draft=draft, vllm=vllm)
    if not flagged:
        assert problems == []
        return
    p = only(problems)
    assert p.code == "KVGeometryMismatch"
    assert "= 128, the hybrid linear-attention target's = 64" in p.message
    assert f"vLLM {vllm} cannot" in p.message and "use vLLM 0.26+ or a draft whose" in p.message


def test_kv_geometry_rule_needs_a_hybrid_target_and_reads_speculators_drafts() -> None:
    wide = with_(DRAFT, num_attention_heads=2, num_key_value_heads=2, head_dim=64)
    assert check(target=HYBRID | {"layer_types": ["full_attention"] * 4}, draft=wide, vllm="0.23.0") == []
    # Qwen3Next without layer_types in its config is still hybrid (its default interleaves linear attention).
    qwen3next = {k: v for k, v in HYBRID.items() if k != "layer_types"} | {"model_type": "qwen3_next"}
    assert only(check(target=qwen3next, draft=wide, vllm="0.24.0")).code == "KVGeometryMismatch"
    layer = SPEC_DRAFT["transformer_layer_config"] | {"head_dim": 128}
    assert only(check(target=HYBRID, draft=spec(transformer_layer_config=layer), vllm="0.23.0")).code == \
        "KVGeometryMismatch"


def test_version_parsing() -> None:
    assert parse_version("0.23.0") == (0, 23) and parse_version("v0.26.1rc1+cpu") == (0, 26)
    assert parse_version(None) is None and parse_version("main") is None


def test_cli_json_verdict_names_checker_version_and_layout(tmp_path: Path, capsys) -> None:
    target = write_model(tmp_path / "t", HYBRID, TOKENIZER)
    draft = write_model(tmp_path / "d", spec(transformer_layer_config=SPEC_DRAFT["transformer_layer_config"]
                                             | {"num_key_value_heads": 2}))
    assert main_check_pair([str(target), str(draft), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"compatible": True, "problems": [], "checked_by": "operator",
                                                   "vllm_version": None, "draft_layout": "speculators", "notes": []}
    assert main_check_pair([str(target), str(draft), "--json", "--vllm-version", "0.23.0"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [p["code"] for p in report["problems"]] == ["KVGeometryMismatch"] and report["vllm_version"] == "0.23.0"


def test_the_vllm_image_judges_pairs_with_this_library_not_a_copy() -> None:
    """images/vllm installs dflash-cache beside its plugin: the plugin holds no pair rules of its own."""
    root = Path(__file__).resolve().parents[2]
    plugin = root / "images" / "vllm" / "plugin"
    assert not list(plugin.rglob("pairing*.py")), "the plugin carries its own pair rules again"
    assert "from dflash_cache import pairing" in (plugin / "dflash_vllm" / "check.py").read_text()
    assert '"dflash-cache==' in (plugin / "pyproject.toml").read_text()
    dockerfile = (root / "images" / "vllm" / "Dockerfile").read_text()
    assert "COPY dflash-cache " in dockerfile and "/tmp/dflash-vllm/dflash-cache" in dockerfile


def test_a_verdict_too_long_for_a_termination_message_keeps_its_verdict_and_first_problem() -> None:
    from dflash_cache.pairing import TERMINATION_LIMIT, verdict, verdict_message

    problems = [Problem(f"Code{i}", "x" * 900) for i in range(10)]
    long = verdict(problems, checked_by="vllm", vllm_version="0.32.0", draft_layout="z-lab", notes=["n" * 2000] * 3)
    message = verdict_message(long)
    assert len(message.encode()) < TERMINATION_LIMIT
    cut = json.loads(message)
    assert cut["compatible"] is False and cut["vllm_version"] == "0.32.0" and cut["problems"][0]["code"] == "Code0"
    short = verdict([], checked_by="vllm", vllm_version="0.32.0", draft_layout="z-lab")
    assert json.loads(verdict_message(short)) == short
