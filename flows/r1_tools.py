"""Agent RL: GRPO whose rollouts call a tool, with the tool's output masked from the loss.

data (the micro-world with its calculator: a share of corpus traces call it) -> base (knows the
call syntax; uses the result about half the time) -> evaluate with and without the tool ->
GRPO with tools (TRL's multi-turn rollouts: generate, call, result, generate; rewards for the
answer, well-formed calls and calls whose result the chain uses) -> evaluate with and without
the tool -> report (accuracy both ways, tool-call rate, calls per episode, well-formed share,
the share of step time spent in rollouts).
"""

from __future__ import annotations

from prefect import flow

from flows.common import publish_report, start
from flows.r1_zero import evaluate_models
from flows.recipes import R1ToolsRecipe
from stages import base, data, grpo, report

WITH_TOOL = "+tool"


@flow(name="r1-tools", log_prints=False)
def r1_tools(recipe: R1ToolsRecipe) -> str:
    """Run the agent-RL branch; return the path of report.json."""
    run = start(recipe)
    task_data = run(data.STAGE, "data")
    base_model = run(base.STAGE, "base", data=task_data)
    with_tool = recipe.eval_with_tools()
    evals = evaluate_models(
        run, task_data, {"base": base_model, f"base{WITH_TOOL}": base_model}, {f"base{WITH_TOOL}": with_tool}
    )
    trained = run(grpo.STAGE, "grpo", label="tools_rl", model=base_model, data=task_data)
    evals |= evaluate_models(
        run,
        task_data,
        {"tools_rl": trained, f"tools_rl{WITH_TOOL}": trained},
        {f"tools_rl{WITH_TOOL}": with_tool},
    )
    cfg = report.ReportConfig(
        title=f"{recipe.name}: GRPO with the calculator on {recipe.data.kind}",
        evaluations=list(evals),
        training=["tools_rl"],
    )
    out = run(report.STAGE, cfg, label="report", **report.report_inputs(evals, {"tools_rl": trained}))
    return publish_report(run.store, recipe.name, out)
