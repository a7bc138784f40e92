"""Every flow in one table: its name, recipe class, default recipe, function and what it returns.

The CLI (``r1 run``, ``r1 config``, ``r1 recipes``), the deployable ``r1`` entry flow and the
multi-seed runner all read this table, as torchtune's recipe registry is read by its CLI. Recipe
classes and flow functions are imported when asked for, so reading the table imports neither
Prefect nor a stage (``r1 artifacts`` stays fast).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from r1.config import ConfigError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _load(path: str):
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class FlowSpec:
    name: str
    recipe: str  # "module:attribute" of the recipe class
    default_recipe: Path
    function: str  # "module:attribute" of the Prefect flow
    description: str
    returns: str = "report"  # what the printed path is: a report.json, or a data card

    def recipe_class(self):
        return _load(self.recipe)

    def flow(self) -> Callable[..., str]:
        return _load(self.function)

    @property
    def trains(self) -> bool:
        """Whether the flow trains and evaluates models (what ``--seeds`` compares)."""
        return self.returns == "report"


FLOWS: dict[str, FlowSpec] = {
    spec.name: spec
    for spec in (
        FlowSpec(
            "r1-zero",
            "flows.recipes:R1ZeroRecipe",
            CONFIGS / "r1_zero.yaml",
            "flows.r1_zero:r1_zero",
            "R1-Zero: GRPO straight from the base with rule rewards, evaluated before and after",
        ),
        FlowSpec(
            "r1-full",
            "flows.recipes:R1FullRecipe",
            CONFIGS / "r1_full.yaml",
            "flows.r1_full:r1_full",
            "the four R1 stages: cold start, reasoning GRPO, rejection-sampled SFT, all-scenario GRPO",
        ),
        FlowSpec(
            "r1-tools",
            "flows.recipes:R1ToolsRecipe",
            CONFIGS / "r1_tools.yaml",
            "flows.r1_tools:r1_tools",
            "agent RL: GRPO whose rollouts call a calculator, tool results masked from the loss",
        ),
        FlowSpec(
            "ablate",
            "flows.recipes:AblateRecipe",
            CONFIGS / "ablate.yaml",
            "flows.ablate:ablate",
            "GRPO variants (GRPO, Dr. GRPO, DAPO, GSPO, Kimi, Qwen3-style data, curriculum) over seeds",
        ),
        FlowSpec(
            "distill-data",
            "flows.recipes:DistillRecipe",
            CONFIGS / "distill.yaml",
            "flows.distill:distill_data",
            "teacher traces, verified and filtered into a distillation set with its data card",
            returns="data",
        ),
        FlowSpec(
            "distill",
            "flows.recipes:DistillRecipe",
            CONFIGS / "distill.yaml",
            "flows.distill:distill",
            "a small student by SFT on the teacher's traces, against the same student trained by GRPO",
        ),
    )
}


def flow_spec(name: str) -> FlowSpec:
    if name not in FLOWS:
        raise ConfigError(f"unknown flow {name!r}; known: {sorted(FLOWS)}")
    return FLOWS[name]
