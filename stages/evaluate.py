"""Evaluate stage: one protocol for the base and every trained checkpoint.

Greedy accuracy, plus R1's protocol on the held-out split: k samples per problem at the
evaluation temperature, averaged (pass@1), with pass@k and maj@k; format rate, mean completion
length, language consistency of sampled chains of thought, and self-check rate. Writes
``metrics.json`` and the per-problem generations (Arrow) so any number can be traced to outputs.
A fused model (thinking-mode fusion) is also evaluated with each requested switch (``modes``):
``by_mode.<mode>`` holds accuracy, pass@1, mean length and mode adherence, the share of
completions (greedy and sampled) that obey the mode.
"""

from __future__ import annotations

import json
import re

from pydantic import Field, model_validator

from r1.config import Section, new_option
from r1.generation import Generated, GenerationSettings, render_prompt
from r1.metrics import DEFAULT_SELF_CHECK, aggregate, score_problem, standard_error
from r1.modes import Mode, obeys, prefilled_think, with_mode
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
    pass_at: list[int] = Field(
        default_factory=list,
        description="also pass@j for each j <= k, by the unbiased estimator over the k samples",
        **new_option(),
    )
    modes: list[Mode] = Field(
        default_factory=list,
        description="also evaluate each prompt with this thinking switch (fused models): by_mode metrics",
        **new_option(),
    )

    @model_validator(mode="after")
    def _samples_sample(self) -> EvalConfig:
        if self.generation.temperature <= 0:
            raise ValueError("eval.generation.temperature must be > 0: the k samples are sampled")
        too_many = [j for j in self.pass_at if not 0 < j <= self.k]
        if too_many:
            raise ValueError(f"eval.pass_at {too_many}: pass@j needs 1 <= j <= k = {self.k} samples")
        return self

    def task_splits(self) -> dict[str, str]:
        return {"split": self.split}


def _whole(prefill: str, g: Generated) -> Generated:
    """A completion with the think block its prompt pre-filled put back in front."""
    return (
        g
        if not prefill or g.text.lstrip().startswith("<think>")
        else Generated(prefill + g.text, g.num_tokens, g.finished)
    )


def score_prompts(backend, cfg: EvalConfig, data, prompts: list) -> list[dict]:
    """Greedy and k sampled completions of ``prompts``, scored per problem (with the pre-fill)."""
    greedy = backend.generate(prompts, 1, cfg.generation.sampling(temperature=0, top_p=1.0), cfg.seed)
    samples = backend.generate(prompts, cfg.k, cfg.generation.sampling(), cfg.seed)
    pattern = re.compile(cfg.self_check_pattern)
    languages = data["language"] if "language" in data.column_names else [None] * len(data)
    records = []
    for prompt, gold, lang, g, s in zip(prompts, data["answer"], languages, greedy, samples, strict=True):
        prefill = prefilled_think(render_prompt(backend.tokenizer, prompt))
        whole = [_whole(prefill, x) for x in s]
        scored = score_problem(str(gold), lang, _whole(prefill, g[0]), whole, pattern)
        records.append({"prompt": prompt, "answer": str(gold), **scored})
    return records


def mode_metrics(records: list[dict], mode: Mode) -> dict:
    """What ``by_mode.<mode>`` reports: accuracy, pass@1, length and adherence, with their se."""
    overall = aggregate(records)
    adherence = [
        sum(obeys(mode, t) for t in [r["greedy"], *r["samples"]]) / (1 + len(r["samples"])) for r in records
    ]
    keys = ("accuracy", "pass@1", "mean_length")
    out = {k: overall[k] for k in keys}
    out["mode_adherence"] = sum(adherence) / len(adherence) if adherence else 0.0
    out["se"] = {k: overall["se"][k] for k in keys} | {"mode_adherence": standard_error(adherence)}
    return out


def evaluate(ctx: StageContext) -> None:
    from datasets import Dataset

    cfg: EvalConfig = ctx.config
    data = ctx.inputs["data"].dataset()[cfg.split]
    if cfg.limit:
        data = data.select(range(min(cfg.limit, len(data))))
    backend = cfg.generation.backend_for(ctx.inputs["model"].path)
    prompts = list(data["prompt"])
    records = score_prompts(backend, cfg, data, prompts)
    metrics = aggregate(records, cfg.pass_at)
    Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "generations"))
    if cfg.modes:
        metrics["by_mode"] = {}
        for mode in cfg.modes:
            moded = score_prompts(backend, cfg, data, [with_mode(p, mode) for p in prompts])
            metrics["by_mode"][mode] = mode_metrics(moded, mode)
            Dataset.from_list(moded).save_to_disk(str(ctx.out_dir / f"generations_{mode}"))
            m = metrics["by_mode"][mode]
            print(
                f"[{ctx.label}] {mode}: accuracy {m['accuracy']:.3f}  pass@1 {m['pass@1']:.3f}  "
                f"len {m['mean_length']:.1f}  adherence {m['mode_adherence']:.3f}",
                flush=True,
            )
    (ctx.out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True), encoding="utf-8")
    ctx.metrics.update(metrics)
    print(
        f"[{ctx.label}] accuracy {metrics['accuracy']:.3f}  pass@1 {metrics['pass@1']:.3f}  "
        f"pass@{cfg.k} {metrics['pass@k']:.3f}  format {metrics['format_rate']:.3f}  "
        f"lang {metrics['lang_consistency']:.3f}  len {metrics['mean_length']:.1f}",
        flush=True,
    )


STAGE = Stage(name="evaluate", version="3", fn=evaluate, config=EvalConfig, inputs=("model", "data"))
