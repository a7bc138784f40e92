"""Evaluate stage: one protocol for the base and every trained checkpoint.

Greedy accuracy, plus R1's protocol on the held-out split: k samples per problem at the
evaluation temperature, averaged (pass@1), with pass@k and maj@k; format rate, mean completion
length, language consistency of sampled chains of thought, and self-check rate. Writes
``metrics.json`` and the per-problem generations (Arrow) so any number can be traced to outputs.
"""

from __future__ import annotations

import json
import re

from pydantic import Field, model_validator

from r1.config import Section
from r1.generation import GenerationSettings
from r1.metrics import DEFAULT_SELF_CHECK, aggregate, score_problem
from r1.stage import Stage, StageContext


class EvalConfig(Section):
    split: str = "test"
    limit: int | None = Field(None, gt=0, description="evaluate on the first N problems only")
    k: int = Field(4, gt=0, description="samples per problem for pass@1 / pass@k / maj@k")
    seed: int = 0
    generation: GenerationSettings = Field(
        default_factory=GenerationSettings, description="the k samples (the greedy pass uses temperature 0)"
    )
    self_check_pattern: str = DEFAULT_SELF_CHECK

    @model_validator(mode="after")
    def _samples_sample(self) -> EvalConfig:
        if self.generation.temperature <= 0:
            raise ValueError("eval.generation.temperature must be > 0: the k samples are sampled")
        return self

    def task_splits(self) -> dict[str, str]:
        return {"split": self.split}


def evaluate(ctx: StageContext) -> None:
    from datasets import Dataset

    cfg: EvalConfig = ctx.config
    data = ctx.inputs["data"].dataset()[cfg.split]
    if cfg.limit:
        data = data.select(range(min(cfg.limit, len(data))))
    backend = cfg.generation.backend_for(ctx.inputs["model"].path)
    prompts = list(data["prompt"])
    greedy = backend.generate(prompts, 1, cfg.generation.sampling(temperature=0, top_p=1.0), cfg.seed)
    samples = backend.generate(prompts, cfg.k, cfg.generation.sampling(), cfg.seed)
    pattern = re.compile(cfg.self_check_pattern)
    languages = data["language"] if "language" in data.column_names else [None] * len(data)
    records = [
        {"prompt": prompt, "answer": str(gold), **score_problem(str(gold), lang, g[0], s, pattern)}
        for prompt, gold, lang, g, s in zip(prompts, data["answer"], languages, greedy, samples, strict=True)
    ]
    metrics = aggregate(records)
    Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "generations"))
    (ctx.out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True), encoding="utf-8")
    ctx.metrics.update(metrics)
    print(
        f"[{ctx.label}] accuracy {metrics['accuracy']:.3f}  pass@1 {metrics['pass@1']:.3f}  "
        f"pass@{cfg.k} {metrics['pass@k']:.3f}  format {metrics['format_rate']:.3f}  "
        f"lang {metrics['lang_consistency']:.3f}  len {metrics['mean_length']:.1f}",
        flush=True,
    )


STAGE = Stage(name="evaluate", version="2", fn=evaluate, config=EvalConfig, inputs=("model", "data"))
