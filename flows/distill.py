"""Distillation: teacher traces -> verified, filtered set -> a smaller student by SFT, against RL.

``distill-data`` samples N traces per prompt from the teacher (by default this recipe's final R1
model, built first if missing), verifies and filters them (correct, formatted, one language, not
over-long, not duplicated, prompts not overlapping the evaluation split) and writes the set with
its data card. ``distill`` then trains a smaller student base on it by SFT, trains the same student
base with GRPO on the same prompts, and reports teacher and students side by side.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import apply_runtime, publish_report, stage_task, store_for
from flows.r1_full import r1_pipeline
from flows.r1_zero import evaluate_models
from flows.recipes import DistillRecipe
from r1.store import ArtifactRef, Store
from stages import base, curate, data, grpo, report, sample, sft
from stages.base import PretrainedBase

ORDER = ("teacher", "student_base", "student_distilled", "student_rl")


def teacher_model(store: Store, recipe: DistillRecipe, task_data: ArtifactRef) -> ArtifactRef:
    """The teacher checkpoint as an artifact, from the pipeline, the store or a folder."""
    t = recipe.distill.teacher
    if t.source == "pipeline":
        return r1_pipeline(store, recipe)["final_grpo"]
    if t.source == "artifact":
        check = store.verify(t.artifact)
        if not check.ok:
            raise FileNotFoundError(f"teacher artifact {t.artifact!r} in {store.location}: {check.reason}")
        return store.ref(t.artifact)
    return stage_task(store, base.STAGE, PretrainedBase(path=t.path), {"data": task_data}, "teacher")


def distill_set(store: Store, recipe: DistillRecipe) -> dict[str, ArtifactRef]:
    """Teacher, its traces and the curated distillation set."""
    task_data = stage_task(store, data.STAGE, recipe.data, {}, "data")
    teacher = teacher_model(store, recipe, task_data)
    traces = stage_task(
        store, sample.STAGE, recipe.distill.samples, {"model": teacher, "data": task_data}, "teacher_traces"
    )
    curated = stage_task(
        store, curate.STAGE, recipe.distill.data, {"samples": traces, "data": task_data}, "distill_data"
    )
    return {"data": task_data, "teacher": teacher, "traces": traces, "distill_data": curated}


@flow(name="distill-data", log_prints=False)
def distill_data(recipe: DistillRecipe) -> str:
    """Generate and filter the distillation set; return the path of its data card."""
    apply_runtime(recipe.runtime)
    store = store_for(recipe.store)
    refs = distill_set(store, recipe)
    return str(Path(store.materialize(refs["distill_data"]).path, "README.md"))


@flow(name="distill", log_prints=False)
def distill(recipe: DistillRecipe) -> str:
    """The whole comparison: distilled student against the RL student; return report.json's path."""
    apply_runtime(recipe.runtime)
    store = store_for(recipe.store)
    refs = distill_set(store, recipe)
    task_data = refs["data"]
    student = stage_task(store, base.STAGE, recipe.student_base, {"data": task_data}, "student_base")
    distilled = stage_task(
        store,
        sft.STAGE,
        recipe.student_sft,
        {"model": student, "data": refs["distill_data"]},
        "student_distilled",
    )
    rl = stage_task(store, grpo.STAGE, recipe.student_rl, {"model": student, "data": task_data}, "student_rl")
    models = {
        "teacher": refs["teacher"],
        "student_base": student,
        "student_distilled": distilled,
        "student_rl": rl,
    }
    evals = evaluate_models(store, recipe, task_data, models)
    cfg = report.ReportConfig(
        title=f"{recipe.name}: distillation vs RL for a small student",
        order=list(ORDER),
        curves=["student_distilled", "student_rl"],  # training compute of both, side by side
    )
    inputs = {
        **evals,
        "train/student_distilled": distilled,
        "train/student_rl": rl,
        "extra/distill_data": refs["distill_data"],
    }
    out = stage_task(store, report.STAGE, cfg, inputs, "report")
    return publish_report(store, recipe.name, out)
