"""Reading a pair from two checkpoint directories: config.json, tokenizer fingerprints, safetensors headers."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from dflash_cache.pairing.layout import PairInputError, Problem
from dflash_cache.pairing.rules import check_configs

# Files whose content defines token <-> id mapping when there is no tokenizer.json (slow tokenizers).
VOCAB_FILES = ("vocab.json", "merges.txt", "tokenizer.model", "vocab.txt", "spiece.model", "added_tokens.json")
# The parts of tokenizer.json that change which ids a text becomes; decoder, post_processor, padding and truncation
# only change decoding or special-token wrapping, which vLLM takes from the target anyway.
TOKENIZER_JSON_KEYS = ("model", "added_tokens", "normalizer", "pre_tokenizer")


def canonical(value: Any) -> bytes:
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
        digest = hashlib.sha256(canonical({key: data.get(key) for key in TOKENIZER_JSON_KEYS}))
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


def has_d2t(model_dir: Path) -> bool | None:
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
    d2t = has_d2t(draft_dir) if draft.get("draft_vocab_size") is not None else None
    return check_configs(
        target, draft,
        target_tokenizer=tokenizer_fingerprint(target_dir),
        draft_tokenizer=tokenizer_fingerprint(draft_dir),
        num_speculative_tokens=num_speculative_tokens,
        draft_has_d2t=d2t,
        vllm_version=vllm_version,
    )


