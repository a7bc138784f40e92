"""Sampling stage: N scored completions per prompt from a checkpoint, written in resumable shards.

One implementation for every "generate from a model" step of the recipe: R1-Zero outputs for
the cold-start set, rejection sampling from the reasoning-RL checkpoint, and teacher traces for
distillation. Shards are committed atomically (written to a temporary folder, then renamed), so a
killed run resumes at the first unfinished shard, never duplicates or loses a row, and reproduces
exactly the rows of an uninterrupted run: each shard's sampling is seeded by its content.
"""

from __future__ import annotations

from pydantic import Field

from r1.config import Section
from r1.generation import GenerationSettings
from r1.rewards import RewardSpec, build_rewards
from r1.shards import finished_shards, run_in_shards
from r1.stage import Stage, StageContext


class SampleConfig(Section):
    split: str = "train"
    limit: int | None = Field(None, gt=0, description="sample for the first N prompts only")
    n: int = Field(4, gt=0, description="completions per prompt")
    seed: int = 0
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    shard_size: int = Field(256, gt=0, description="prompts per shard (the unit of resume)")
    rewards: list[RewardSpec] = Field(
        default_factory=lambda: [
            RewardSpec(name="accuracy"),
            RewardSpec(name="format"),
            RewardSpec(name="language_consistency"),
        ],
        description="scores stored with every completion (reward_<name> columns)",
    )

    def task_splits(self) -> dict[str, str]:
        return {"split": self.split}


def _shard_rows(prompts: list[dict], start: int, groups, rewards, model_key: str) -> list[dict]:
    rows = []
    for offset, (row, group) in enumerate(zip(prompts, groups, strict=True)):
        for j, g in enumerate(group):
            rows.append(
                {
                    **row,
                    "completion": g.text,
                    "prompt_index": start + offset,
                    "sample_index": j,
                    "num_tokens": g.num_tokens,
                    "finished": g.finished,
                    "source": model_key,
                }
            )
    if not rows:
        return rows
    columns = {k: [r[k] for r in rows] for k in rows[0] if k not in ("completion", "prompt")}
    completions = [r["completion"] for r in rows]
    for fn in rewards:
        scores = fn(completions, prompts=[r["prompt"] for r in rows], **columns)
        for r, s in zip(rows, scores, strict=True):
            r[f"reward_{fn.__name__}"] = s
    return rows


def sample(ctx: StageContext) -> None:
    cfg: SampleConfig = ctx.config
    data = ctx.inputs["data"].dataset()[cfg.split]
    if cfg.limit:
        data = data.select(range(min(cfg.limit, len(data))))
    rewards, _ = build_rewards(cfg.rewards)
    sampling = cfg.generation.sampling()
    backend = None

    def build(shard: int, start: int, end: int) -> list[dict]:
        nonlocal backend
        if backend is None:  # load the model only when a shard is left to generate
            backend = cfg.generation.backend_for(ctx.inputs["model"].path)
        prompts = [dict(r) for r in data.select(range(start, end))]
        groups = backend.generate([r["prompt"] for r in prompts], cfg.n, sampling, cfg.seed + shard)
        return _shard_rows(prompts, start, groups, rewards, ctx.inputs["model"].key)

    out, n_shards = run_in_shards(ctx.work_dir, len(data), cfg.shard_size, build, ctx.label)
    out.save_to_disk(str(ctx.out_dir))
    ctx.metrics.update({"prompts": len(data), "completions": len(out), "shards": n_shards})
    for fn in rewards:
        col = f"reward_{fn.__name__}"
        values = [v for v in out[col] if v is not None] if len(out) else []
        ctx.metrics[f"mean_{col}"] = sum(values) / len(values) if values else None


STAGE = Stage(
    name="sample",
    version="2",
    fn=sample,
    config=SampleConfig,
    inputs=("model", "data"),
    resume_step=finished_shards,
    resume_unit="shard",
)
