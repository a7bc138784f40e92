"""Curation stage: verify and filter sampled traces into an SFT set, with stats and a data card.

One implementation for the cold-start set (R1-Zero outputs + curated generator examples), the
rejection-sampled large SFT set (stage-2 outputs + non-reasoning data) and the distillation set
(teacher traces, decontaminated against the evaluation split). Every sampled row is either kept
or dropped for exactly one reason, so ``generated == kept + sum(dropped.values())``.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from typing import Any

from pydantic import Field

from data.worlds import world_for
from r1.config import Section
from r1.language import language_share
from r1.rewards import is_well_formatted
from r1.stage import Stage, StageContext

REASONS = ("contaminated", "format", "wrong", "mixed_language", "overlong", "duplicate", "over_k")
_NGRAM_TOKEN = re.compile(r"\d+|[^\W\d_]+|[^\s\w]", re.UNICODE)


class CurateConfig(Section):
    require_correct: bool = True
    require_format: bool = True
    require_single_language: bool = True
    max_tokens: int | None = Field(80, gt=0, description="drop completions longer than this (or unfinished)")
    dedupe: bool = True
    max_per_prompt: int = Field(1, gt=0, description="keep the best K per prompt")
    decontaminate_ngram: int | None = Field(
        None, gt=0, description="drop prompts sharing an n-gram with eval"
    )
    eval_split: str = "test"
    curated: int = Field(0, ge=0, description="clean generator traces for train prompts (micro-world)")
    non_reasoning: int = Field(
        0, ge=0, description="non-reasoning examples with an empty think (micro-world)"
    )
    seed: int = 0

    def task_splits(self) -> dict[str, str]:
        return {"non_reasoning": "general"} if self.non_reasoning else {}


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """Word/number/symbol n-grams of a prompt; a prompt shorter than n is one n-gram of itself."""
    toks = _NGRAM_TOKEN.findall(text.lower())
    if len(toks) < n:
        return {tuple(toks)} if toks else set()
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def prompt_text(prompt: Any) -> str:
    """The user-visible text of a prompt (string, or chat messages without the system turn)."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(m["content"] for m in prompt if m.get("role") != "system")


def drop_reason(row: dict, cfg: CurateConfig, contaminated: bool) -> str | None:
    """The first rule a sampled row fails, in ``REASONS`` order; None when it is kept so far."""
    if contaminated:
        return "contaminated"
    text = row["completion"]
    if cfg.require_format and not is_well_formatted(text):
        return "format"
    if cfg.require_correct and row.get("reward_accuracy") != 1.0:
        return "wrong"
    if cfg.require_single_language and language_share(text, row.get("language") or "en") < 1.0:
        return "mixed_language"
    if cfg.max_tokens is not None and (row["num_tokens"] > cfg.max_tokens or not row["finished"]):
        return "overlong"
    return None


def select(rows: list[dict], cfg: CurateConfig, eval_prompts: list[str]) -> tuple[list[dict], Counter]:
    """Filter sampled rows; keep the best K per prompt (highest summed reward, then shortest)."""
    eval_grams: set = set()
    if cfg.decontaminate_ngram:
        for p in eval_prompts:
            eval_grams |= ngrams(p, cfg.decontaminate_ngram)
    dropped: Counter = Counter()
    seen: set[tuple[int, str]] = set()
    by_prompt: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        dirty = bool(eval_grams) and bool(
            ngrams(prompt_text(row["prompt"]), cfg.decontaminate_ngram) & eval_grams
        )
        reason = drop_reason(row, cfg, dirty)
        if reason is None and cfg.dedupe:
            ident = (row["prompt_index"], row["completion"].strip())
            reason = "duplicate" if ident in seen else None
            seen.add(ident)
        if reason:
            dropped[reason] += 1
        else:
            by_prompt[row["prompt_index"]].append(row)
    kept = []
    for group in by_prompt.values():
        group.sort(key=lambda r: (-_total_reward(r), r["num_tokens"], r["sample_index"]))
        kept += group[: cfg.max_per_prompt]
        dropped["over_k"] += max(0, len(group) - cfg.max_per_prompt)
    kept.sort(key=lambda r: (r["prompt_index"], r["sample_index"]))
    return kept, dropped


def _total_reward(row: dict) -> float:
    return sum(v for k, v in row.items() if k.startswith("reward_") and isinstance(v, int | float))


def _sft_row(prompt, completion: str, language: str, kind: str, source: str, **provenance) -> dict:
    return {
        "prompt": prompt,
        "completion": [{"role": "assistant", "content": completion}],
        "language": language,
        "kind": kind,
        "source": source,
        "prompt_index": provenance.get("prompt_index", -1),
        "sample_index": provenance.get("sample_index", -1),
        "reward_accuracy": provenance.get("reward_accuracy"),
        "num_tokens": provenance.get("num_tokens", -1),
    }


def generator_rows(task_data, world, cfg: CurateConfig) -> list[dict]:
    """Clean traces the world writes for train prompts, and its non-reasoning answers to general ones."""
    rng = random.Random(f"{cfg.seed}-curate")
    rows = []
    if cfg.curated:
        train = task_data["train"]
        for i in rng.sample(range(len(train)), min(cfg.curated, len(train))):
            r = train[i]
            trace = world.clean_trace(r, rng)
            rows.append(_sft_row(r["prompt"], trace, r["language"], "reasoning", "curated", prompt_index=i))
    if cfg.non_reasoning:
        if "general" not in task_data:
            raise ValueError("non-reasoning examples need a 'general' split in the task data")
        general = task_data["general"]
        for i in rng.sample(range(len(general)), min(cfg.non_reasoning, len(general))):
            r = general[i]
            completion = world.direct_answer(r)
            rows.append(
                _sft_row(
                    r["prompt"],
                    completion,
                    r["language"],
                    "general",
                    f"non_reasoning:{r['task']}",
                    prompt_index=i,
                )
            )
    return rows


def length_histogram(lengths: list[int], bins: int = 8) -> list[tuple[str, int]]:
    if not lengths:
        return []
    lo, hi = min(lengths), max(lengths)
    width = max(1, (hi - lo + bins) // bins)
    counts = Counter((n - lo) // width for n in lengths)
    return [
        (f"{lo + b * width}-{lo + (b + 1) * width - 1}", counts.get(b, 0))
        for b in range(bins)
        if lo + b * width <= hi
    ]


def data_card(stats: dict, sampling: dict | None, source: str | None, lengths: list[int]) -> str:
    lines = ["# Data card", "", f"- source checkpoint: `{source or 'none'}`"]
    if sampling:
        sampling = {**sampling, **(sampling.get("generation") or {})}  # the sample stage's settings, flat
        keys = ("n", "temperature", "top_p", "max_new_tokens", "seed", "split", "limit")
        lines.append("- sampling: " + ", ".join(f"{k}={sampling.get(k)}" for k in keys if k in sampling))
    lines += [
        f"- generated: {stats['generated']}, kept: {stats['kept']}",
        "- dropped: " + (", ".join(f"{k} {v}" for k, v in stats["dropped"].items()) or "none"),
        f"- added without sampling: {stats['added']}",
        f"- rows in this set: {stats['rows']}",
        "",
        "## Completion length (tokens, sampled rows kept)",
        "",
        "| tokens | rows |",
        "|---|---|",
        *[f"| {b} | {n} |" for b, n in length_histogram(lengths)],
    ]
    return "\n".join(lines) + "\n"


def curate(ctx: StageContext) -> None:
    from datasets import Dataset

    cfg: CurateConfig = ctx.config
    task_data = ctx.inputs["data"].dataset()
    eval_prompts = (
        [prompt_text(p) for p in task_data[cfg.eval_split]["prompt"]] if cfg.eval_split in task_data else []
    )
    sampled, sampling, source = [], None, None
    if "samples" in ctx.inputs:
        sampled = [dict(r) for r in ctx.inputs["samples"].dataset()]
        manifest = ctx.inputs["samples"].manifest()
        sampling, source = manifest["config"], manifest["inputs"].get("model")
    kept, dropped = select(sampled, cfg, eval_prompts)
    rows = [
        _sft_row(
            r["prompt"],
            r["completion"],
            r["language"],
            r.get("kind", "reasoning"),
            r["source"],
            prompt_index=r["prompt_index"],
            sample_index=r["sample_index"],
            reward_accuracy=r.get("reward_accuracy"),
            num_tokens=r["num_tokens"],
        )
        for r in kept
    ]
    extra = generator_rows(task_data, world_for(ctx.inputs["data"]), cfg)
    rows += extra
    random.Random(cfg.seed).shuffle(rows)
    if not rows:
        raise ValueError(f"[{ctx.label}] curation kept nothing: dropped {dict(dropped)}")
    Dataset.from_list(rows).save_to_disk(str(ctx.out_dir))
    stats = {
        "generated": len(sampled),
        "kept": len(kept),
        "dropped": {r: dropped.get(r, 0) for r in REASONS if dropped.get(r, 0)},
        "added": dict(Counter(r["source"].split(":")[0] for r in extra)),
        "rows": len(rows),
    }
    (ctx.out_dir / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    card = data_card(stats, sampling, source, [r["num_tokens"] for r in kept])
    (ctx.out_dir / "README.md").write_text(card, encoding="utf-8")
    ctx.metrics.update({k: v for k, v in stats.items()})
    print(
        f"[{ctx.label}] generated {stats['generated']}, kept {stats['kept']}, dropped {stats['dropped']}, "
        f"added {stats['added']}",
        flush=True,
    )


STAGE = Stage(
    name="curate", version="1", fn=curate, config=CurateConfig, inputs=("data",), optional_inputs=("samples",)
)
