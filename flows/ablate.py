"""The ablation: named GRPO variants from one cached base on the same prompts, over seeds.

data -> base (shared with r1-zero) -> [selected prompts, when a variant asks for them]
-> per variant and seed: GRPO (held-out pass@1 measured during training) -> evaluate
-> one report comparing the variants (stages/ablation.py).
"""

from __future__ import annotations

from prefect import flow

from flows.common import publish_report, start
from flows.recipes import AblateRecipe
from stages import ablation, base, data, evaluate, grpo, selection


@flow(name="ablate", log_prints=False)
def ablate(recipe: AblateRecipe) -> str:
    """Train and evaluate every variant over every seed; return the path of report.json."""
    run = start(recipe)
    task_data = run(data.STAGE, "data")
    base_model = run(base.STAGE, "base", data=task_data)
    variants = recipe.ablation.variants
    selected = None
    if any(v.prompts == "selected" for v in variants.values()):
        selected = run(
            selection.STAGE, "ablation.selection", label="selected_prompts", model=base_model, data=task_data
        )
    runs = {}
    for name, variant in variants.items():
        cfg = recipe.variant_grpo(name)
        prompts = selected if variant.prompts == "selected" else task_data
        for seed in recipe.ablation.seeds:
            trained = run(
                grpo.STAGE,
                cfg.model_copy(update={"seed": cfg.seed + seed}),
                label=f"{name}/seed{seed}",
                model=base_model,
                data=prompts,
            )
            eval_cfg = recipe.eval.model_copy(update={"seed": recipe.eval.seed + seed})
            evaluated = run(
                evaluate.STAGE, eval_cfg, label=f"eval:{name}/seed{seed}", model=trained, data=task_data
            )
            runs[(name, seed)] = (trained, evaluated)
    cfg = ablation.AblationReportConfig(
        title=f"{recipe.name}: GRPO variants on {recipe.data.kind}",
        baseline=recipe.ablation.baseline,
        variants=list(variants),
        seeds=recipe.ablation.seeds,
        notes={name: v.note for name, v in variants.items() if v.note},
    )
    out = run(ablation.STAGE, cfg, label="report", **ablation.ablation_inputs(runs))
    return publish_report(run.store, recipe.name, out)
