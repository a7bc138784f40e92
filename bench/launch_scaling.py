"""Speed of 2-process against 1-process training on the default recipe (accelerate launch, CPU).

    python bench/launch_scaling.py [--sft-steps 60] [--grpo-steps 10] [--recipe configs/r1_full.yaml]

Trains the recipe's cold-start SFT section and its R1-Zero GRPO section from the recipe's base
model (built first if missing) three ways: in-process on 1 thread, in-process on 2 threads, and
2 processes x 1 thread under accelerate (DDP over gloo, configs/accelerate/cpu_ddp.yaml). Same
effective batch in all three (each rank takes half). Prints steps/s and the ratios. On two cores
expect little gain: the point is that the distributed path is real; on N GPUs it is the scale-out.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flows  # noqa: E402,F401
from flows.common import store_for  # noqa: E402
from flows.recipes import load  # noqa: E402
from r1.launch import LaunchConfig  # noqa: E402
from r1.runner import run_stage  # noqa: E402
from r1.store import Store  # noqa: E402
from stages import base, curate, data, grpo, sft  # noqa: E402
from stages.curate import CurateConfig  # noqa: E402

DDP = LaunchConfig(mode="accelerate", config_file="configs/accelerate/cpu_ddp.yaml", num_processes=2)


def timed(store: Store, stage, cfg, inputs, label: str) -> float:
    """Steps per second of one fresh run of the stage (wall time from its manifest)."""
    ref = run_stage(store, stage, cfg, inputs, label)
    m = store.manifest(ref.key)["metrics"]
    return m["steps"] / m["wall_seconds"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default=str(Path(__file__).resolve().parent.parent / "configs/r1_full.yaml"))
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--grpo-steps", type=int, default=10)
    args = ap.parse_args()
    import torch

    recipe = load("r1-full", args.recipe)
    main_store = store_for(recipe.store)
    task_data = run_stage(main_store, data.STAGE, recipe.data, {}, "data")
    base_model = run_stage(main_store, base.STAGE, recipe.base, {"data": task_data}, "base")
    sft_data = run_stage(
        main_store, curate.STAGE, CurateConfig(curated=2000), {"data": task_data}, "bench_sft_data"
    )
    sft_cfg = recipe.cold_start_sft.model_copy(update={"max_steps": args.sft_steps, "save_steps": 10**6})
    grpo_cfg = recipe.grpo.model_copy(update={"max_steps": args.grpo_steps, "save_steps": 10**6})
    jobs = [
        ("sft", sft.STAGE, sft_cfg, {"model": base_model, "data": sft_data}),
        ("grpo", grpo.STAGE, grpo_cfg, {"model": base_model, "data": task_data}),
    ]
    for name, stage, cfg, inputs in jobs:
        rates = {}
        for mode, threads, launch in (
            ("1 process x 1 thread", 1, None),
            ("1 process x 2 threads", 2, None),
            ("2 processes x 1 thread", 1, DDP),
        ):
            torch.set_num_threads(threads)
            run_cfg = cfg.model_copy(update={"launch": launch}) if launch else cfg
            with tempfile.TemporaryDirectory() as tmp:  # a fresh store: never a cache hit
                rates[mode] = timed(Store(tmp), stage, run_cfg, inputs, f"bench_{name}")
        one = rates["1 process x 1 thread"]
        print(f"\n{name} ({cfg.max_steps} steps, same effective batch):")
        for mode, rate in rates.items():
            print(f"  {mode:24s} {rate:7.3f} steps/s   ratio to 1x1 = {rate / one:.2f}")
    torch.set_num_threads(2)


if __name__ == "__main__":
    main()
