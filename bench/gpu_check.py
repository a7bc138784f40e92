"""GPU check, ready for a CUDA machine: the micro-world stages on the GPU in bf16, and vLLM if present.

    python bench/gpu_check.py [--steps 20] [--store /tmp/gpu_check]

1. SFT and GRPO stages of the default micro-world recipe, a few steps each, on CUDA (bf16, which
   the trainers pick by themselves on a GPU) and then on the CPU (hidden from CUDA): steps/s of
   both and the ratio.
2. Generation: transformers backend on CUDA, and the vLLM backend when vLLM is installed (tokens/s,
   and how many greedy completions agree).
3. TRL's vLLM rollouts (grpo.rollouts=vllm_colocate) for a few GRPO steps, when vLLM is installed.
Prints one line per check; exits non-zero if a check fails. Nothing here runs in CI (no GPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def stage_rates(steps: int, store_root: str, rollouts: str = "transformers") -> dict[str, float]:
    """Steps/s of short SFT and GRPO runs in this process (CPU or GPU, whatever torch sees)."""
    import flows  # noqa: F401
    from flows.recipes import load
    from r1.runner import run_stage
    from r1.store import Store
    from stages import base, curate, data, grpo, sft
    from stages.curate import CurateConfig

    recipe = load("r1-full", ROOT / "configs/r1_full.yaml", [f"store={store_root}"])
    store = Store(store_root)
    task_data = run_stage(store, data.STAGE, recipe.data, {}, "data")
    base_model = run_stage(store, base.STAGE, recipe.base, {"data": task_data}, "base")
    sft_data = run_stage(store, curate.STAGE, CurateConfig(curated=1000), {"data": task_data}, "sft_data")
    device = "cuda" if os.environ.get("CUDA_VISIBLE_DEVICES") != "" else "cpu"
    rates = {}
    for name, stage, cfg, inputs in (
        ("sft", sft.STAGE, recipe.cold_start_sft, {"model": base_model, "data": sft_data}),
        (
            "grpo",
            grpo.STAGE,
            recipe.grpo.model_copy(update={"rollouts": rollouts}),
            {"model": base_model, "data": task_data},
        ),
    ):
        cfg = cfg.model_copy(
            update={
                "max_steps": steps,
                "save_steps": 10**6,
                "seed": zlib.crc32(f"{device}/{rollouts}".encode()) % 1000,
            }
        )
        ref = run_stage(store, stage, cfg, inputs, f"{name}_{device}")
        m = store.manifest(ref.key)["metrics"]
        rates[name] = m["steps"] / m["wall_seconds"]
    return rates


def generation(model_dir: str, prompts: list, kind: str) -> tuple[float, list[str]]:
    from r1.generation import SamplingConfig, VLLMSettings, make_backend

    backend = make_backend(kind, model_dir, vllm=VLLMSettings(gpu_memory_utilization=0.3))
    t = time.monotonic()
    out = backend.generate(prompts, 4, SamplingConfig(temperature=1.0, max_new_tokens=96), 0)
    rate = sum(g.num_tokens for group in out for g in group) / (time.monotonic() - t)
    greedy = backend.generate(prompts[:64], 1, SamplingConfig(temperature=0, max_new_tokens=96), 0)
    return rate, [g[0].text for g in greedy]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--store", default="/tmp/r1_gpu_check")
    ap.add_argument("--child", choices=["cpu"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "cpu":
        print(json.dumps(stage_rates(args.steps, args.store)))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check here")
        return 1
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    gpu = stage_rates(args.steps, args.store)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    cpu_out = (
        subprocess.run(
            [sys.executable, __file__, "--child", "cpu", "--steps", str(args.steps), "--store", args.store],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    cpu = json.loads(cpu_out)
    for name in ("sft", "grpo"):
        print(
            f"{name:5s} GPU bf16 {gpu[name]:7.2f} steps/s   CPU {cpu[name]:7.2f} steps/s   GPU/CPU = {gpu[name] / cpu[name]:.1f}"
        )
    from r1.store import Store

    store = Store(args.store)
    base_dir = next(m for m in store.list() if m["stage"] == "base")["key"]
    model_dir = str(store.path(base_dir))
    prompts = list(
        Store(args.store)
        .ref(next(m for m in store.list() if m["stage"] == "task_data")["key"])
        .dataset()["test"]["prompt"][:256]
    )
    hf_rate, hf_greedy = generation(model_dir, prompts, "transformers")
    print(f"generation transformers/CUDA {hf_rate:9.0f} tokens/s")
    if importlib.util.find_spec("vllm") is None:
        print("vLLM not installed: vLLM backend and TRL vLLM rollouts NOT checked (pip install -e '.[gpu]')")
        return 0
    vl_rate, vl_greedy = generation(model_dir, prompts, "vllm")
    agree = sum(a == b for a, b in zip(hf_greedy, vl_greedy, strict=True))
    print(
        f"generation vLLM            {vl_rate:9.0f} tokens/s   vLLM/transformers = {vl_rate / hf_rate:.1f}   greedy agree {agree}/{len(hf_greedy)}"
    )
    rollouts = stage_rates(max(4, args.steps // 4), args.store, rollouts="vllm_colocate")
    print(f"grpo with TRL vLLM colocate rollouts {rollouts['grpo']:.2f} steps/s")
    return 0 if agree >= 0.75 * len(hf_greedy) else 1


if __name__ == "__main__":
    sys.exit(main())
