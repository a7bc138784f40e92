"""Task data stage: RL prompts, the held-out split and (micro-world) the pretraining corpus.

Writes one Arrow ``DatasetDict`` with splits ``train`` (RL prompts), ``test`` (held out: excluded
from the corpus and the prompts) and, for the micro-world, ``corpus`` (imperfect traces) and
``general`` (non-reasoning prompts for the SFT mix, the preference pairs and the final RL stage).
"""

from __future__ import annotations

import random
from typing import Annotated, Literal

from datasets import Dataset, DatasetDict
from pydantic import Field

from data import gsm8k, microworld
from r1.config import Section
from r1.runner import Stage, StageContext


class MicroWorldData(microworld.WorldConfig):
    kind: Literal["microworld"] = "microworld"


class GSM8KData(Section):
    """GSM8K from local JSONL files (``../shared/data/gsm8k`` here; your own path elsewhere)."""

    kind: Literal["gsm8k"] = "gsm8k"
    path: str = "../shared/data/gsm8k"
    n_train: int | None = Field(None, gt=0)
    n_test: int | None = Field(None, gt=0)


DataConfig = Annotated[MicroWorldData | GSM8KData, Field(discriminator="kind")]


def _corpus_rows(cfg: microworld.WorldConfig, exclude: set[str]) -> dict[str, list]:
    rng = random.Random(f"{cfg.seed}-corpus")
    problems = microworld.generate_problems(rng, cfg, cfg.corpus.size, exclude)
    return {
        "prompt": [p.prompt for p in problems],
        "completion": [microworld.render_trace(p, rng, cfg.corpus) for p in problems],
        "answer": [str(p.answer) for p in problems],
        "language": [p.language for p in problems],
    }


def corpus_stats(corpus: Dataset) -> dict[str, float]:
    """How imperfect the corpus is: the base model's teacher, measured."""
    from r1.metrics import DEFAULT_SELF_CHECK
    from r1.rewards import accuracy_reward, format_reward, language_consistency_reward

    n = len(corpus)
    comps = corpus["completion"]
    acc = accuracy_reward(comps, corpus["answer"])
    fmt = format_reward(comps)
    lang = language_consistency_reward(comps, corpus["language"])
    import re

    check = re.compile(DEFAULT_SELF_CHECK)
    return {
        "corpus_size": n,
        "corpus_correct_rate": sum(acc) / n,
        "corpus_format_rate": sum(fmt) / n,
        "corpus_single_language_rate": sum(v == 1.0 for v in lang) / n,
        "corpus_self_check_rate": sum(bool(check.search(c)) for c in comps) / n,
    }


def build_task_data(ctx: StageContext) -> None:
    cfg = ctx.config
    if cfg.kind == "gsm8k":
        splits = {
            "train": Dataset.from_list(gsm8k.load_jsonl(f"{cfg.path}/train.jsonl", cfg.n_train)),
            "test": Dataset.from_list(gsm8k.load_jsonl(f"{cfg.path}/test.jsonl", cfg.n_test)),
        }
    else:
        test = microworld.generate_test_problems(cfg)
        held_out = {p.expression for p in test}
        train = microworld.generate_problems(random.Random(f"{cfg.seed}-train"), cfg, cfg.n_train, held_out)
        splits = {
            "train": Dataset.from_list([microworld.problem_row(p) for p in train]),
            "test": Dataset.from_list([microworld.problem_row(p) for p in test]),
            "corpus": Dataset.from_dict(_corpus_rows(cfg, held_out)),
        }
        if cfg.n_general:
            splits["general"] = Dataset.from_list(
                [microworld.general_row(t) for t in microworld.generate_general(cfg)]
            )
        ctx.metrics.update(corpus_stats(splits["corpus"]))
    DatasetDict(splits).save_to_disk(str(ctx.out_dir))
    ctx.metrics.update({f"n_{name}": len(ds) for name, ds in splits.items()})


STAGE = Stage(name="task_data", version="1", fn=build_task_data)
