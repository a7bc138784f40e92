"""Evaluate stage: one protocol for the base and every trained checkpoint.

Greedy accuracy, plus R1's protocol on the held-out split: k samples per problem at the
evaluation temperature, averaged (pass@1), with pass@k and maj@k; format rate, mean completion
length, language consistency of sampled chains of thought, and self-check rate. Writes
``metrics.json`` and the per-problem generations (Arrow) so any number can be traced to outputs.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import Field

from r1.config import Section, unhashed
from r1.generation import SamplingConfig, VLLMSettings, make_backend
from r1.metrics import DEFAULT_SELF_CHECK, aggregate, score_problem
from r1.runner import Stage, StageContext


class EvalConfig(Section):
    split: str = "test"
    limit: int | None = Field(None, gt=0, description="evaluate on the first N problems only")
    k: int = Field(4, gt=0, description="samples per problem for pass@1 / pass@k / maj@k")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the k samples")
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(96, gt=0)
    seed: int = 0
    backend: Literal["transformers", "vllm"] = "transformers"
    vllm: VLLMSettings = Field(default_factory=VLLMSettings, **unhashed())
    batch_size: int = Field(512, gt=0, description="sequences per generate call")
    self_check_pattern: str = DEFAULT_SELF_CHECK

    def task_splits(self) -> dict[str, str]:
        return {"split": self.split}


def evaluate(ctx: StageContext) -> None:
    from datasets import Dataset

    cfg: EvalConfig = ctx.config
    data = ctx.inputs["data"].dataset()[cfg.split]
    if cfg.limit:
        data = data.select(range(min(cfg.limit, len(data))))
    backend = make_backend(cfg.backend, ctx.inputs["model"].path, batch_size=cfg.batch_size, vllm=cfg.vllm)
    prompts = list(data["prompt"])
    greedy = backend.generate(
        prompts, 1, SamplingConfig(temperature=0, max_new_tokens=cfg.max_new_tokens), cfg.seed
    )
    sampling = SamplingConfig(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    samples = backend.generate(prompts, cfg.k, sampling, cfg.seed)
    pattern = re.compile(cfg.self_check_pattern)
    languages = data["language"] if "language" in data.column_names else [None] * len(data)
    records = [
        score_problem(str(gold), lang, g[0], s, pattern)
        for gold, lang, g, s in zip(data["answer"], languages, greedy, samples, strict=True)
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


STAGE = Stage(name="evaluate", version="2", fn=evaluate)
