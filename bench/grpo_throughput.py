"""GRPO stage throughput against the same GRPOTrainer call made directly.

    python bench/grpo_throughput.py [--steps 30] [--recipe configs/r1_zero.yaml]

Both sides train the recipe's GRPO config for the same number of steps from the same base model
on the same prompts. "direct" builds trl.GRPOTrainer from the stage's own ``grpo_args`` and
rewards, as a user of TRL would call it; "stage" runs our GRPO stage through the runner (planning, reward registry, checkpoints,
log writing, artifact commit with sha256). Prints steps/s for both and the ratio.
The base model and data come from the recipe's own cached stages (built first if missing).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flows  # noqa: E402,F401
from flows.common import apply_runtime, store_for  # noqa: E402
from flows.recipes import load  # noqa: E402
from r1.models import load_model, load_tokenizer  # noqa: E402
from r1.runner import run_stage  # noqa: E402
from r1.store import Store  # noqa: E402
from stages import base, data, grpo  # noqa: E402


def direct(model_dir: str, data_dir: str, cfg, steps: int, out: str) -> float:
    """The plain-TRL baseline: the stage's own GRPOConfig and rewards, the trainer called directly.

    ``grpo_args`` builds the arguments (so the baseline cannot drift from the stage's knobs); only
    checkpointing is off, as a user timing TRL would run it.
    """
    from datasets import load_from_disk
    from trl import GRPOTrainer

    from r1.rewards import build_rewards

    args = grpo.grpo_args(cfg.model_copy(update={"trl_args": {**cfg.trl_args, "save_strategy": "no"}}), out)
    funcs, _ = build_rewards(cfg.rewards)
    trainer = GRPOTrainer(
        model=load_model(model_dir),
        reward_funcs=funcs,
        args=args,
        train_dataset=load_from_disk(data_dir)["train"],
        processing_class=load_tokenizer(model_dir),
    )
    t = time.monotonic()
    trainer.train()
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default=str(Path(__file__).resolve().parent.parent / "configs/r1_zero.yaml"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    recipe = load("r1-zero", args.recipe, args.overrides)
    apply_runtime(recipe.runtime)
    store = store_for(recipe.store)
    task_data = run_stage(store, data.STAGE, recipe.data, {}, "data")
    base_model = run_stage(store, base.STAGE, recipe.base, {"data": task_data}, "base")
    cfg = recipe.grpo.model_copy(update={"max_steps": args.steps, "save_steps": max(1, args.steps // 3)})
    with tempfile.TemporaryDirectory() as tmp:
        t_direct = direct(base_model.path, task_data.path, cfg, args.steps, f"{tmp}/direct")
        t = time.monotonic()
        run_stage(Store(f"{tmp}/store"), grpo.STAGE, cfg, {"model": base_model, "data": task_data}, "bench")
        t_stage = time.monotonic() - t
    print(f"steps {args.steps}, {cfg.prompts_per_step} prompts x {cfg.num_generations} generations")
    print(f"direct GRPOTrainer  {args.steps / t_direct:7.3f} steps/s  ({t_direct:.1f} s)")
    print(
        f"GRPO stage          {args.steps / t_stage:7.3f} steps/s  ({t_stage:.1f} s, incl. checkpoints and commit)"
    )
    print(f"ratio stage/direct throughput = {t_direct / t_stage:.3f}")


if __name__ == "__main__":
    main()
