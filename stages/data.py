"""Task data stage: RL prompts, the held-out split and (micro-world) the pretraining corpus.

Writes one Arrow ``DatasetDict`` with splits ``train`` (RL prompts), ``test`` (held out: excluded
from the corpus and the prompts) and, for the micro-world, ``corpus`` (imperfect traces) and
``general`` (non-reasoning prompts for the SFT mix, the preference pairs and the final RL stage).
"""

from __future__ import annotations

import json
import random
from typing import Annotated, Literal

from datasets import Dataset, DatasetDict
from pydantic import Field

from data import microworld, problems
from r1.config import Section, new_option
from r1.external import external
from r1.runner import Stage, StageContext


class MicroWorldData(microworld.WorldConfig):
    kind: Literal["microworld"] = "microworld"


class ProblemsData(Section):
    """Question/answer problems from local files or the hub (your own data set, or a preset below)."""

    kind: Literal["problems"] = "problems"
    path: str = Field(
        description="folder with <split>.jsonl/.json/.parquet, an Arrow folder, or a hub id", **external()
    )
    train_split: str = "train"
    test_split: str = "test"
    question_key: str = "question"
    answer_key: str = "answer"
    answer_format: problems.AnswerFormat = Field(
        "plain", description="gsm8k: after ####; boxed: last \\boxed{} (MATH); plain: as is"
    )
    n_train: int | None = Field(None, gt=0)
    n_test: int | None = Field(None, gt=0)
    general_path: str | None = Field(
        None,
        description="general prompts (no reference answer) for R1's final RL stage: file or hub id",
        **external(),
    )
    general_split: str = "train"
    general_key: str = "prompt"
    n_general: int | None = Field(2000, gt=0)
    max_prompt_chars: int = Field(
        8192, gt=0, description="drop (and count) problems whose question is longer", **new_option()
    )


class GSM8KData(ProblemsData):
    """GSM8K (MIT): local JSONL (``../shared/data/gsm8k`` here) or the hub id ``openai/gsm8k:main``."""

    kind: Literal["gsm8k"] = "gsm8k"
    path: str = Field("../shared/data/gsm8k", **external())
    answer_format: problems.AnswerFormat = "gsm8k"


class MATHData(ProblemsData):
    """MATH (Hendrycks et al.): problem / solution with the answer in the last \\boxed{}."""

    kind: Literal["math"] = "math"
    path: str = Field("DigitalLearningGmbH/MATH-lighteval", **external())
    question_key: str = "problem"
    answer_key: str = "solution"
    answer_format: problems.AnswerFormat = "boxed"


class ReasoningGymData(Section):
    """A reasoning-gym task generated offline (e.g. ``gsm_symbolic``: GSM8K-style templates)."""

    kind: Literal["reasoning_gym"] = "reasoning_gym"
    task: str = "gsm_symbolic"
    n_train: int = Field(256, gt=0)
    n_test: int = Field(64, gt=0)
    seed: int = 0
    max_prompt_chars: int = Field(
        8192, gt=0, description="drop (and count) problems whose question is longer", **new_option()
    )


DataConfig = Annotated[
    MicroWorldData | ProblemsData | GSM8KData | MATHData | ReasoningGymData, Field(discriminator="kind")
]


def splits_of(cfg: MicroWorldData | ProblemsData | ReasoningGymData) -> set[str]:
    """The splits this stage writes for ``cfg`` (recipes check the splits their stages read)."""
    if cfg.kind == "microworld":
        return {"train", "test", "corpus"} | ({"general"} if cfg.n_general else set())
    return {"train", "test"} | ({"general"} if getattr(cfg, "general_path", None) else set())


def problem_splits(cfg: ProblemsData | ReasoningGymData) -> tuple[dict[str, Dataset], dict[str, dict]]:
    """Train and test splits of a real problem set, and what was read and dropped per split.

    Malformed records raise (naming the file and row); well-formed but unusable ones are dropped
    and counted (:func:`data.problems.clean_rows`): duplicates, over-long prompts, training
    questions that are test questions. A split left empty is an error, not an empty artifact.
    """
    if isinstance(cfg, ReasoningGymData):
        where = {s: f"reasoning-gym:{cfg.task}[{s}]" for s in ("train", "test")}
        raw_test = problems.reasoning_gym_rows(cfg.task, cfg.n_test, seed=cfg.seed + 1)
        exclude = {problems.question_of(r) for r in raw_test}
        raw_train = problems.reasoning_gym_rows(cfg.task, cfg.n_train, seed=cfg.seed, exclude=exclude)
    else:
        where = {"train": f"{cfg.path}[{cfg.train_split}]", "test": f"{cfg.path}[{cfg.test_split}]"}

        def load(split: str) -> list[dict]:
            raw = problems.read_records(cfg.path, split)
            return problems.problem_rows(
                raw, f"{cfg.path}[{split}]", cfg.question_key, cfg.answer_key, cfg.answer_format
            )

        raw_test, raw_train = load(cfg.test_split), load(cfg.train_split)
    test, test_dropped = problems.clean_rows(raw_test, cfg.max_prompt_chars)
    test = test[: cfg.n_test]
    held_out = {problems.question_of(r) for r in test}
    train, train_dropped = problems.clean_rows(raw_train, cfg.max_prompt_chars, held_out)
    train = train[: cfg.n_train]
    stats = {
        "train": {"read": len(raw_train), "kept": len(train), "dropped": dict(train_dropped)},
        "test": {"read": len(raw_test), "kept": len(test), "dropped": dict(test_dropped)},
    }
    for name, rows in (("train", train), ("test", test)):
        if not rows:
            raise problems.MalformedRowError(
                f"{where[name]}: no usable problems in the {name} split (read {stats[name]['read']}, "
                f"dropped {stats[name]['dropped'] or 'none'})"
            )
    splits = {"train": Dataset.from_list(train), "test": Dataset.from_list(test)}
    if getattr(cfg, "general_path", None):
        raw = problems.read_records(cfg.general_path, cfg.general_split)
        source = f"{cfg.general_path}[{cfg.general_split}]"
        rows = problems.general_rows(raw, source, cfg.general_key, None)
        general, dropped = problems.clean_rows(rows, cfg.max_prompt_chars)
        general = general[: cfg.n_general]
        if not general:
            raise problems.MalformedRowError(f"{source}: no usable general prompts (read {len(rows)})")
        splits["general"] = Dataset.from_list(general)
        stats["general"] = {"read": len(rows), "kept": len(general), "dropped": dict(dropped)}
    return splits, stats


def _corpus_rows(cfg: microworld.WorldConfig, exclude: set[str]) -> dict[str, list]:
    rng = random.Random(f"{cfg.seed}-corpus")
    drawn = microworld.generate_problems(rng, cfg, cfg.corpus.size, exclude)
    return {
        "prompt": [p.prompt for p in drawn],
        "completion": [microworld.render_trace(p, rng, cfg.corpus) for p in drawn],
        "answer": [str(p.answer) for p in drawn],
        "language": [p.language for p in drawn],
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
    if cfg.kind != "microworld":
        splits, stats = problem_splits(cfg)
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
        # RL prompts are draws from the task distribution: repeats are allowed (and counted); the
        # test split is distinct by construction.
        repeats = len(train) - len({(p.expression, p.language) for p in train})
        stats = {
            "train": {"read": len(train), "kept": len(train), "dropped": {}, "repeated_prompts": repeats},
            "test": {"read": len(test), "kept": len(test), "dropped": {}},
        }
    DatasetDict(splits).save_to_disk(str(ctx.out_dir))
    (ctx.out_dir / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    ctx.metrics.update({f"n_{name}": len(ds) for name, ds in splits.items()})
    dropped = {f"{split}.{k}": v for split, st in stats.items() for k, v in st["dropped"].items()}
    if dropped:
        ctx.metrics["dropped"] = dropped
        print(f"[{ctx.label}] dropped {dropped} (see stats.json)", flush=True)


STAGE = Stage(name="task_data", version="1", fn=build_task_data)
