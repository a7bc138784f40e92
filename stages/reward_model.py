"""Preference pairs and the helpfulness reward model (R1 stage 4's neural reward).

``preferences`` builds chosen/rejected pairs on general prompts: a correct, concise final summary
against a wrong, evasive or rambling one, in both languages; a held-out split measures the reward
model. ``reward_model`` trains a sequence-classification head with TRL's RewardTrainer (pairwise
Bradley-Terry loss) and reports its held-out pairwise accuracy. R1's reward model scores only the
final summary (the text after ``</think>``), so the pairs hold summaries, not chains of thought.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from data.worlds import world_for
from r1.config import Section, new_option
from r1.external import external
from r1.models import load_tokenizer
from r1.rewards import RewardModelScorer, summary_of
from r1.stage import Stage, StageContext
from r1.supervised import TrainConfig, schedule_kwargs
from r1.training import resume_step, run_trainer


class PreferenceConfig(Section):
    split: str = "general"
    n_test: int = Field(400, gt=0, description="held-out pairs (their prompts never in training pairs)")
    n_train: int | None = Field(None, gt=0, description="training pairs (default: all other prompts)")
    seed: int = 0
    path: str | None = Field(
        None,
        description="given pairs (file or hub id) instead of micro-world ones",
        **external(**new_option()),
    )
    path_split: str = Field("train", **new_option())
    columns: tuple[str, str, str] = Field(
        ("prompt", "chosen", "rejected"), description="prompt, chosen, rejected fields", **new_option()
    )

    def task_splits(self) -> dict[str, str]:
        return {} if self.path else {"split": self.split}


class RewardModelConfig(TrainConfig):
    trl_config: ClassVar[str] = "RewardConfig"

    max_steps: int = 300
    batch_size: int = Field(32, gt=0)
    learning_rate: float = Field(5e-4, gt=0)
    max_length: int = Field(64, gt=0)
    center_rewards_coefficient: float | None = Field(0.01, description="keeps scores near 0 (RewardTrainer)")
    eval_split: str = "test"


def _pair_row(row: dict, world, rng: random.Random) -> dict:
    chosen, rejected, flaw = world.preference(row, rng)
    return {
        "prompt": row["prompt"],
        "chosen": [{"role": "assistant", "content": summary_of(chosen)}],
        "rejected": [{"role": "assistant", "content": summary_of(rejected)}],
        "flaw": flaw,
        "language": row["language"],
        "task": row["task"],
    }


def build_preferences(ctx: StageContext) -> None:
    from datasets import Dataset, DatasetDict

    cfg: PreferenceConfig = ctx.config
    if cfg.path:
        given_pairs(ctx, cfg)
        return
    world = world_for(ctx.inputs["data"])
    general = ctx.inputs["data"].dataset()[cfg.split]
    rng = random.Random(f"{cfg.seed}-preferences")
    order = list(range(len(general)))
    rng.shuffle(order)
    test_idx = order[: cfg.n_test]
    held_out = {general[i]["prompt"][-1]["content"] for i in test_idx}
    train_idx = [i for i in order[cfg.n_test :] if general[i]["prompt"][-1]["content"] not in held_out]
    train_idx = train_idx[: cfg.n_train] if cfg.n_train else train_idx
    if not train_idx:
        raise ValueError(f"no training pairs left after holding out {cfg.n_test} of {len(general)} prompts")
    DatasetDict(
        {
            "train": Dataset.from_list([_pair_row(general[i], world, rng) for i in train_idx]),
            "test": Dataset.from_list([_pair_row(general[i], world, rng) for i in test_idx]),
        }
    ).save_to_disk(str(ctx.out_dir))
    ctx.metrics.update({"n_train": len(train_idx), "n_test": len(test_idx)})


def reward_args(cfg: RewardModelConfig, work_dir: Path):
    """The TRL RewardConfig; ``trl_args`` last, so a recipe may override any default."""
    from trl import RewardConfig

    return RewardConfig(
        **{
            **schedule_kwargs(cfg, work_dir),
            "center_rewards_coefficient": cfg.center_rewards_coefficient,
            **cfg.trl_args,
        }
    )


def given_pairs(ctx: StageContext, cfg: PreferenceConfig) -> None:
    """Preference pairs from a file or the hub (e.g. trl-lib/ultrafeedback_binarized), split by prompt."""
    from datasets import Dataset, DatasetDict

    from data import problems

    limit = cfg.n_test + cfg.n_train if cfg.n_train else None
    raw = problems.read_records(cfg.path, cfg.path_split)
    rows = problems.preference_rows(raw, f"{cfg.path}[{cfg.path_split}]", cfg.columns, limit)
    random.Random(f"{cfg.seed}-preferences").shuffle(rows)
    test = rows[: cfg.n_test]
    held_out = {json.dumps(r["prompt"]) for r in test}
    train = [r for r in rows[cfg.n_test :] if json.dumps(r["prompt"]) not in held_out]
    if not train:
        raise ValueError(f"{cfg.path}: no training pairs left after holding out {cfg.n_test}")
    DatasetDict({"train": Dataset.from_list(train), "test": Dataset.from_list(test)}).save_to_disk(
        str(ctx.out_dir)
    )
    ctx.metrics.update({"n_train": len(train), "n_test": len(test), "source": cfg.path})


def pairwise_accuracy(scorer: RewardModelScorer, pairs) -> dict[str, float]:
    """Share of held-out pairs where the chosen summary outscores the rejected one, overall and by flaw."""
    prompts = list(pairs["prompt"])
    chosen = scorer.score(prompts, [c[0]["content"] for c in pairs["chosen"]])
    rejected = scorer.score(prompts, [r[0]["content"] for r in pairs["rejected"]])
    wins = [c > r for c, r in zip(chosen, rejected, strict=True)]
    out = {"pairwise_accuracy": sum(wins) / len(wins)}
    for flaw in sorted(set(pairs["flaw"])):
        idx = [i for i, f in enumerate(pairs["flaw"]) if f == flaw]
        out[f"pairwise_accuracy/{flaw}"] = sum(wins[i] for i in idx) / len(idx)
    return out


def train_reward_model(ctx: StageContext) -> None:
    from transformers import AutoModelForSequenceClassification
    from trl import RewardTrainer

    cfg: RewardModelConfig = ctx.config
    model_dir = ctx.inputs["model"].path
    pairs = ctx.inputs["pairs"].dataset()
    tokenizer = load_tokenizer(model_dir)
    tokenizer.padding_side = "right"
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    args = reward_args(cfg, ctx.work_dir)
    trainer = RewardTrainer(model=model, args=args, train_dataset=pairs["train"], processing_class=tokenizer)
    run_trainer(ctx, trainer, tokenizer, {"loss": "loss", "accuracy": "acc"}, max(cfg.logging_steps, 50))
    metrics = pairwise_accuracy(RewardModelScorer.load(ctx.out_dir), pairs[cfg.eval_split])
    (ctx.out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    ctx.metrics.update({**metrics, "steps": trainer.state.global_step})
    print(f"[{ctx.label}] held-out pairwise accuracy {metrics['pairwise_accuracy']:.3f}", flush=True)


PREFERENCES = Stage(
    name="preferences", version="1", fn=build_preferences, config=PreferenceConfig, inputs=("data",)
)
STAGE = Stage(
    name="reward_model",
    version="1",
    fn=train_reward_model,
    config=RewardModelConfig,
    inputs=("model", "pairs"),
    resume_step=resume_step,
)
