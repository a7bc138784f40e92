"""Supervised training settings and the SFT trainer: shared by pretraining, SFT and the reward model.

One :class:`TrainConfig` describes the optimiser and schedule of every supervised run, and one
builder makes the TRL ``SFTTrainer`` that pretraining (loss on every token) and SFT (loss on the
completion) both train with. The stages differ only in their data and what they report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from r1.config import Section, new_option, unhashed
from r1.training import (
    LoraSettings,
    check_trl_args,
    common_trainer_kwargs,
    device_kwargs,
    peft_config,
    per_device,
)

SFT_PROGRESS = {"loss": "loss", "mean_token_accuracy": "token_acc"}  # what a supervised run shows


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


def sft_trainer(model, tokenizer, dataset, cfg: TrainConfig, work_dir: Path, completion_only_loss: bool):
    """A TRL ``SFTTrainer`` over ``dataset`` (``text``/``input_ids`` or ``prompt``/``completion`` rows)."""
    from trl import SFTTrainer

    return SFTTrainer(
        model=model,
        args=sft_args(cfg, work_dir, completion_only_loss),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config(cfg.lora),
    )
