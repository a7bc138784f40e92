"""Supervised fine-tuning on TRL's SFTTrainer: one implementation for every SFT in the recipe.

Cold-start SFT, the large rejection-sampled SFT and distillation are this stage with different
configs and inputs; the base stage's pretraining calls the same :func:`train_lm` with the loss
on every token. Checkpoints go to the stage's work directory, so a killed run resumes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from r1.config import Section, new_option, unhashed
from r1.launch import LaunchConfig
from r1.models import load_model, load_tokenizer
from r1.runner import Stage, StageContext
from r1.training import (
    LoraSettings,
    ProgressPrinter,
    check_trl_args,
    common_trainer_kwargs,
    device_kwargs,
    peft_config,
    per_device,
    quiet_trainer,
    resume_step,
    save_trained,
    train_with_resume,
    write_log_history,
)

log = logging.getLogger(__name__)


class TrainConfig(Section):
    """Optimiser and schedule of a supervised run (pretraining or SFT)."""

    trl_config: ClassVar[str] = "SFTConfig"  # the TRL class `trl_args` go to

    max_steps: int = Field(-1, description="stop after this many steps; -1 trains for `epochs`")
    epochs: float = Field(2.0, gt=0)
    batch_size: int = Field(32, gt=0)
    grad_accum: int = Field(1, gt=0)
    learning_rate: float = Field(1e-3, gt=0)
    lr_scheduler: str = "cosine"
    warmup_ratio: float = Field(0.05, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    max_length: int = Field(256, gt=0)
    seed: int = 0
    group_by_length: bool = Field(
        True, description="batch similar lengths together: less padding, faster on CPU"
    )
    save_steps: int = Field(100, gt=0, **unhashed())
    logging_steps: int = Field(10, gt=0, **unhashed())
    lora: LoraSettings | None = Field(
        None, description="train LoRA adapters instead of every weight", **new_option()
    )
    trl_args: dict[str, Any] = Field(default_factory=dict, description="passed verbatim to trl.SFTConfig")

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, v: int) -> int:
        if v == 0 or v < -1:
            raise ValueError(f"max_steps must be positive, or -1 to train for `epochs` (got {v})")
        return v

    @field_validator("trl_args")
    @classmethod
    def _trl_args(cls, v: dict[str, Any]) -> dict[str, Any]:
        return check_trl_args(cls.trl_config, v)


class SFTStageConfig(TrainConfig):
    """SFT on a prompt/completion dataset artifact, loss on the completion only."""

    split: str = "train"
    completion_only_loss: bool = True
    launch: LaunchConfig = Field(default_factory=LaunchConfig, **unhashed())


def schedule_kwargs(cfg: TrainConfig, work_dir: Path) -> dict[str, Any]:
    """TrainingArguments every supervised trainer (SFT, reward model) takes from a TrainConfig."""
    return {
        **common_trainer_kwargs(work_dir, cfg.seed, cfg.save_steps, cfg.logging_steps),
        **device_kwargs(),
        "max_steps": cfg.max_steps,
        "num_train_epochs": cfg.epochs,
        "per_device_train_batch_size": per_device(cfg.batch_size, "batch_size"),
        "gradient_accumulation_steps": cfg.grad_accum,
        "learning_rate": cfg.learning_rate,
        "lr_scheduler_type": cfg.lr_scheduler,
        "warmup_steps": cfg.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio
        "weight_decay": cfg.weight_decay,
        "max_length": cfg.max_length,
        # TRL turns gradient checkpointing on by default: 2x slower for models that fit anyway.
        "gradient_checkpointing": False,
    }


def sft_args(cfg: TrainConfig, work_dir: Path, completion_only_loss: bool):
    """The TRL SFTConfig for a supervised run; ``trl_args`` last, so a recipe may override any default."""
    from trl import SFTConfig

    return SFTConfig(
        **{
            **schedule_kwargs(cfg, work_dir),
            "completion_only_loss": completion_only_loss,
            "train_sampling_strategy": "group_by_length" if cfg.group_by_length else "random",
            "dataset_num_proc": None,
            **cfg.trl_args,
        }
    )


def train_lm(
    model,
    tokenizer,
    dataset,
    cfg: TrainConfig,
    work_dir: Path,
    completion_only_loss: bool,
    label: str = "sft",
):
    """Train ``model`` on ``dataset`` (``text``/``input_ids`` or ``prompt``/``completion`` rows) with resume."""
    from trl import SFTTrainer

    args = sft_args(cfg, work_dir, completion_only_loss)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config(cfg.lora),
    )
    quiet_trainer(trainer)
    trainer.add_callback(
        ProgressPrinter(
            label, max(cfg.logging_steps, 100), {"loss": "loss", "mean_token_accuracy": "token_acc"}
        )
    )
    train_with_resume(trainer, work_dir)
    return trainer


def run_sft(ctx: StageContext) -> None:
    """SFT the ``model`` input on the ``data`` input's split; write the checkpoint and the log."""

    cfg: SFTStageConfig = ctx.config
    model_dir = ctx.inputs["model"].path
    dataset = ctx.inputs["data"].dataset()
    if hasattr(dataset, "keys"):
        if cfg.split not in dataset:
            raise KeyError(f"dataset {ctx.inputs['data'].key} has no split {cfg.split!r}: {list(dataset)}")
        dataset = dataset[cfg.split]
    missing = {"prompt", "completion"} - set(dataset.column_names)
    if missing:
        raise ValueError(
            f"SFT needs prompt/completion columns; {ctx.inputs['data'].key} lacks {sorted(missing)}"
        )
    dataset = dataset.select_columns(["prompt", "completion"])
    tokenizer = load_tokenizer(model_dir)
    trainer = train_lm(
        load_model(model_dir), tokenizer, dataset, cfg, ctx.work_dir, cfg.completion_only_loss, ctx.label
    )
    save_trained(trainer, tokenizer, ctx.out_dir)
    history = write_log_history(trainer, ctx.out_dir / "train_log.jsonl")
    losses = [h["loss"] for h in history if "loss" in h]
    ctx.metrics.update(
        {
            "steps": trainer.state.global_step,
            "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None,
            "examples": len(dataset),
        }
    )


STAGE = Stage(name="sft", version="1", fn=run_sft, resume_step=resume_step)
