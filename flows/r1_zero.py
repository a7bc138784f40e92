"""R1-Zero: task data -> base -> evaluate -> GRPO (accuracy + format) -> evaluate -> report."""

from __future__ import annotations

from prefect import flow

from flows.common import Stages, publish_report, start
from flows.recipes import R1ZeroRecipe
from r1.store import ArtifactRef
from stages import base, benchmark, data, evaluate, grpo, report


def zero_branch(run: Stages) -> dict[str, ArtifactRef]:
    """Task data, the base model and the R1-Zero model (shared by every flow that needs them)."""
    task_data = run(data.STAGE, "data")
    base_model = run(base.STAGE, "base", data=task_data)
    return {
        "data": task_data,
        "base": base_model,
        "r1_zero": run(grpo.STAGE, "grpo", label="r1_zero", model=base_model, data=task_data),
    }


def evaluate_models(
    run: Stages,
    task_data: ArtifactRef,
    models: dict[str, ArtifactRef],
    config: dict[str, evaluate.EvalConfig] | None = None,
) -> dict[str, ArtifactRef]:
    """The evaluate stage on every model, by model name, in pipeline order (``config`` per model
    where it differs from the recipe's ``eval`` section)."""
    config = config or {}
    return {
        name: run(evaluate.STAGE, config.get(name, "eval"), label=f"eval:{name}", model=ref, data=task_data)
        for name, ref in models.items()
    }


def benchmark_eval(eval_cfg: evaluate.EvalConfig, bench: benchmark.BenchmarkConfig) -> evaluate.EvalConfig:
    """The recipe's evaluation on a benchmark's test split, with the benchmark's k and length."""
    generation = eval_cfg.generation
    if bench.max_new_tokens:
        generation = generation.model_copy(update={"max_new_tokens": bench.max_new_tokens})
    k = bench.k or eval_cfg.k
    return eval_cfg.model_copy(
        update={
            "split": "test",
            "limit": None,
            "k": k,
            "generation": generation,
            "pass_at": [j for j in eval_cfg.pass_at if j <= k],
            "modes": [],
        }
    )


def evaluate_benchmarks(run: Stages, recipe, models: dict[str, ArtifactRef]) -> dict[str, ArtifactRef]:
    """Every model on every benchmark of the recipe, named ``<model>@<benchmark>``."""
    out: dict[str, ArtifactRef] = {}
    for name, bench in recipe.benchmarks.items():
        problems = run(benchmark.STAGE, bench, label=f"benchmark:{name}")
        cfg = benchmark_eval(recipe.eval, bench)
        for model, ref in models.items():
            out[f"{model}@{name}"] = run(
                evaluate.STAGE, cfg, label=f"eval:{model}@{name}", model=ref, data=problems
            )
    return out


@flow(name="r1-zero", log_prints=False)
def r1_zero(recipe: R1ZeroRecipe) -> str:
    """Run the R1-Zero branch; return the path of report.json."""
    run = start(recipe)
    task_data = run(data.STAGE, "data")
    base_model = run(base.STAGE, "base", data=task_data)
    evals = evaluate_models(run, task_data, {"base": base_model})  # before RL, as a user reads it
    zero = run(grpo.STAGE, "grpo", label="r1_zero", model=base_model, data=task_data)
    evals |= evaluate_models(run, task_data, {"r1_zero": zero})
    evals |= evaluate_benchmarks(run, recipe, {"base": base_model, "r1_zero": zero})
    cfg = report.ReportConfig(
        title=f"{recipe.name}: R1-Zero on {recipe.data.kind}", evaluations=list(evals), training=["r1_zero"]
    )
    out = run(report.STAGE, cfg, label="report", **report.report_inputs(evals, {"r1_zero": zero}))
    return publish_report(run.store, recipe.name, out)
