"""The cache Job's check step on the real GPU build, as a pod without a GPU runs it (bash scripts/gpu/device.sh
checkpair VERSION): `python3 -m dflash_vllm.check --output FILE TARGET DRAFT` with that release's GPU wheel and the
machine's CUDA torch, in three environments:

- gpu: the machine as it is (the GPU and its driver visible), for comparison;
- no-gpu: what the cache Job's check container gets (render_cache: no GPU requested, NVIDIA_VISIBLE_DEVICES=void,
  so the NVIDIA runtime injects no device and no driver library): in a private mount namespace, every libcuda /
  libnvidia-ml file and /dev/nvidia* are covered by empty ones, so no driver can load. (The 2026-12-03 run also set
  CUDA_VISIBLE_DEVICES=""; the container no longer does, as the API server drops empty values.)
- no-gpu-no-plugin: the same with VLLM_PLUGINS="" (no general plugin loads): the seed's bug must be the verdict.

Pairs: the all-accepting tiny pair (compatible with the plugin), a draft whose hidden size is doubled (refused), and
the all-accepting draft with 2 KV heads (proof.make_kv_wide_draft: KVGeometryMismatch before vLLM 0.26, compatible
from it). The nine checks run three at a time. Writes check-pair-nogpu.json to $OUT and prints a table.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "tests" / "vllm")]
import tiny_models  # noqa: E402
from proof import make_kv_wide_draft  # noqa: E402

LANE = Path(os.environ.get("LANE", "/root/gpu-lane"))
OUT = Path(os.environ.get("OUT", LANE / "out"))
PLUGIN = LANE / "plugin"
WORK = LANE / "checkpair"

# Covers every driver library and device node for the child, then runs it: no driver can be loaded or opened.
HIDE_DRIVER = r"""
set -e
for f in $(ls /dev/nvidia* 2>/dev/null); do [ -c "$f" ] && mount --bind /dev/null "$f"; done
libs=$( (ldconfig -p | awk '/libcuda\.so|libnvidia-ml\.so/ {print $NF}';
        for d in $(echo "${LD_LIBRARY_PATH:-}" | tr : ' ') /usr/lib/x86_64-linux-gnu /usr/lib64 \
                 /usr/local/nvidia/lib64 \
                 /usr/local/cuda/compat /usr/local/cuda/lib64/stubs; do
          ls "$d"/libcuda.so* "$d"/libnvidia-ml.so* 2>/dev/null; done) | xargs -r readlink -f | sort -u)
for f in $libs; do mount --bind /tmp/dflash-empty-lib "$f"; done
echo "hidden: $(echo $libs | wc -w) driver libraries, $(ls /dev/nvidia* 2>/dev/null | wc -l) device nodes" >&2
exec "$@"
"""


def wide_draft(draft: Path, out: Path) -> Path:
    shutil.copytree(draft, out, dirs_exist_ok=True)
    config = json.loads((out / "config.json").read_text())
    config["hidden_size"] *= 2
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def run(env_name: str, target: Path, draft: Path) -> dict:
    output = WORK / f"{env_name}-{draft.name}.json"
    output.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(PLUGIN), "HOME": str(WORK / "home"), "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1"}
    command = [sys.executable, "-m", "dflash_vllm.check", "--output", str(output), str(target), str(draft)]
    probe = [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"]
    if env_name.startswith("no-gpu"):
        env |= {"NVIDIA_VISIBLE_DEVICES": "void"}
        wrap = ["unshare", "--mount", "--propagation", "private", "bash", "-c", HIDE_DRIVER, "hide-driver"]
        command, probe = wrap + command, wrap + probe
    if env_name.endswith("no-plugin"):
        env["VLLM_PLUGINS"] = ""
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    seconds = round(time.monotonic() - started, 1)
    cuda = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=300).stdout.strip()
    verdict = json.loads(output.read_text()) if output.exists() else None
    return {"env": env_name, "draft": draft.name, "exit": done.returncode, "seconds": seconds,
            "torch_cuda_available": cuda, "verdict": verdict, "stderr_tail": done.stderr[-3000:]}


def main() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "home").mkdir(exist_ok=True)
    Path("/tmp/dflash-empty-lib").write_bytes(b"")
    # Its own copy of the tiny models: proof.py may be writing LANE/models/tiny at the same time.
    models = tiny_models.make_all(LANE / "models" / "tiny-check")
    target = models["target-collapsed"]
    drafts = [models["draft-matching"], wide_draft(models["draft-matching"], WORK / "draft-wide"),
              make_kv_wide_draft(WORK / "draft-kv-wide", target)]
    cases = [(env, target, d) for env in ("gpu", "no-gpu", "no-gpu-no-plugin") for d in drafts]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda case: run(*case), cases))
    import torch
    import vllm
    report = {"what": "dflash-check-pair (the cache Job's check step) on vLLM's GPU build, with and without a GPU",
              "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.node(),
              "vllm": vllm.__version__, "torch": torch.__version__, "results": results}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "check-pair-nogpu.json").write_text(json.dumps(report, indent=2))
    print(f"{'env':<18} {'draft':<16} {'exit':>4} {'s':>6} {'cuda':>5}  verdict")
    for r in results:
        v = r["verdict"] or {}
        codes = ",".join(p["code"] for p in v.get("problems", [])) or ("compatible" if v else "no verdict")
        print(f"{r['env']:<18} {r['draft']:<16} {r['exit']:>4} {r['seconds']:>6} {r['torch_cuda_available']:>5}  "
              f"{codes} (vLLM {v.get('vllm_version')})")
        if not v:
            print("   " + r["stderr_tail"][-800:].replace("\n", "\n   "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
