"""Supervised fine-tuning on TRL's SFTTrainer: one implementation for every SFT in the recipe.

Cold-start SFT, the large rejection-sampled SFT and distillation are this stage with different
configs and inputs (the base stage's pretraining uses the same trainer, :mod:`r1.supervised`, with
the loss on every token). Checkpoints go to the stage's work directory, so a killed run resumes.
"""

from __future__ import annotations

from pydantic import Field

from r1.config import new_option, unhashed
from r1.launch import LaunchConfig
from r1.models import load_model, load_tokenizer, speak_both_modes
from r1.stage import Stage, StageContext
from r1.supervised import SFT_PROGRESS, TrainConfig, sft_trainer
from r1.training import resume_step, run_trainer


class SFTStageConfig(TrainConfig):
    """SFT on a prompt/completion dataset artifact, loss on the completion only."""

    split: str = "train"
    completion_only_loss: bool = True
    thinking_modes: bool = Field(
        False,
        description="teach both modes: the tokenizer learns /think and /no_think and the fusion template",
        **new_option(),
    )
    launch: LaunchConfig = Field(default_factory=LaunchConfig, **unhashed())


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
    tokenizer, model = load_tokenizer(model_dir), load_model(model_dir)
    if cfg.thinking_modes and speak_both_modes(model, tokenizer):
        print(f"[{ctx.label}] the tokenizer learns /think and /no_think (fusion template)", flush=True)
    trainer = sft_trainer(model, tokenizer, dataset, cfg, ctx.work_dir, cfg.completion_only_loss)
    history = run_trainer(ctx, trainer, tokenizer, SFT_PROGRESS, max(cfg.logging_steps, 100))
    losses = [h["loss"] for h in history if "loss" in h]
    ctx.metrics.update(
        {
            "steps": trainer.state.global_step,
            "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None,
            "examples": len(dataset),
        }
    )


STAGE = Stage(
    name="sft",
    version="1",
    fn=run_sft,
    config=SFTStageConfig,
    inputs=("model", "data"),
    resume_step=resume_step,
)
