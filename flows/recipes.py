"""Recipe schemas: one typed root per flow, composed of the stages' own config sections.

A recipe's sections are named after the stages they configure (``r1_zero`` is a GRPO section),
so a dotted override names exactly one thing: ``r1_zero.learning_rate=1e-4``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from data.worlds import DataConfig, MicroWorldData
from flows.common import Runtime
from r1.config import Section, deep_merge, load_recipe, task_split_uses
from r1.modes import MODES, Mode
from r1.rewards import RewardSpec
from stages.base import BaseConfig, MicroBase
from stages.benchmark import BenchmarkConfig
from stages.curate import CurateConfig
from stages.data import splits_of
from stages.evaluate import EvalConfig
from stages.fusion import FusionDataConfig
from stages.grpo import GRPOStageConfig
from stages.reward_model import PreferenceConfig, RewardModelConfig
from stages.sample import SampleConfig
from stages.selection import SelectionConfig
from stages.sft import SFTStageConfig

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class R1ZeroRecipe(Section):
    """R1-Zero: GRPO straight from the base, rule rewards only (accuracy + format)."""

    flow: Literal["r1-zero"] = "r1-zero"
    name: str = Field("r1-zero", description="names the run's report folder: letters, digits, . _ -")
    store: str | None = Field(None, description="artifact store root (default $R1_STORE or runs/)")
    runtime: Runtime = Field(default_factory=Runtime)
    data: DataConfig = Field(default_factory=MicroWorldData)
    base: BaseConfig = Field(default_factory=MicroBase)
    grpo: GRPOStageConfig = Field(default_factory=GRPOStageConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    benchmarks: dict[str, BenchmarkConfig] = Field(
        default_factory=dict,
        description="standard test sets every model is also evaluated on (gsm8k, math500, custom), by name",
    )

    @field_validator("benchmarks")
    @classmethod
    def _benchmark_names(cls, v: dict[str, BenchmarkConfig]) -> dict[str, BenchmarkConfig]:
        """Benchmark names become stage labels and report rows (``<model>@<name>``)."""
        for name in v:
            if not _NAME.match(name):
                raise ValueError(f"benchmark name {name!r}: letters, digits, '.', '_' or '-' only")
        return v

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        """The name becomes a path (``reports/<name>``): an identifier, never a path of its own."""
        if not _NAME.match(name):
            raise ValueError(
                f"name {name!r} must start with a letter or digit and hold only letters, digits, '.', '_' "
                "or '-' (at most 100): it names the report folder in the store"
            )
        return name

    def sections_run(self) -> list[str]:
        """The sections this recipe's flow runs (all of them, unless a subclass says otherwise)."""
        return list(type(self).model_fields)

    @model_validator(mode="after")
    def _consistent(self) -> R1ZeroRecipe:
        """Checks across sections that would otherwise fail only when a late stage starts."""
        run = self.sections_run()
        for field in ("base", "student_base"):
            base = getattr(self, field, None) if field in run else None
            if base is not None and base.kind == "micro" and self.data.kind != "microworld":
                raise ValueError(
                    f"{field}.kind micro pretrains on the micro-world's corpus, but data.kind is "
                    f"{self.data.kind!r}: use {field}.kind pretrained (a checkpoint) with real problems"
                )
        written = splits_of(self.data)
        for field in run:
            value = getattr(self, field)
            uses = task_split_uses(value, f"{field}.") if isinstance(value, Section) else []
            for dotted, split in uses:
                if split not in written:
                    raise ValueError(
                        f"{dotted} reads split {split!r}, but the data stage writes only {sorted(written)}"
                    )
        return self


class Sampled(Section):
    """Samples from a model, then verified and filtered into an SFT set (sample + curate stages)."""

    samples: SampleConfig = Field(default_factory=SampleConfig)
    data: CurateConfig = Field(default_factory=CurateConfig)


class ColdStart(Sampled):
    """Cold-start data: R1-Zero samples filtered for correctness, format and one language, and/or
    curated examples from the data generator (``data.curated``)."""

    from_r1_zero: bool = True


class Fusion(Section):
    """Qwen3's thinking-mode fusion, after the rejection SFT (off by default).

    ``data`` turns the rejection-sampled set into examples of both modes, ``sft`` trains the
    rejection-SFT model on them (its tokenizer learns the switches), and the final GRPO then starts
    from that model with ``no_think_share`` of its reasoning prompts asking ``/no_think`` and a
    ``thinking_mode`` reward of ``mode_reward_weight`` added to its rewards.
    """

    enabled: bool = False
    data: FusionDataConfig = Field(default_factory=FusionDataConfig)
    sft: SFTStageConfig = Field(default_factory=lambda: SFTStageConfig(thinking_modes=True))
    no_think_share: float = Field(0.15, ge=0, le=1)
    mode_reward_weight: float = Field(0.5, ge=0)
    eval_modes: list[Mode] = Field(default_factory=lambda: list(MODES), min_length=1)

    @model_validator(mode="after")
    def _switches(self) -> Fusion:
        if self.enabled and not self.sft.thinking_modes:
            raise ValueError("fusion.sft.thinking_modes must stay true: the fused model learns the switches")
        return self

    def final_grpo(self, final: GRPOStageConfig) -> GRPOStageConfig:
        """The final GRPO section as the fused pipeline runs it: both modes and the mode reward."""
        rewards = [*final.rewards]
        if self.mode_reward_weight and not any(r.name == "thinking_mode" for r in rewards):
            rewards.append(RewardSpec(name="thinking_mode", weight=self.mode_reward_weight))
        return final.model_copy(update={"no_think_share": self.no_think_share, "rewards": rewards})

    def eval(self, eval: EvalConfig) -> EvalConfig:
        """The evaluation section for fused models: every prompt once more in each mode."""
        return eval.model_copy(update={"modes": list(self.eval_modes)})


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
    fusion: Fusion = Field(default_factory=Fusion)


class R1ToolsRecipe(R1ZeroRecipe):
    """Agent RL: ``grpo`` rolls out with ``grpo.tools`` (masked from the loss); ``eval`` runs twice,
    without the tool and with it (the same tools and call limit as training)."""

    flow: Literal["r1-tools"] = "r1-tools"
    name: str = "r1-tools"

    @model_validator(mode="after")
    def _tools(self) -> R1ToolsRecipe:
        if not self.grpo.tools:
            raise ValueError("r1-tools trains with tools: set grpo.tools (e.g. [calculator])")
        if self.data.kind == "microworld" and not self.data.tools.enabled:
            raise ValueError(
                "r1-tools on the micro-world needs its tool in the corpus: set data.tools.enabled: true "
                "(the base learns the call syntax from it)"
            )
        return self

    def eval_with_tools(self) -> EvalConfig:
        """The evaluation section with the training run's tools offered."""
        generation = self.eval.generation.model_copy(
            update={"tools": list(self.grpo.tools), "max_tool_calls": self.grpo.max_tool_calls}
        )
        return self.eval.model_copy(update={"generation": generation})


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

    def sections_run(self) -> list[str]:
        """The R1 pipeline's sections run only when it builds the teacher."""
        if self.distill.teacher.source == "pipeline":
            return super().sections_run()
        pipeline_only = (
            set(R1FullRecipe.model_fields)
            - set(Section.model_fields)
            - {"flow", "name", "store", "runtime", "data", "eval"}
        )
        return [f for f in type(self).model_fields if f not in pipeline_only]


def _shift_seeds(section: BaseModel, by: int) -> BaseModel:
    """``section`` with every ``seed`` field in it and its sub-sections shifted by ``by``."""
    update: dict = {}
    for name in type(section).model_fields:
        value = getattr(section, name)
        if name == "seed" and isinstance(value, int):
            update[name] = value + by
        elif isinstance(value, BaseModel):
            update[name] = _shift_seeds(value, by)
    return section.model_copy(update=update)


def seeded(recipe: R1ZeroRecipe, seed: int) -> R1ZeroRecipe:
    """The recipe for one seed of a multi-seed run: every seed shifted by ``seed``, but the data's.

    The task data (the micro-world, the held-out split) stays the same, so every seed is
    evaluated on the same problems and the data stage is shared; model initialisation, data
    order, sampling and evaluation draws change. Offsets between stages are kept (a recipe whose
    stages use seeds 0, 1, 2 runs seed 1 with 1, 2, 3), so seed 0 is the recipe as written.
    """
    update = {
        name: _shift_seeds(getattr(recipe, name), seed)
        for name in type(recipe).model_fields
        if name != "data" and isinstance(getattr(recipe, name), BaseModel)
    }
    return recipe.model_copy(update={**update, "name": f"{recipe.name}-seed{seed}"})


def load(
    flow: str,
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    allow_reward_modules: tuple[str, ...] | None = None,
) -> Section:
    """The flow's recipe from ``path`` (default: its file in configs/) with overrides applied.

    A recipe is code: a ``module:function`` reward imports that module. ``allow_reward_modules``
    (a deployment's allow-list; None allows any) limits which modules a recipe may name.
    """
    from flows.registry import flow_spec
    from r1.config import ConfigError

    spec = flow_spec(flow)
    context = {"allow_reward_modules": allow_reward_modules}
    recipe = load_recipe(spec.recipe_class(), path or spec.default_recipe, overrides, context)
    expected = spec.recipe_class().model_fields["flow"].default
    if recipe.flow != expected:
        raise ConfigError(f"recipe {path} is for flow {recipe.flow!r}, not {flow!r}")
    return recipe


class Variant(Section):
    """One GRPO variant of an ablation: overrides of the recipe's ``grpo`` section, and its prompts."""

    grpo: dict[str, Any] = Field(default_factory=dict, description="fields of the grpo section to change")
    prompts: Literal["all", "selected"] = Field(
        "all", description="selected: the prompts the selection stage keeps (Qwen3's curated set)"
    )
    note: str = Field("", description="one line for the report: what this variant changes")


class Ablation(Section):
    """Named GRPO variants trained from the same base on the same prompts, over seeds."""

    seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=2)
    baseline: str = Field("grpo", description="the variant whose final held-out pass@1 the others race")
    variants: dict[str, Variant] = Field(default_factory=dict)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)


class AblateRecipe(R1ZeroRecipe):
    """The ablation: every variant's GRPO from the R1-Zero recipe's base, evaluated the same way."""

    flow: Literal["ablate"] = "ablate"
    name: str = "ablate"
    ablation: Ablation = Field(default_factory=Ablation)

    def variant_grpo(self, name: str) -> GRPOStageConfig:
        """The recipe's GRPO section with the variant's overrides (nested sections merged)."""
        merged = deep_merge(self.grpo.model_dump(), self.ablation.variants[name].grpo)
        return GRPOStageConfig.model_validate(merged)

    @model_validator(mode="after")
    def _variants(self) -> AblateRecipe:
        if not self.ablation.variants:
            raise ValueError("ablation.variants is empty")
        if self.ablation.baseline not in self.ablation.variants:
            raise ValueError(f"ablation.baseline {self.ablation.baseline!r} is not one of the variants")
        for name in self.ablation.variants:
            try:
                self.variant_grpo(name)
            except ValidationError as e:
                problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
                raise ValueError(f"ablation.variants.{name}.grpo: {problems}") from None
        return self
