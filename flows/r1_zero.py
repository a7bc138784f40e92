"""R1-Zero: task data -> base -> evaluate -> GRPO (accuracy + format) -> evaluate -> report."""

from __future__ import annotations

from prefect import flow

from flows.common import apply_runtime, publish_report, stage_task, store_for
from flows.recipes import R1ZeroRecipe
from r1.store import ArtifactRef, Store
from stages import base, data, evaluate, grpo, report


def data_and_base(store: Store, recipe: R1ZeroRecipe) -> tuple[ArtifactRef, ArtifactRef]:
    task_data = stage_task(store, data.STAGE, recipe.data, {}, "data")
    return task_data, stage_task(store, base.STAGE, recipe.base, {"data": task_data}, "base")


def r1_zero_model(
    store: Store, recipe: R1ZeroRecipe, task_data: ArtifactRef, base_model: ArtifactRef
) -> ArtifactRef:
    """GRPO straight from the base with the recipe's rule rewards."""
    return stage_task(store, grpo.STAGE, recipe.grpo, {"model": base_model, "data": task_data}, "r1_zero")


def zero_branch(store: Store, recipe: R1ZeroRecipe) -> dict[str, ArtifactRef]:
    """Task data, the base model and the R1-Zero model (shared by every flow that needs them)."""
    task_data, base_model = data_and_base(store, recipe)
    return {
        "data": task_data,
        "base": base_model,
        "r1_zero": r1_zero_model(store, recipe, task_data, base_model),
    }


def evaluate_models(store: Store, recipe, task_data: ArtifactRef, models: dict[str, ArtifactRef]) -> dict:
    """The evaluate stage on every model, as report inputs ``eval/<name>`` in pipeline order."""
    return {
        f"eval/{name}": stage_task(
            store, evaluate.STAGE, recipe.eval, {"model": ref, "data": task_data}, f"eval:{name}"
        )
        for name, ref in models.items()
    }


@flow(name="r1-zero", log_prints=False)
def r1_zero(recipe: R1ZeroRecipe) -> str:
    """Run the R1-Zero branch; return the path of report.json."""
    apply_runtime(recipe.runtime)
    store = store_for(recipe.store)
    task_data, base_model = data_and_base(store, recipe)
    evals = evaluate_models(store, recipe, task_data, {"base": base_model})  # before RL, as a user reads it
    zero = r1_zero_model(store, recipe, task_data, base_model)
    evals |= evaluate_models(store, recipe, task_data, {"r1_zero": zero})
    models = {"base": base_model, "r1_zero": zero}
    cfg = report.ReportConfig(
        title=f"{recipe.name}: R1-Zero on {recipe.data.kind}", order=list(models), curves=["r1_zero"]
    )
    out = stage_task(store, report.STAGE, cfg, {**evals, "train/r1_zero": zero}, "report")
    return publish_report(store, recipe.name, out)
