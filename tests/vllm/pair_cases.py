"""Draft configs in every layout vLLM serves, one good and one bad per pair rule, and the verdicts expected from the
image's `dflash-check-pair` on each vLLM line. Shared by test_v023_check_pair.py and test_v032_check_pair.py.

The drafts are config-only (the check reads no weights) and ship no tokenizer (vLLM gives a draft the target's);
they are variants of tiny_models' matching draft for the tiny hybrid Qwen3Next target (4 layers, vocab 512,
hidden 128, 1 KV head x 64).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tiny_models
import vllm_proc

LAYOUTS = ("z-lab", "dflash2", "speculators")
RULES = {  # rule -> (z-lab / dflash2 change, speculators change, expected problem code)
    "hidden": ({"target_hidden_size": 256}, {"target_hidden_size": 256}, "HiddenSizeMismatch"),
    "vocab": ({"vocab_size": 1024}, {"transformer_layer_config.vocab_size": 1024}, "VocabSizeMismatch"),
    "layer-low": ({"dflash_config.target_layer_ids": [-1, 2]}, {"aux_hidden_state_layer_ids": [0, 3]},
                  "TargetLayerIdOutOfRange"),
    "layer-high": ({"dflash_config.target_layer_ids": [1, 4]}, {"aux_hidden_state_layer_ids": [2, 5]},
                   "TargetLayerIdOutOfRange"),
    "mask": ({"dflash_config.mask_token_id": 512}, {"mask_token_id": 512}, "MaskTokenIdOutOfRange"),
}
# Layer ids at both ends of the target that are fine: 0-based 0 and 3 (speculators: 1 and 4).
GOOD_EDGES = ({"dflash_config.target_layer_ids": [0, 3]}, {"aux_hidden_state_layer_ids": [1, 4]})


def _set(config: dict, changes: dict) -> dict:
    config = json.loads(json.dumps(config))
    for dotted, value in changes.items():
        *parents, name = dotted.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        if value is None:
            node.pop(name, None)
        else:
            node[name] = value
    return config


def write_cases(draft: Path, root: Path) -> dict[str, Path]:
    """Config-only draft dirs named '<layout>/<case>' from `draft` (a tiny_models z-lab draft)."""
    base = json.loads((draft / "config.json").read_text())
    configs: dict[str, dict] = {}
    for layout in LAYOUTS:
        laid = tiny_models.to_layout(base, layout)
        speculators = layout == "speculators"
        configs[f"{layout}/good"] = laid
        configs[f"{layout}/good-edges"] = _set(laid, GOOD_EDGES[speculators])
        for rule, (zlab, spec, _) in RULES.items():
            configs[f"{layout}/{rule}"] = _set(laid, spec if speculators else zlab)
    # Version-dependent and vLLM-decides cases (z-lab unless named).
    configs["z-lab/kv-wide"] = _set(base, {"num_key_value_heads": 2})
    configs["z-lab/lilicorr"] = _set(base, {"architectures": ["LiLiCorrDraftModel"]})
    configs["z-lab/no-vocab"] = _set(base, {"vocab_size": None})
    configs["speculators/dflash2"] = _set(tiny_models.to_layout(base, "speculators"),
                                          {"speculators_model_type": "dflash2", **tiny_models.DFLASH2_KEYS})
    out = {}
    for name, config in configs.items():
        path = root / name
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps(config, indent=2))
        out[name] = path
    return out


def expected(series: str) -> dict[str, list[str]]:
    """Problem codes per case, in the verdict's order, for vLLM `series` with the dflash-vllm plugin installed."""
    old = series == "0.23"
    out: dict[str, list[str]] = {}
    for layout in LAYOUTS:
        # vLLM 0.23's registry has no DFlash2DraftModel (0.28+): every DFlash2 draft is refused there first.
        first = ["UnsupportedDraftArchitecture"] if (old and layout == "dflash2") else []
        out[f"{layout}/good"] = first
        out[f"{layout}/good-edges"] = first
        for rule, (_, _, code) in RULES.items():
            out[f"{layout}/{rule}"] = first + [code]
    out["z-lab/kv-wide"] = ["KVGeometryMismatch"] if old else []
    out["z-lab/lilicorr"] = ["UnsupportedDraftArchitecture"] if old else []
    out["z-lab/no-vocab"] = ["VocabSizeMismatch"]
    out["speculators/dflash2"] = ["DraftArchitectureNeedsNewerVLLM", "DraftConfigUnreadable"] if old else []
    return out


DRIVER = """
import json, sys
from dflash_vllm.check import check
target, cases = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps({name: check(target, path) for name, path in cases.items()}))
"""


def judge_all(target: Path, cases: dict[str, Path], plugin_dir: Path) -> dict[str, dict]:
    """Every case judged in one process with the installed plugin on the path, as in the image (vLLM's import and
    the target class load are most of the cost; one process pays them once)."""
    paths = json.dumps({name: str(path) for name, path in cases.items()})
    done = subprocess.run([sys.executable, "-c", DRIVER, str(target), paths],
                          env=vllm_proc.vllm_env(plugin_dir) | {"VLLM_LOGGING_STREAM": "ext://sys.stderr"},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_cli(argv: list[str], env: dict[str, str]) -> tuple[int, dict, str]:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, f"expected one JSON line on stdout, got {done.stdout!r}; stderr {done.stderr[-3000:]}"
    return done.returncode, json.loads(lines[0]), done.stderr


def judge_all_and_cli(target: Path, cases: dict[str, Path], plugin_dir: Path, cli_argv: list[str],
                      cli_env: dict[str, str]) -> tuple[dict[str, dict], tuple[int, dict, str]]:
    """judge_all and one command-line run at once: each is mostly vLLM's import, so they overlap well."""
    with ThreadPoolExecutor(2) as pool:
        judged = pool.submit(judge_all, target, cases, plugin_dir)
        cli = pool.submit(run_cli, cli_argv, cli_env)
        return judged.result(), cli.result()
