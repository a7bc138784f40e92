"""Prompt selection (Qwen3's reasoning-RL data): keep the prompts the current model can learn from.

Qwen3 trained its reasoning RL on a few thousand query-verifier pairs chosen so that they are
learnable and as hard as possible, after dropping the queries answered correctly without a chain
of thought. This stage does that for any prompt pool: it samples ``k`` completions per prompt
from the model to estimate its pass rate, keeps prompts whose pass rate lies inside ``band``
(by default [0.05, 0.95], which drops the never-solved and always-solved: they give GRPO groups
without a learning signal), drops prompts the model answers correctly with an empty chain of
thought (a greedy answer after ``<think></think><answer>``), and optionally keeps only the ``keep``
most informative (largest p (1 - p), the variance of a group's reward).

Artifact: a ``DatasetDict`` with the kept ``train`` prompts (their own columns plus the pass rate,
the no-chain answer's correctness and the prompt's index in the pool) and the task data's
``test`` split (so a GRPO stage on it evaluates as usual); ``stats.json`` whose counts add up
(``pool == kept + sum(dropped)``); a data card. Sampling runs in resumable shards.
"""

from __future__ import annotations

import json

from pydantic import Field, model_validator

from r1.config import Section
from r1.generation import GenerationSettings, SamplingConfig, render_prompt
from r1.rewards import accuracy_reward
from r1.shards import finished_shards, run_in_shards
from r1.stage import Stage, StageContext

NO_COT_PREFIX = "<think></think><answer>"
REASONS = ("never_solved", "below_band", "always_solved", "above_band", "no_cot", "over_keep")


class SelectionConfig(Section):
    split: str = "train"
    limit: int | None = Field(None, gt=0, description="the pool: the first N prompts of the split")
    k: int = Field(8, gt=1, description="samples per prompt to estimate its pass rate")
    band: tuple[float, float] = Field(
        (0.05, 0.95), description="keep lo <= pass rate <= hi (the default drops 0 and 1 for any k < 20)"
    )
    drop_no_cot: bool = Field(True, description="drop prompts answered correctly with an empty chain")
    keep: int | None = Field(None, gt=0, description="then keep the N most informative (p (1 - p))")
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    shard_size: int = Field(256, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _band(self) -> SelectionConfig:
        lo, hi = self.band
        if not 0 <= lo <= hi <= 1:
            raise ValueError(f"band must be 0 <= lo <= hi <= 1, got {self.band}")
        return self

    def task_splits(self) -> dict[str, str]:
        return {"split": self.split}


def drop_reason(rate: float, no_cot_correct: bool, cfg: SelectionConfig) -> str | None:
    """Why a prompt leaves the pool (first rule it fails), or None when it is kept."""
    lo, hi = cfg.band
    if rate < lo:
        return "never_solved" if rate == 0 else "below_band"
    if rate > hi:
        return "always_solved" if rate == 1 else "above_band"
    if cfg.drop_no_cot and no_cot_correct:
        return "no_cot"
    return None


def choose(rows: list[dict], cfg: SelectionConfig) -> tuple[list[dict], dict[str, int]]:
    """The kept rows (pool order) and the dropped counts, by reason."""
    dropped = dict.fromkeys(REASONS, 0)
    kept = []
    for r in rows:
        reason = drop_reason(r["pass_rate"], r["no_cot_correct"], cfg)
        if reason:
            dropped[reason] += 1
        else:
            kept.append(r)
    if cfg.keep is not None and len(kept) > cfg.keep:
        ranked = sorted(kept, key=lambda r: (-r["pass_rate"] * (1 - r["pass_rate"]), r["pool_index"]))
        chosen = {r["pool_index"] for r in ranked[: cfg.keep]}
        dropped["over_keep"] = len(kept) - cfg.keep
        kept = [r for r in kept if r["pool_index"] in chosen]
    return kept, dropped


def select_prompts(ctx: StageContext) -> None:
    from datasets import Dataset, DatasetDict

    cfg: SelectionConfig = ctx.config
    task = ctx.inputs["data"].dataset()
    pool = task[cfg.split]
    if cfg.limit:
        pool = pool.select(range(min(cfg.limit, len(pool))))
    sampling = cfg.generation.sampling()
    backend = None

    def build(shard: int, start: int, end: int) -> list[dict]:
        nonlocal backend
        if backend is None:
            backend = cfg.generation.backend_for(ctx.inputs["model"].path)
        rows = [dict(r) for r in pool.select(range(start, end))]
        answers = [str(r["answer"]) for r in rows]
        groups = backend.generate([r["prompt"] for r in rows], cfg.k, sampling, cfg.seed + shard)
        scores = accuracy_reward(
            [g.text for group in groups for g in group], [a for a in answers for _ in range(cfg.k)]
        )
        direct = [render_prompt(backend.tokenizer, r["prompt"]) + NO_COT_PREFIX for r in rows]
        greedy = SamplingConfig(temperature=0, max_new_tokens=cfg.generation.max_new_tokens)
        no_cot = backend.generate(direct, 1, greedy, cfg.seed + shard)
        no_cot_ok = accuracy_reward([NO_COT_PREFIX + g[0].text for g in no_cot], answers)
        for i, r in enumerate(rows):
            r["pool_index"] = start + i
            r["pass_rate"] = sum(scores[i * cfg.k : (i + 1) * cfg.k]) / cfg.k
            r["no_cot_correct"] = bool(no_cot_ok[i])
        return rows

    scored, _ = run_in_shards(ctx.work_dir, len(pool), cfg.shard_size, build, ctx.label)
    kept, dropped = choose([dict(r) for r in scored], cfg)
    if not kept:
        raise ValueError(f"[{ctx.label}] prompt selection kept nothing of {len(scored)}: dropped {dropped}")
    splits = {"train": Dataset.from_list(kept)}
    if "test" in task:
        splits["test"] = task["test"]
    DatasetDict(splits).save_to_disk(str(ctx.out_dir))
    rates = [r["pass_rate"] for r in scored]
    stats = {
        "pool": len(scored),
        "kept": len(kept),
        "dropped": dropped,
        "mean_pass_rate_pool": sum(rates) / len(rates),
        "mean_pass_rate_kept": sum(r["pass_rate"] for r in kept) / len(kept),
    }
    (ctx.out_dir / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    (ctx.out_dir / "README.md").write_text(data_card(stats, cfg, ctx.inputs["model"].key), encoding="utf-8")
    ctx.metrics.update(stats)
    print(f"[{ctx.label}] kept {len(kept)} of {len(scored)} prompts, dropped {dropped}", flush=True)


def data_card(stats: dict, cfg: SelectionConfig, model: str) -> str:
    lines = [
        "# Data card: RL prompts selected by pass rate",
        "",
        f"- model that measured them: `{model}`, {cfg.k} samples per prompt "
        f"(temperature {cfg.generation.temperature}, at most {cfg.generation.max_new_tokens} tokens)",
        f"- pool: {stats['pool']} prompts of split `{cfg.split}`, mean pass rate {stats['mean_pass_rate_pool']:.3f}",
        f"- kept: {stats['kept']} with {cfg.band[0]} <= pass rate <= {cfg.band[1]}"
        + (", not answered by an empty chain of thought" if cfg.drop_no_cot else "")
        + (f", the {cfg.keep} most informative" if cfg.keep else "")
        + f"; mean pass rate {stats['mean_pass_rate_kept']:.3f}",
        "- dropped: " + ", ".join(f"{k} {v}" for k, v in stats["dropped"].items()),
    ]
    return "\n".join(lines) + "\n"


STAGE = Stage(
    name="select_prompts",
    version="1",
    fn=select_prompts,
    config=SelectionConfig,
    inputs=("model", "data"),
    resume_step=finished_shards,
    resume_unit="shard",
)
