"""Benchmark data stage: a standard test set as an evaluation split, beside the task's own.

GSM8K test and MATH-500 are presets (a local JSONL / JSON / parquet file or folder, or a hub id
when online); ``custom`` reads any problem file with the keys you name. The problems are read by
the same loaders as the task data (:mod:`data.problems`: malformed rows raise with file and
line, duplicates and over-long prompts are dropped and counted) and written as a ``DatasetDict``
with one split, ``test``, that the evaluate stage scores with the project's verifier. The file's
content hash is part of the key (an edited file is a new artifact).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, model_validator

from data.problems import AnswerFormat, clean_rows, problem_rows, read_records
from r1.config import Section
from r1.external import external
from r1.stage import Stage, StageContext

PRESETS: dict[str, dict[str, Any]] = {
    # GSM8K (MIT): this machine's copy; `openai/gsm8k:main` on the hub
    "gsm8k": {
        "path": "../shared/data/gsm8k",
        "question_key": "question",
        "answer_key": "answer",
        "answer_format": "gsm8k",
    },
    # MATH-500 (the PRM800K subset of MATH's test set): answers are LaTeX, checked by the verifier
    "math500": {
        "path": "HuggingFaceH4/MATH-500",
        "question_key": "problem",
        "answer_key": "answer",
        "answer_format": "plain",
    },
}


class BenchmarkConfig(Section):
    """One benchmark: where its problems are, how to read them, and how to sample on it."""

    preset: Literal["gsm8k", "math500", "custom"] = "gsm8k"
    path: str = Field("", description="file, folder of <split> files, Arrow folder or hub id", **external())
    split: str = "test"
    question_key: str = ""
    answer_key: str = ""
    answer_format: AnswerFormat = "plain"
    limit: int | None = Field(None, gt=0, description="the first N problems only (a fixed subset)")
    max_prompt_chars: int = Field(8192, gt=0)
    # how the evaluate stage samples on it (None: the recipe's eval section)
    k: int | None = Field(None, gt=0, description="samples per problem (n of the pass@k estimator)")
    max_new_tokens: int | None = Field(None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        """Fill what the preset knows; a key the recipe gives wins."""
        if isinstance(data, dict):
            preset = PRESETS.get(data.get("preset", "gsm8k"), {})
            data = {**preset, **{k: v for k, v in data.items() if v not in (None, "")}}
        return data

    @model_validator(mode="after")
    def _complete(self) -> BenchmarkConfig:
        missing = [k for k in ("path", "question_key", "answer_key") if not getattr(self, k)]
        if missing:
            raise ValueError(f"a custom benchmark needs {', '.join(missing)}")
        return self


def build_benchmark(ctx: StageContext) -> None:
    from datasets import Dataset, DatasetDict

    cfg: BenchmarkConfig = ctx.config
    where = f"{cfg.path}[{cfg.split}]"
    raw = list(read_records(cfg.path, cfg.split))
    rows = problem_rows(raw, where, cfg.question_key, cfg.answer_key, cfg.answer_format)
    kept, dropped = clean_rows(rows, cfg.max_prompt_chars)
    kept = kept[: cfg.limit]
    if not kept:
        raise ValueError(f"{where}: no usable problems (read {len(raw)}, dropped {dict(dropped) or 'none'})")
    DatasetDict({"test": Dataset.from_list(kept)}).save_to_disk(str(ctx.out_dir))
    stats = {"test": {"read": len(raw), "kept": len(kept), "dropped": dict(dropped)}}
    (ctx.out_dir / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    ctx.metrics.update({"n_test": len(kept), "source": where})
    print(f"[{ctx.label}] {len(kept)} problems from {where}", flush=True)


STAGE = Stage(name="benchmark", version="1", fn=build_benchmark, config=BenchmarkConfig)
