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

from flows.common import Stages, is_planning, publish_report, start
from flows.r1_full import r1_pipeline
from flows.r1_zero import evaluate_models
from flows.recipes import DistillRecipe
from r1.store import ArtifactRef
from stages import base, curate, data, grpo, report, sample, sft
from stages.base import PretrainedBase

ORDER = ("teacher", "student_base", "student_distilled", "student_rl")


def teacher_model(run: Stages, task_data: ArtifactRef) -> ArtifactRef:
    """The teacher checkpoint as an artifact, from the pipeline, the store or a folder."""
    t = run.recipe.distill.teacher
    if t.source == "pipeline":
        return r1_pipeline(run)["final_grpo"]
    if t.source == "artifact":
        check = run.store.verify(t.artifact)
        if not check.ok:
            raise FileNotFoundError(
                f"teacher artifact {t.artifact!r} in {run.store.location}: {check.reason}"
            )
        return run.store.ref(t.artifact)
    return run(base.STAGE, PretrainedBase(path=t.path), label="teacher", data=task_data)


def distill_set(run: Stages) -> dict[str, ArtifactRef]:
    """Teacher, its traces and the curated distillation set."""
    task_data = run(data.STAGE, "data")
    teacher = teacher_model(run, task_data)
    traces = run(sample.STAGE, "distill.samples", label="teacher_traces", model=teacher, data=task_data)
    curated = run(curate.STAGE, "distill.data", samples=traces, data=task_data)
    return {"data": task_data, "teacher": teacher, "traces": traces, "distill_data": curated}


@flow(name="distill-data", log_prints=False)
def distill_data(recipe: DistillRecipe) -> str:
    """Generate and filter the distillation set; return the path of its data card."""
    run = start(recipe)
    refs = distill_set(run)
    if is_planning():  # `r1 plan`: nothing is built, so nothing to fetch
        return str(Path(run.store.path(refs["distill_data"].key), "README.md"))
    return str(Path(run.store.materialize(refs["distill_data"]).path, "README.md"))


@flow(name="distill", log_prints=False)
def distill(recipe: DistillRecipe) -> str:
    """The whole comparison: distilled student against the RL student; return report.json's path."""
    run = start(recipe)
    refs = distill_set(run)
    task_data = refs["data"]
    student = run(base.STAGE, "student_base", data=task_data)
    distilled = run(
        sft.STAGE, "student_sft", label="student_distilled", model=student, data=refs["distill_data"]
    )
    rl = run(grpo.STAGE, "student_rl", model=student, data=task_data)
    models = {
        "teacher": refs["teacher"],
        "student_base": student,
        "student_distilled": distilled,
        "student_rl": rl,
    }
    evals = evaluate_models(run, task_data, models)
    trained = {"student_distilled": distilled, "student_rl": rl}  # training compute of both, side by side
    cfg = report.ReportConfig(
        title=f"{recipe.name}: distillation vs RL for a small student",
        evaluations=list(ORDER),
        training=list(trained),
        extras=["distill_data"],
    )
    out = run(
        report.STAGE,
        cfg,
        label="report",
        **report.report_inputs(evals, trained, {"distill_data": refs["distill_data"]}),
    )
    return publish_report(run.store, recipe.name, out)
