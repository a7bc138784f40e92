"""The four-stage DeepSeek-R1 pipeline, with the R1-Zero branch it starts from.

base -> R1-Zero (GRPO, rule rewards)                                  [shared with r1-zero]
cold-start data (R1-Zero samples filtered + curated) -> cold-start SFT from the base
-> reasoning GRPO (accuracy + format + language consistency)
-> rejection sampling (+ non-reasoning data) -> large SFT, again from the BASE
-> final GRPO from that model: rule rewards on reasoning prompts, a preference reward model on
   general prompts that enter only for the last fraction of steps.
Every model is evaluated; the report puts them side by side.
"""

from __future__ import annotations

from prefect import flow

from flows.common import apply_runtime, publish_report, stage_task, store_for
from flows.r1_zero import evaluate_models, zero_branch
from flows.recipes import R1FullRecipe
from r1.store import ArtifactRef, Store
from stages import curate, grpo, report, reward_model, sample, sft

ORDER = ("base", "r1_zero", "cold_start_sft", "reasoning_grpo", "rejection_sft", "final_grpo")


def r1_pipeline(store: Store, recipe: R1FullRecipe) -> dict[str, ArtifactRef]:
    """Every stage of the recipe up to the final model; returns the artifacts by stage name."""
    refs = zero_branch(store, recipe)
    task_data, base_model = refs["data"], refs["base"]

    cold_inputs = {"data": task_data}
    if recipe.cold_start.from_r1_zero:
        cold_inputs["samples"] = stage_task(
            store,
            sample.STAGE,
            recipe.cold_start.samples,
            {"model": refs["r1_zero"], "data": task_data},
            "cold_start_samples",
        )
    cold_data = stage_task(store, curate.STAGE, recipe.cold_start.data, cold_inputs, "cold_start_data")
    refs["cold_start_sft"] = stage_task(
        store, sft.STAGE, recipe.cold_start_sft, {"model": base_model, "data": cold_data}, "cold_start_sft"
    )
    refs["reasoning_grpo"] = stage_task(
        store,
        grpo.STAGE,
        recipe.reasoning_grpo,
        {"model": refs["cold_start_sft"], "data": task_data},
        "reasoning_grpo",
    )
    samples = stage_task(
        store,
        sample.STAGE,
        recipe.rejection.samples,
        {"model": refs["reasoning_grpo"], "data": task_data},
        "rejection_samples",
    )
    sft_set = stage_task(
        store, curate.STAGE, recipe.rejection.data, {"samples": samples, "data": task_data}, "rejection_data"
    )
    refs["rejection_sft"] = stage_task(
        store, sft.STAGE, recipe.rejection_sft, {"model": base_model, "data": sft_set}, "rejection_sft"
    )
    pairs = stage_task(
        store, reward_model.PREFERENCES, recipe.preferences, {"data": task_data}, "preferences"
    )
    refs["reward_model"] = stage_task(
        store,
        reward_model.STAGE,
        recipe.reward_model,
        {"model": refs["rejection_sft"], "pairs": pairs},
        "reward_model",
    )
    refs["final_grpo"] = stage_task(
        store,
        grpo.STAGE,
        recipe.final_grpo,
        {"model": refs["rejection_sft"], "data": task_data, "reward_model": refs["reward_model"]},
        "final_grpo",
    )
    return refs


@flow(name="r1-full", log_prints=False)
def r1_full(recipe: R1FullRecipe) -> str:
    """Run the whole R1 recipe; return the path of report.json."""
    apply_runtime(recipe.runtime)
    store = store_for(recipe.store)
    refs = r1_pipeline(store, recipe)
    evals = evaluate_models(store, recipe, refs["data"], {name: refs[name] for name in ORDER})
    curves = ["r1_zero", "reasoning_grpo", "final_grpo"]
    cfg = report.ReportConfig(
        title=f"{recipe.name}: the R1 pipeline on {recipe.data.kind}", order=list(ORDER), curves=curves
    )
    inputs = {**evals, **{f"train/{c}": refs[c] for c in curves}, "extra/reward_model": refs["reward_model"]}
    out = stage_task(store, report.STAGE, cfg, inputs, "report")
    return publish_report(store, recipe.name, out)
