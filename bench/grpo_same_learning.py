"""The fast GRPO engine learns what TRL's trainer learns: 300-step runs of both, over seeds.

    python bench/grpo_same_learning.py [--seeds 0,1,2] [--steps 300] [--store runs] [overrides ...]

Trains the default recipe's R1-Zero GRPO stage from the same cached base on the same prompts with
``grpo.engine=trl`` (trl.GRPOTrainer as it is) and ``grpo.engine=fast`` (r1/grpo_trainer.py), one
run per seed, evaluates every model the same way, and prints per engine the mean and sd over
seeds of held-out pass@1 and greedy accuracy, the training reward every 50 steps, and wall time.
The engines draw different random rollouts, so runs differ seed by seed; what must agree is the
spread. (``tests/test_grpo_trainer.py`` shows one fixed batch gives the same loss and gradients.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flows  # noqa: E402,F401
from flows.common import apply_runtime, store_for  # noqa: E402
from flows.recipes import load  # noqa: E402
from r1.runner import run_stage  # noqa: E402
from stages import base, data, evaluate, grpo  # noqa: E402


def _stat(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}  ({', '.join(f'{v:.3f}' for v in values)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    recipe = load("r1-zero", None, args.overrides)
    apply_runtime(recipe.runtime)
    store = store_for(recipe.store)
    task_data = run_stage(store, data.STAGE, recipe.data, {}, "data")
    base_model = run_stage(store, base.STAGE, recipe.base, {"data": task_data}, "base")
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, dict[str, list]] = {}
    for engine in ("trl", "fast"):
        for seed in seeds:
            cfg = recipe.grpo.model_copy(
                update={"engine": engine, "seed": recipe.grpo.seed + seed, "max_steps": args.steps}
            )
            ref = run_stage(
                store, grpo.STAGE, cfg, {"model": base_model, "data": task_data}, f"{engine}:{seed}"
            )
            ev = run_stage(
                store, evaluate.STAGE, recipe.eval, {"model": ref, "data": task_data}, f"eval:{engine}:{seed}"
            )
            m, log = ev.manifest()["metrics"], ref.manifest()["metrics"]
            rows = [r for r in (ref.file("train_log.jsonl").read_text().splitlines()) if '"reward"' in r]
            import json

            rewards = [json.loads(r)["reward"] for r in rows]
            curve = [statistics.mean(rewards[i : i + 50]) for i in range(0, len(rewards), 50)]
            r = results.setdefault(engine, {"pass@1": [], "accuracy": [], "wall": [], "curve": []})
            r["pass@1"].append(m["pass@1"])
            r["accuracy"].append(m["accuracy"])
            r["wall"].append(log["wall_seconds"])
            r["curve"].append(curve)
    print(f"{args.steps} GRPO steps from base {base_model.key}, seeds {seeds}")
    for engine, r in results.items():
        print(f"[{engine}] held-out pass@1   {_stat(r['pass@1'])}")
        print(f"[{engine}] greedy accuracy   {_stat(r['accuracy'])}")
        print(f"[{engine}] wall seconds      {_stat(r['wall'])}")
        means = [statistics.mean(c[i] for c in r["curve"]) for i in range(len(r["curve"][0]))]
        print(f"[{engine}] reward per 50 steps (mean over seeds): {', '.join(f'{v:.3f}' for v in means)}")
    gap = statistics.mean(results["fast"]["pass@1"]) - statistics.mean(results["trl"]["pass@1"])
    print(f"pass@1 fast - trl = {gap:+.3f}")


if __name__ == "__main__":
    main()
