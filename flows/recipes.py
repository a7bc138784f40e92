"""Recipe schemas: one typed root per flow, composed of the stages' own config sections.

A recipe's sections are named after the stages they configure (``r1_zero`` is a GRPO section),
so a dotted override names exactly one thing: ``r1_zero.learning_rate=1e-4``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from flows.common import Runtime
from r1.config import Section, load_recipe
from stages.base import BaseConfig, MicroBase
from stages.curate import CurateConfig
from stages.data import DataConfig, MicroWorldData
from stages.evaluate import EvalConfig
from stages.grpo import GRPOStageConfig
from stages.reward_model import PreferenceConfig, RewardModelConfig
from stages.sample import SampleConfig
from stages.sft import SFTStageConfig

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


class R1ZeroRecipe(Section):
    """R1-Zero: GRPO straight from the base, rule rewards only (accuracy + format)."""

    flow: Literal["r1-zero"] = "r1-zero"
    name: str = "r1-zero"
    store: str | None = Field(None, description="artifact store root (default $R1_STORE or runs/)")
    runtime: Runtime = Field(default_factory=Runtime)
    data: DataConfig = Field(default_factory=MicroWorldData)
    base: BaseConfig = Field(default_factory=MicroBase)
    grpo: GRPOStageConfig = Field(default_factory=GRPOStageConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)


class Sampled(Section):
    """Samples from a model, then verified and filtered into an SFT set (sample + curate stages)."""

    samples: SampleConfig = Field(default_factory=SampleConfig)
    data: CurateConfig = Field(default_factory=CurateConfig)


class ColdStart(Sampled):
    """Cold-start data: R1-Zero samples filtered for correctness, format and one language, and/or
    curated examples from the data generator (``data.curated``)."""

    from_r1_zero: bool = True


class R1FullRecipe(R1ZeroRecipe):
    """The four-stage R1 pipeline; ``grpo`` is the R1-Zero branch's RL stage it shares with r1-zero."""

    flow: Literal["r1-full"] = "r1-full"
    name: str = "r1-full"
    cold_start: ColdStart = Field(default_factory=ColdStart)
    cold_start_sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    reasoning_grpo: GRPOStageConfig = Field(default_factory=GRPOStageConfig)
    rejection: Sampled = Field(default_factory=Sampled)  # rejection sampling + non-reasoning data
    rejection_sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    preferences: PreferenceConfig = Field(default_factory=PreferenceConfig)
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig)
    final_grpo: GRPOStageConfig = Field(default_factory=GRPOStageConfig)


class Teacher(Section):
    """Where the distillation teacher comes from: this recipe's final R1 model, an artifact, a folder."""

    source: Literal["pipeline", "artifact", "path"] = "pipeline"
    artifact: str | None = Field(None, description="artifact key in the store (source: artifact)")
    path: str | None = Field(None, description="Hugging Face folder or hub id (source: path)")

    @model_validator(mode="after")
    def _check(self) -> Teacher:
        if self.source != "pipeline" and not getattr(self, self.source):
            raise ValueError(f"teacher.source is {self.source!r} but teacher.{self.source} is not set")
        return self


class Distillation(Sampled):
    """Teacher traces -> verified, filtered, decontaminated SFT set."""

    teacher: Teacher = Field(default_factory=Teacher)


class DistillRecipe(R1FullRecipe):
    """Distillation into a smaller student, compared with the same student trained by RL."""

    flow: Literal["distill"] = "distill"
    name: str = "distill"
    distill: Distillation = Field(default_factory=Distillation)
    student_base: BaseConfig = Field(default_factory=MicroBase)
    student_sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    student_rl: GRPOStageConfig = Field(default_factory=GRPOStageConfig)


RECIPES: dict[str, type[Section]] = {
    "r1-zero": R1ZeroRecipe,
    "r1-full": R1FullRecipe,
    "distill-data": DistillRecipe,
    "distill": DistillRecipe,
}
DEFAULT_RECIPE = {
    "r1-zero": CONFIGS / "r1_zero.yaml",
    "r1-full": CONFIGS / "r1_full.yaml",
    "distill-data": CONFIGS / "distill.yaml",
    "distill": CONFIGS / "distill.yaml",
}


def load(flow: str, path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Section:
    """The flow's recipe from ``path`` (default: its file in configs/) with overrides applied."""
    from r1.config import ConfigError

    if flow not in RECIPES:
        raise ConfigError(f"unknown flow {flow!r}; known: {sorted(RECIPES)}")
    recipe = load_recipe(RECIPES[flow], path or DEFAULT_RECIPE[flow], overrides)
    if recipe.flow != flow.removesuffix("-data"):
        raise ConfigError(f"recipe {path} is for flow {recipe.flow!r}, not {flow!r}")
    return recipe
