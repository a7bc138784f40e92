"""GRPO stage on TRL's GRPOTrainer: one implementation for R1-Zero, reasoning RL and final RL.

The variant knobs (``loss_type``, ``beta``, ``scale_rewards``, ``epsilon``/``epsilon_high``,
``importance_sampling_level``, ``num_generations``, temperature, ...) pass straight through from
the recipe, because TRL's defaults are not R1's: a recipe that means R1's GRPO says so
explicitly. Rewards come from the registry (``r1.rewards``) with weights side by side.
Checkpoints are the Trainer's own ``checkpoint-N`` folders in the work directory.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from r1 import tracking
from r1.config import Section, new_option, unhashed
from r1.launch import LaunchConfig
from r1.models import load_model, load_tokenizer
from r1.modes import with_mode
from r1.rewards import RewardSpec, build_rewards
from r1.stage import Stage, StageContext
from r1.tools import tools_named
from r1.training import (
    LogExtras,
    LoraSettings,
    check_trl_args,
    common_trainer_kwargs,
    device_kwargs,
    peft_config,
    per_device,
    resume_step,
    run_trainer,
)


class DynamicSampling(Section):
    """DAPO's dynamic sampling: drop groups whose rewards all agree, refill with fresh prompts."""

    enabled: bool = False
    max_rounds: int = Field(3, ge=1, description="extra rollouts allowed per step to refill the batch")


class Curriculum(Section):
    """Kimi k1.5's difficulty curriculum: prompts drawn by their measured pass rate."""

    enabled: bool = False
    reward: str = Field("accuracy", description="the reward whose scores measure a prompt's pass rate")
    start_target: float = Field(0.75, ge=0, le=1, description="pass rate preferred first (easy)")
    end_target: float = Field(0.25, ge=0, le=1, description="pass rate preferred last (hard but solvable)")
    width: float = Field(0.2, gt=0, description="how sharply sampling prefers the target")
    floor: float = Field(0.05, gt=0, description="weight of prompts far from it (they are re-measured)")


class HeldoutEval(Section):
    """Held-out pass@1 measured while training (R1's Figure 2): every ``every`` steps, ``limit`` problems."""

    every: int = Field(0, ge=0, description="steps between measurements; 0 measures nothing")
    split: str = "test"
    limit: int = Field(100, gt=0)
    k: int = Field(2, gt=0, description="samples per problem")
    temperature: float = Field(1.0, gt=0)


class GRPOStageConfig(Section):
    split: str = "train"
    max_steps: int = Field(300, gt=0)
    learning_rate: float = Field(5e-5, gt=0)
    lr_scheduler: str = "constant"
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    prompts_per_step: int = Field(8, gt=0)
    num_generations: int = Field(8, gt=1, description="G: completions per prompt (a group)")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_completion_length: int = Field(64, gt=0)
    beta: float = Field(0.0, ge=0, description="KL coefficient; 0 loads no reference model")
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"] = "dr_grpo"
    scale_rewards: Literal["group", "batch", "none"] = "none"
    epsilon: float = Field(0.2, gt=0)
    epsilon_high: float | None = Field(None, gt=0, description="DAPO clip-higher (e.g. 0.28)")
    importance_sampling_level: Literal["token", "sequence"] = Field("token", description="sequence = GSPO")
    num_iterations: int = Field(1, gt=0, description="policy updates per generation batch (mu)")
    mask_truncated_completions: bool = False
    sync_ref_model: bool = False
    ref_model_sync_steps: int = Field(400, gt=0)
    ref_model_mixup_alpha: float = Field(1.0, ge=0, le=1)
    rewards: list[RewardSpec] = Field(
        default_factory=lambda: [
            RewardSpec(name="accuracy", weight=1.0),
            RewardSpec(name="format", weight=1.0),
        ]
    )
    general_split: str | None = Field(
        None, description="data split of general prompts, mixed in for the last steps (R1's final RL stage)"
    )
    general_from: float = Field(
        0.75, ge=0, lt=1, description="fraction of steps before general prompts enter"
    )
    general_share: float = Field(
        0.5, gt=0, le=1, description="share of each later step's prompts that are general"
    )
    tools: list[str] = Field(
        default_factory=list,
        description="agent RL: tools the policy may call in its rollouts (r1.tools); results are masked from the loss",
        **new_option(),
    )
    max_tool_calls: int = Field(3, gt=0, description="tool rounds per rollout", **new_option())
    no_think_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="fused models: this share of reasoning prompts asks /no_think, the rest /think",
        **new_option(),
    )
    seed: int = 0
    save_steps: int = Field(50, gt=0, **unhashed())
    logging_steps: int = Field(1, gt=0, **unhashed())
    print_every: int = Field(20, gt=0, **unhashed())
    rollouts: Literal["transformers", "vllm_colocate", "vllm_server"] = Field(
        "transformers",
        description="who generates the groups: the trainer's model, or TRL's vLLM (GPU)",
        **new_option(),
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="colocate: vLLM's GPU share", **new_option()
    )
    vllm_tensor_parallel_size: int = Field(1, gt=0, **new_option())
    vllm_server_base_url: str | None = Field(
        None, description="server mode: URL of `trl vllm-serve`", **new_option()
    )
    lora: LoraSettings | None = Field(
        None, description="train LoRA adapters instead of every weight", **new_option()
    )
    trl_args: dict[str, Any] = Field(default_factory=dict, description="passed verbatim to trl.GRPOConfig")
    dynamic_sampling: DynamicSampling = Field(default_factory=DynamicSampling, **new_option())
    curriculum: Curriculum = Field(default_factory=Curriculum, **new_option())
    heldout_eval: HeldoutEval = Field(default_factory=HeldoutEval, **new_option())
    engine: Literal["fast", "trl"] = Field(
        "fast",
        description="fast: TRL's trainer with the CPU rollout engine and length-chunked log-probs "
        "(r1/grpo_trainer.py); trl: trl.GRPOTrainer as it is",
    )
    launch: LaunchConfig = Field(default_factory=LaunchConfig, **unhashed())

    @model_validator(mode="after")
    def _check(self) -> GRPOStageConfig:
        if not self.rewards:
            raise ValueError("grpo needs at least one reward")
        return self

    @field_validator("trl_args")
    @classmethod
    def _trl_args(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_trl_args("GRPOConfig", v)

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, names: list[str]) -> list[str]:
        tools_named(names)
        return names

    def task_splits(self) -> dict[str, str]:
        splits = {
            "split": self.split,
            **({"general_split": self.general_split} if self.general_split else {}),
        }
        return {
            **splits,
            **({"heldout_eval.split": self.heldout_eval.split} if self.heldout_eval.every else {}),
        }

    @model_validator(mode="after")
    def _variants(self) -> GRPOStageConfig:
        if self.curriculum.enabled and self.general_split:
            raise ValueError(
                "curriculum draws training prompts itself: it cannot follow general_split's schedule"
            )
        if self.curriculum.enabled and self.curriculum.reward not in [
            s.name.rsplit(":", 1)[-1] for s in self.rewards
        ]:
            raise ValueError(
                f"curriculum.reward {self.curriculum.reward!r} is not one of the stage's rewards"
            )
        if self.dynamic_sampling.enabled and self.prompts_per_step % self.launch.num_processes:
            raise ValueError(
                "dynamic sampling needs whole groups per process: prompts_per_step % num_processes"
            )
        return self


PHASED_COLUMNS = ("prompt", "answer", "language", "kind")


def phased_prompts(reasoning, general, cfg: GRPOStageConfig):
    """The exact prompt order of a run whose general prompts enter late (R1 stage 4).

    Steps before ``general_from * max_steps`` see reasoning prompts only; later steps mix in
    ``general_share`` general prompts, which carry no reference answer (the reward model judges
    them). TRL then reads this dataset in order (``shuffle_dataset=False``), one step's prompts
    after the other, so a resumed run continues the same schedule.
    """
    import random

    from datasets import Dataset

    rng = random.Random(cfg.seed)
    pools = {name: list(range(len(ds))) for name, ds in (("reasoning", reasoning), ("general", general))}
    for order in pools.values():
        rng.shuffle(order)
    cursor = {"reasoning": 0, "general": 0}

    def take(name: str) -> dict:
        ds, order = (reasoning, pools["reasoning"]) if name == "reasoning" else (general, pools["general"])
        row = ds[order[cursor[name] % len(order)]]
        cursor[name] += 1
        return {
            "prompt": row["prompt"],
            "answer": row["answer"] if name == "reasoning" else None,
            "language": row["language"],
            "kind": name,
        }

    start = int(cfg.general_from * cfg.max_steps)
    n_general = max(1, round(cfg.general_share * cfg.prompts_per_step))
    rows = []
    for step in range(cfg.max_steps):
        k = n_general if step >= start else 0
        rows += [take("general") for _ in range(k)] + [
            take("reasoning") for _ in range(cfg.prompts_per_step - k)
        ]
    return Dataset.from_list(rows)


def assign_modes(dataset, cfg: GRPOStageConfig):
    """Both thinking modes in one run (Qwen3's fusion RL): each reasoning prompt gets a switch.

    A seeded draw per row gives ``no_think_share`` of them ``/no_think`` and the others
    ``/think``; general prompts (no reference answer) keep theirs. The mode is part of the
    dataset, so a resumed run sees the same prompts.
    """
    import random

    rng = random.Random(f"{cfg.seed}-modes")
    draws = [rng.random() for _ in range(len(dataset))]

    def switch(row: dict, i: int) -> dict:
        if row.get("answer") is None:
            return {"prompt": row["prompt"]}
        return {"prompt": with_mode(row["prompt"], "no_think" if draws[i] < cfg.no_think_share else "think")}

    return dataset.map(switch, with_indices=True)


def grpo_args(cfg: GRPOStageConfig, work_dir):
    """The TRL GRPOConfig for this stage (one optimizer step per generation batch)."""
    from trl import GRPOConfig

    kwargs: dict[str, Any] = dict(
        **common_trainer_kwargs(work_dir, cfg.seed, cfg.save_steps, cfg.logging_steps),
        **device_kwargs(),
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        per_device_train_batch_size=per_device(
            cfg.prompts_per_step * cfg.num_generations, "prompts_per_step * num_generations"
        ),
        num_generations=cfg.num_generations,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_completion_length=cfg.max_completion_length,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high if cfg.epsilon_high is not None else cfg.epsilon,
        importance_sampling_level=cfg.importance_sampling_level,
        num_iterations=cfg.num_iterations,
        mask_truncated_completions=cfg.mask_truncated_completions,
        sync_ref_model=cfg.sync_ref_model,
        ref_model_sync_steps=cfg.ref_model_sync_steps,
        ref_model_mixup_alpha=cfg.ref_model_mixup_alpha,
        reward_weights=[spec.weight for spec in cfg.rewards],
        shuffle_dataset=cfg.general_split is None,
        gradient_checkpointing=False,
        **({"max_tool_calling_iterations": cfg.max_tool_calls} if cfg.tools else {}),
        **rollout_kwargs(cfg),
        # TRL's table of sampled completions, for the trackers that show tables
        log_completions=any(b in tracking.TABLE_BACKENDS for b in tracking.report_to()),
    )
    # trl_args last and merged, so a recipe may override any default set here.
    return GRPOConfig(**{**kwargs, **cfg.trl_args})


def rollout_kwargs(cfg: GRPOStageConfig) -> dict[str, Any]:
    """GRPOConfig fields for TRL's vLLM rollouts (colocate: same GPUs; server: `trl vllm-serve`)."""
    if cfg.rollouts == "transformers":
        return {}
    kwargs: dict[str, Any] = {
        "use_vllm": True,
        "vllm_mode": cfg.rollouts.removeprefix("vllm_"),
        "vllm_gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
        "vllm_tensor_parallel_size": cfg.vllm_tensor_parallel_size,
    }
    if cfg.vllm_server_base_url:
        kwargs["vllm_server_base_url"] = cfg.vllm_server_base_url
    return kwargs


def make_trainer(model, tokenizer, dataset, cfg: GRPOStageConfig, work_dir, reward_context=None):
    """A GRPOTrainer over ``dataset`` with the recipe's rewards and knobs (``engine`` picks the speed-ups)."""
    from r1.grpo_trainer import GRPOTrainer

    if cfg.curriculum.enabled and "prompt_index" not in dataset.column_names:
        dataset = dataset.add_column("prompt_index", list(range(len(dataset))))
    funcs, _ = build_rewards(cfg.rewards, reward_context)
    args = grpo_args(cfg, work_dir)
    if cfg.tools and getattr(tokenizer, "response_template", None) is None:
        raise ValueError(
            "grpo.tools needs a tokenizer that parses tool calls (a response_template): the micro-world's "
            "base has one when data.tools.enabled; for a real checkpoint set one (TRL's add_response_schema)"
        )
    return GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        tools=tools_named(cfg.tools) or None,
        peft_config=peft_config(cfg.lora),
        fast=cfg.engine == "fast",
        dynamic_rounds=cfg.dynamic_sampling.max_rounds if cfg.dynamic_sampling.enabled else None,
        curriculum=cfg.curriculum if cfg.curriculum.enabled else None,
    )


def run_grpo(ctx: StageContext) -> None:
    cfg: GRPOStageConfig = ctx.config
    model_dir = ctx.inputs["model"].path
    data = ctx.inputs["data"].dataset()
    dataset = data[cfg.split]
    if cfg.general_split:
        dataset = phased_prompts(dataset, data[cfg.general_split], cfg)
    if cfg.no_think_share:
        dataset = assign_modes(dataset, cfg)
    context = {"reward_model_path": ctx.inputs["reward_model"].path} if "reward_model" in ctx.inputs else None
    tokenizer = load_tokenizer(model_dir)
    trainer = make_trainer(load_model(model_dir), tokenizer, dataset, cfg, ctx.work_dir, context)
    counted = [
        f for f, spec in zip(trainer.reward_funcs, cfg.rewards, strict=True) if spec.on_nonfinite == "zero"
    ]
    extras = [LogExtras(_generation_counts(trainer, counted))]
    if cfg.heldout_eval.every:
        from r1.grpo_trainer import heldout_callback

        h = cfg.heldout_eval
        rows = [dict(r) for r in data[h.split].select(range(min(h.limit, len(data[h.split]))))]
        extras.append(heldout_callback(trainer, rows, h.every, h.k, h.temperature))
    history = run_trainer(ctx, trainer, tokenizer, _progress_keys(cfg), cfg.print_every, extras)
    steps = [h for h in history if "reward" in h]
    ctx.metrics.update(
        {
            "steps": trainer.state.global_step,
            "first_reward": steps[0]["reward"] if steps else None,
            "final_reward": sum(h["reward"] for h in steps[-10:]) / len(steps[-10:]) if steps else None,
        }
    )
    timed = [h for h in history if h.get("timing/step_seconds")]
    if timed:  # the share of step time spent generating (agent RL: 70-80 % in the notes)
        total = sum(h["timing/step_seconds"] for h in timed)
        ctx.metrics["rollout_share"] = (
            sum(h["timing/rollout_seconds"] for h in timed) / total if total else None
        )
    if cfg.tools:
        calls = [h["tools/call_frequency"] for h in history if "tools/call_frequency" in h]
        ctx.metrics["tool_calls_per_rollout"] = sum(calls) / len(calls) if calls else None
    if counted:  # summed over the whole log, so a resumed run counts its earlier attempts too
        ctx.metrics["nonfinite_rewards"] = {
            f.__name__: sum(h.get(f"rewards/{f.__name__}/nonfinite", 0) for h in history) for f in counted
        }


def _generation_counts(trainer, funcs):
    """Per log row: tokens generated since the previous row, the seconds spent in rollouts and in
    all (``timing/``), and NaN/inf scores each ``on_nonfinite: zero`` reward replaced by 0."""
    seen = {f.__name__: 0 for f in funcs}
    last = [time.monotonic()]

    def extras() -> dict[str, int]:
        now = time.monotonic()
        out = {
            "generation/tokens": trainer.generated_tokens,
            "timing/rollout_seconds": round(trainer.rollout_seconds, 4),
            "timing/step_seconds": round(now - last[0], 4),
        }
        trainer.generated_tokens, trainer.rollout_seconds, last[0] = 0, 0.0, now
        for f in funcs:
            total = f.stats["nonfinite"]
            out[f"rewards/{f.__name__}/nonfinite"] = total - seen[f.__name__]
            seen[f.__name__] = total
        return out

    return extras


def _progress_keys(cfg: GRPOStageConfig) -> dict[str, str]:
    keys = {"reward": "reward"}
    shorts = [spec.name.rsplit(":", 1)[-1] for spec in cfg.rewards]
    for short in shorts:  # four letters, unless two rewards would share them (tool_format, tool_use)
        clash = sum(s[:4] == short[:4] for s in shorts) > 1
        keys[f"rewards/{short}/mean"] = short if clash else short[:4]
    if cfg.tools:
        keys["tools/call_frequency"] = "calls"
    keys["completions/mean_length"] = "len"
    keys["entropy"] = "entropy"
    return keys


STAGE = Stage(
    name="grpo",
    version="2",
    fn=run_grpo,
    config=GRPOStageConfig,
    inputs=("model", "data"),
    optional_inputs=("reward_model",),
    resume_step=resume_step,
)
