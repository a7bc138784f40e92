"""What every trainer stage shares: device settings, checkpoint discovery, resume, logs.

Trainer stages (pretraining, SFT, GRPO, reward model) all run a Hugging Face / TRL trainer whose
``output_dir`` is the stage's work directory, so the trainer's own ``checkpoint-N`` folders are
the resume state and ``resume_from_checkpoint`` continues from the newest complete one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import Field

from r1.config import Section

log = logging.getLogger(__name__)
_CKPT = re.compile(r"^checkpoint-(\d+)$")
# The Trainer writes trainer_state.json after weights, optimizer and RNG state: a checkpoint
# without it was cut off mid-save.
_COMPLETE_MARKER = "trainer_state.json"


def _complete(ckpt: Path) -> bool:
    has_weights = (
        any(ckpt.glob("*.safetensors")) or any(ckpt.glob("*.bin")) or (ckpt / "pytorch_model.bin").exists()
    )
    return (ckpt / _COMPLETE_MARKER).is_file() and has_weights


def last_checkpoint(work_dir: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` in ``work_dir``; incomplete ones are ignored."""
    if not work_dir.is_dir():
        return None
    found = sorted(
        ((int(m.group(1)), p) for p in work_dir.iterdir() if p.is_dir() and (m := _CKPT.match(p.name))),
        reverse=True,
    )
    for _, path in found:
        if _complete(path):
            return path
        log.warning("ignoring incomplete checkpoint %s (killed while saving)", path)
    return None


def drop_incomplete_checkpoints(work_dir: Path) -> None:
    """Remove checkpoints cut off mid-save, so the Trainer's rotation never counts them."""
    if not work_dir.is_dir():
        return
    for p in work_dir.iterdir():
        if p.is_dir() and _CKPT.match(p.name) and not _complete(p):
            shutil.rmtree(p, ignore_errors=True)


def resume_step(work_dir: Path) -> int | None:
    """The global step a trainer stage would resume from (``Stage.resume_step``)."""
    ckpt = last_checkpoint(work_dir)
    return int(_CKPT.match(ckpt.name).group(1)) if ckpt else None


class LoraSettings(Section):
    """LoRA adapters (PEFT) instead of full fine-tuning; merged into the weights on save."""

    r: int = Field(16, gt=0)
    alpha: int = Field(32, gt=0)
    dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: str | list[str] = Field("all-linear", description="module names, or all-linear")


def peft_config(lora: LoraSettings | None):
    """The ``peft.LoraConfig`` a TRL trainer takes as ``peft_config`` (None: full fine-tuning)."""
    if lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


# Trainer arguments about watching a run, not what it trains: the runtime section sets them.
RUNTIME_ONLY = ("report_to", "logging_dir", "run_name", "project", "log_completions")


def check_trl_args(config_class: str, args: dict[str, Any]) -> dict[str, Any]:
    """Raise ``ValueError`` for a key that TRL's ``config_class`` does not have (with did-you-mean).

    Recipe sections call this at load time: an unknown key would otherwise fail only when the
    stage builds its trainer, after every earlier stage ran. TRL is imported only when needed.
    """
    if not args:
        return args
    import dataclasses
    import difflib

    import trl

    fields = [f.name for f in dataclasses.fields(getattr(trl, config_class))]
    for key in args:
        if key in RUNTIME_ONLY:
            raise ValueError(
                f"{key!r} is a runtime setting, not part of a stage (it would change the artifact key "
                f"and retrain): set runtime.report_to: [tensorboard | wandb | mlflow | trackio] instead"
            )
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"trl.{config_class} has no field {key!r}{hint}")
    return args


def world_size() -> int:
    """Processes training together (``accelerate launch`` sets WORLD_SIZE; 1 in-process)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Only the main rank writes files into an artifact."""
    return int(os.environ.get("RANK", "0")) == 0


def per_device(batch: int, what: str) -> int:
    """The recipe's batch split over the ranks, so N processes train with the same effective batch."""
    n = world_size()
    if batch % n:
        raise ValueError(f"{what} {batch} is not divisible by the {n} training processes")
    return batch // n


def save_trained(trainer, tokenizer, out_dir: Path) -> None:
    """Save the trained model as a Hugging Face folder, from any launch mode.

    ``Trainer.save_model`` gathers ZeRO-3 shards and unwraps DDP; every rank must call it, only
    the main rank writes. The pickled ``training_args.bin`` it adds is not part of an artifact.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    # Trainers turn the KV cache off while training; a saved model is for generating with.
    model.config.use_cache = True
    if hasattr(model, "merge_and_unload"):  # LoRA: the artifact is a plain checkpoint, adapters merged
        if is_main_process():
            model.merge_and_unload().save_pretrained(str(out_dir), safe_serialization=True)
    else:
        trainer.save_model(str(out_dir))
    if is_main_process():
        tokenizer.save_pretrained(str(out_dir))
        (out_dir / "training_args.bin").unlink(missing_ok=True)


def device_kwargs() -> dict[str, Any]:
    """TrainingArguments for this machine: bf16 on a GPU; on CPU TRL needs ``use_cpu=True, bf16=False``."""
    import torch

    if torch.cuda.is_available():
        return {"bf16": True}
    return {"use_cpu": True, "bf16": False, "fp16": False}


def common_trainer_kwargs(work_dir: Path, seed: int, save_steps: int, logging_steps: int) -> dict[str, Any]:
    """Arguments every stage's trainer shares: checkpoints in the work dir, no hub, the runtime's trackers.

    Trackers (:mod:`r1.tracking`) are off unless the recipe's ``runtime.report_to`` turned them
    on; they are never part of the key.
    """
    from r1 import tracking

    return {
        "output_dir": str(work_dir),
        "seed": seed,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": 2,
        "logging_steps": logging_steps,
        **tracking.trainer_kwargs(work_dir),
        "disable_tqdm": True,
        "push_to_hub": False,
        "dataloader_num_workers": 0,
        # Every parameter gets a gradient in these stages; the Trainer's default (True without
        # gradient checkpointing) costs DDP an extra graph traversal per step.
        "ddp_find_unused_parameters": False,
    }


def train_with_resume(trainer, work_dir: Path) -> None:
    """``trainer.train()``, continuing from the newest complete checkpoint in ``work_dir`` if any."""
    drop_incomplete_checkpoints(work_dir)
    ckpt = last_checkpoint(work_dir)
    trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)


def write_log_history(trainer, path: Path) -> list[dict[str, Any]]:
    """The trainer's per-step log (restored across resumes from trainer_state.json) as JSON lines (main rank)."""
    history = [dict(h) for h in trainer.state.log_history]
    if is_main_process():
        with open(path, "w", encoding="utf-8") as f:
            for row in history:
                f.write(json.dumps(row, sort_keys=True) + "\n")
    return history


def read_log_history(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class ProgressPrinter:
    """A compact progress line every ``every`` steps instead of the Trainer's raw log dicts.

    Each line carries elapsed time and an ETA (:class:`r1.progress.Meter`; a resumed run's rate
    counts only its own steps); ``--quiet`` hides the lines, ``--verbose`` shows every logged step.
    Built lazily as a ``TrainerCallback`` subclass so importing this module stays light.
    """

    def __new__(cls, label: str, every: int, keys: dict[str, str]):
        from transformers import TrainerCallback

        from r1 import progress

        class _Printer(TrainerCallback):
            meter: progress.Meter | None = None

            def on_train_begin(self, args, state, control, **kwargs):
                self.meter = progress.Meter(state.max_steps, done=state.global_step, name=label)

            def on_log(self, args, state, control, logs=None, **kwargs):
                if not state.is_world_process_zero or not logs or progress.level() == "quiet":
                    return
                last = state.global_step == state.max_steps
                if state.global_step % every and not last and progress.level() != "verbose":
                    return
                shown = "  ".join(
                    f"{short} {logs[k]:.3g}"
                    for k, short in keys.items()
                    if isinstance(logs.get(k), int | float)
                )
                if shown:
                    meter = self.meter or progress.Meter(state.max_steps, name=label)
                    print(meter.line(state.global_step, shown), flush=True)

        return _Printer()


class LogExtras:
    """A ``TrainerCallback`` that adds ``extras()`` to each row of the trainer's log history.

    For figures the trainer does not log itself (e.g. non-finite reward scores replaced by 0).
    The row is the one just appended, so the figures land in ``train_log.jsonl`` and survive a
    resume with the rest of the history.
    """

    def __new__(cls, extras):
        from transformers import TrainerCallback

        class _Extras(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if state.log_history:
                    state.log_history[-1].update(extras())

        return _Extras()


def quiet_trainer(trainer) -> None:
    """Drop the Trainer's PrinterCallback (it prints every raw log dict when tqdm is off)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)


def run_trainer(ctx, trainer, tokenizer, progress: dict[str, str], every: int, callbacks=()) -> list[dict]:
    """The part every trainer stage shares: train (resuming), save the model, write its log.

    ``ctx`` is the stage's :class:`r1.stage.StageContext`; ``progress`` maps logged keys to the
    short names the progress line shows every ``every`` steps. The model lands in ``ctx.out_dir``
    as a Hugging Face folder and the per-step log as ``train_log.jsonl``; the log is returned
    for the stage's own metrics.
    """
    from r1.cores import ShareCores

    quiet_trainer(trainer)
    trainer.add_callback(ProgressPrinter(ctx.label, every, progress))
    trainer.add_callback(ShareCores())  # as many threads as the other processes leave cores
    for callback in callbacks:
        trainer.add_callback(callback)
    from r1 import tracking

    try:
        train_with_resume(trainer, ctx.work_dir)
    finally:
        tracking.finish_runs()  # each stage is its own tracker run, also when it fails
    save_trained(trainer, tokenizer, ctx.out_dir)
    return write_log_history(trainer, ctx.out_dir / "train_log.jsonl")
