"""The four-stage DeepSeek-R1 pipeline, with the R1-Zero branch it starts from.

base -> R1-Zero (GRPO, rule rewards)                                  [shared with r1-zero]
cold-start data (R1-Zero samples filtered + curated) -> cold-start SFT from the base
-> reasoning GRPO (accuracy + format + language consistency)
-> rejection sampling (+ non-reasoning data) -> large SFT, again from the BASE
-> final GRPO from that model: rule rewards on reasoning prompts, a preference reward model on
   general prompts that enter only for the last fraction of steps.
With ``fusion.enabled`` (Qwen3's thinking-mode fusion) a fusion SFT on both modes' examples sits
between the large SFT and the final GRPO, which then trains both modes.
Every model is evaluated; the report puts them side by side.
"""

from __future__ import annotations

from prefect import flow

from flows.common import Stages, publish_report, start
from flows.r1_zero import evaluate_benchmarks, evaluate_models, zero_branch
from flows.recipes import R1FullRecipe
from r1.store import ArtifactRef
from stages import curate, fusion, grpo, report, reward_model, sample, sft
from stages.evaluate import EvalConfig

ORDER = ("base", "r1_zero", "cold_start_sft", "reasoning_grpo", "rejection_sft", "final_grpo")


def r1_pipeline(run: Stages) -> dict[str, ArtifactRef]:
    """Every stage of the recipe up to the final model; returns the artifacts by stage name."""
    refs = zero_branch(run)
    task_data, base = refs["data"], refs["base"]

    r1_zero_samples = {}
    if run.recipe.cold_start.from_r1_zero:
        r1_zero_samples["samples"] = run(
            sample.STAGE, "cold_start.samples", model=refs["r1_zero"], data=task_data
        )
    cold_data = run(curate.STAGE, "cold_start.data", data=task_data, **r1_zero_samples)
    refs["cold_start_sft"] = run(sft.STAGE, "cold_start_sft", model=base, data=cold_data)
    refs["reasoning_grpo"] = run(grpo.STAGE, "reasoning_grpo", model=refs["cold_start_sft"], data=task_data)
    samples = run(sample.STAGE, "rejection.samples", model=refs["reasoning_grpo"], data=task_data)
    sft_set = run(curate.STAGE, "rejection.data", samples=samples, data=task_data)
    refs["rejection_sft"] = run(sft.STAGE, "rejection_sft", model=base, data=sft_set)  # from the BASE, as R1
    pairs = run(reward_model.PREFERENCES, "preferences", data=task_data)
    refs["reward_model"] = run(reward_model.STAGE, "reward_model", model=refs["rejection_sft"], pairs=pairs)
    final_from, final_cfg = refs["rejection_sft"], run.recipe.final_grpo
    if run.recipe.fusion.enabled:  # Qwen3: one model, both modes, trained on the same curated set
        fused = run(fusion.STAGE, "fusion.data", label="fusion_data", sft=sft_set)
        refs["fusion_sft"] = run(
            sft.STAGE, "fusion.sft", label="fusion_sft", model=refs["rejection_sft"], data=fused
        )
        final_from, final_cfg = refs["fusion_sft"], run.recipe.fusion.final_grpo(final_cfg)
    refs["final_grpo"] = run(
        grpo.STAGE,
        final_cfg,
        label="final_grpo",
        model=final_from,
        data=task_data,
        reward_model=refs["reward_model"],
    )
    return refs


def models_in_order(recipe: R1FullRecipe) -> list[str]:
    """The models the pipeline trains, in order (the fusion SFT only when fusion is on)."""
    fused = ("fusion_sft",) if recipe.fusion.enabled else ()
    return [*ORDER[:-1], *fused, ORDER[-1]]


def fused_models(recipe: R1FullRecipe) -> dict[str, EvalConfig]:
    """Models that follow the thinking switches, with the evaluation that tries both modes."""
    if not recipe.fusion.enabled:
        return {}
    return {name: recipe.fusion.eval(recipe.eval) for name in ("fusion_sft", "final_grpo")}


@flow(name="r1-full", log_prints=False)
def r1_full(recipe: R1FullRecipe) -> str:
    """Run the whole R1 recipe; return the path of report.json."""
    run = start(recipe)
    refs = r1_pipeline(run)
    order = models_in_order(recipe)
    evals = evaluate_models(run, refs["data"], {name: refs[name] for name in order}, fused_models(recipe))
    evals |= evaluate_benchmarks(run, recipe, {name: refs[name] for name in ("base", "final_grpo")})
    trained = ["r1_zero", "reasoning_grpo", "final_grpo"]
    fused = " with thinking-mode fusion" if recipe.fusion.enabled else ""
    cfg = report.ReportConfig(
        title=f"{recipe.name}: the R1 pipeline on {recipe.data.kind}{fused}",
        evaluations=list(evals),
        training=trained,
        extras=["reward_model"],
    )
    inputs = report.report_inputs(
        evals, {t: refs[t] for t in trained}, {"reward_model": refs["reward_model"]}
    )
    out = run(report.STAGE, cfg, label="report", **inputs)
    return publish_report(run.store, recipe.name, out)
