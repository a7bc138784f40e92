"""Real-world problem sets for real-model recipes: GSM8K, MATH, reasoning-gym tasks, your own files.

Every loader returns rows in the micro-world's shape, so every stage downstream is the same: a
conversational ``prompt`` with R1-Zero's system prompt, the reference ``answer`` as a string that
math-verify reads, and ``language``. Sources are local JSONL / JSON / Parquet files or Arrow
folders, a hub id (when the machine is online), or a reasoning-gym task generated offline.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from datasets import Dataset
from pydantic import Field

from r1.answers import last_boxed
from r1.config import Section, new_option, read_utf8
from r1.external import external

R1_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and "
    "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
    "<answer> answer here </answer>."
)

AnswerFormat = Literal["gsm8k", "boxed", "plain"]


class MalformedRowError(ValueError):
    """A dataset row that lacks a field or whose answer cannot be read; names the source and row."""


def gsm8k_answer(solution: str) -> str:
    """The number after ``####`` in a GSM8K solution, thousands separators removed."""
    if "####" not in solution:
        raise ValueError("no '####' final answer")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def boxed_answer(solution: str) -> str:
    """The content of the last ``\\boxed{...}`` in a MATH solution (nested braces kept)."""
    answer = last_boxed(solution)
    if answer is None:
        raise ValueError("no complete \\boxed{} answer")
    return answer


PARSERS = {"gsm8k": gsm8k_answer, "boxed": boxed_answer, "plain": lambda s: str(s).strip()}


def r1_prompt(question: str) -> list[dict[str, str]]:
    """R1-Zero's prompt: its system instruction, then the question."""
    return [{"role": "system", "content": R1_SYSTEM_PROMPT}, {"role": "user", "content": question}]


def problem_rows(
    raw: Iterable[dict],
    source: str,
    question_key: str,
    answer_key: str,
    answer_format: AnswerFormat,
    limit: int | None = None,
) -> list[dict]:
    """Raw records as prompt/answer rows; a bad record raises naming the source and its position."""
    parse = PARSERS[answer_format]
    rows = []
    for i, rec in enumerate(raw, 1):
        try:
            if rec.get(answer_key) is None:  # str(None) would make "None" the reference answer
                raise ValueError(f"{answer_key!r} is missing or null")
            question, answer = rec[question_key], parse(rec[answer_key])
            if not isinstance(question, str) or not question.strip() or not answer:
                raise ValueError("empty question or answer")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MalformedRowError(f"{source}: row {i}: malformed problem ({type(e).__name__}: {e})") from e
        rows.append({"prompt": r1_prompt(question), "answer": answer, "language": "en"})
        if limit is not None and len(rows) >= limit:
            break
    return rows


def clean_rows(
    rows: list[dict], max_prompt_chars: int, exclude: set[str] = frozenset()
) -> tuple[list[dict], Counter]:
    """Rows without duplicates, over-long prompts and questions in ``exclude``; what was dropped.

    The documented policy for problems that are well formed but unusable: a repeated question
    (counted twice it would skew an evaluation), a prompt longer than ``max_prompt_chars`` (one
    such prompt can make a trainer allocate for its length), a training question that is also a
    test question. Each is dropped and counted, in this order.
    """
    kept, seen, dropped = [], set(), Counter()
    for row in rows:
        q = question_of(row)
        reason = (
            "in_test"
            if q in exclude
            else "duplicate"
            if q in seen
            else "overlong_prompt"
            if len(q) > max_prompt_chars
            else None
        )
        seen.add(q)
        if reason:
            dropped[reason] += 1
        else:
            kept.append(row)
    return kept, dropped


def _jsonl(path: Path) -> Iterable[dict]:
    with open(path, encoding="utf-8") as f:
        try:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise MalformedRowError(f"{path}:{lineno}: not JSON ({e})") from e
                    if not isinstance(rec, dict):
                        raise MalformedRowError(f"{path}:{lineno}: a record must be a JSON object")
                    yield rec
        except UnicodeDecodeError as e:
            raise MalformedRowError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _json(path: Path) -> list[dict]:
    try:
        data = json.loads(read_utf8(path, MalformedRowError))
    except json.JSONDecodeError as e:
        raise MalformedRowError(f"{path}: not JSON ({e})") from e
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise MalformedRowError(f"{path}: a .json problem file must hold a list of objects")
    return data


def read_records(path: str, split: str) -> Iterable[dict]:
    """Records of one split from a file, a folder of split files, an Arrow folder or a hub id."""
    p = Path(path)
    if p.is_dir():
        for name in (f"{split}.jsonl", f"{split}.json", f"{split}.parquet"):
            if (p / name).is_file():
                return read_records(str(p / name), split)
        if (p / "dataset_dict.json").is_file() or (p / "dataset_info.json").is_file():
            from datasets import load_from_disk

            ds = load_from_disk(str(p))
            return ds[split] if hasattr(ds, "keys") else ds
        raise FileNotFoundError(f"no {split}.jsonl/.json/.parquet or Arrow dataset in {p}")
    if p.suffix == ".jsonl":
        return _jsonl(p)
    if p.suffix == ".json":
        return _json(p)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    if p.exists() or p.suffix or path.startswith((".", "/")):
        raise FileNotFoundError(f"problem file not found or of unknown type: {path}")
    from datasets import load_dataset  # a hub id, e.g. openai/gsm8k (needs the network)

    config = None
    if ":" in path:  # hub id with a config name: openai/gsm8k:main
        path, config = path.split(":", 1)
    return load_dataset(path, config, split=split)


def reasoning_gym_rows(task: str, n: int, seed: int, exclude: set[str] = frozenset()) -> list[dict]:
    """``n`` generated problems of a reasoning-gym task (offline, seeded), skipping ``exclude``."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset(task, size=n + len(exclude), seed=seed)
    records = ({"question": e["question"], "answer": e["answer"]} for e in ds if e["question"] not in exclude)
    return problem_rows(records, f"reasoning-gym:{task}", "question", "answer", "plain", limit=n)


def question_of(row: dict) -> str:
    """The user question inside a prompt row (to keep splits disjoint)."""
    return next(m["content"] for m in row["prompt"] if m["role"] == "user")


def as_messages(value, role: str) -> list[dict[str, str]]:
    """A string or a message list as a message list (a string becomes one ``role`` turn)."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [{"role": m["role"], "content": m["content"]} for m in value]


def general_rows(records: Iterable[dict], source: str, prompt_key: str, limit: int | None) -> list[dict]:
    """Prompts without a reference answer (R1's general data), judged later by a reward model."""
    rows = []
    for i, rec in enumerate(records, 1):
        try:
            prompt = as_messages(rec[prompt_key], "user")
        except (KeyError, TypeError) as e:
            raise MalformedRowError(f"{source}: row {i}: no usable {prompt_key!r} ({e})") from e
        rows.append({"prompt": prompt, "answer": "", "language": "en", "task": "general"})
        if limit is not None and len(rows) >= limit:
            break
    return rows


def preference_rows(
    records: Iterable[dict], source: str, keys: tuple[str, str, str], limit: int | None
) -> list[dict]:
    """prompt / chosen / rejected rows; TRL's implicit-prompt form (the prompt inside chosen) too."""
    prompt_key, chosen_key, rejected_key = keys
    rows = []
    for i, rec in enumerate(records, 1):
        try:
            chosen, rejected = (
                as_messages(rec[chosen_key], "assistant"),
                as_messages(rec[rejected_key], "assistant"),
            )
            if prompt_key in rec:
                prompt = as_messages(rec[prompt_key], "user")
            else:  # implicit prompt: everything before the last turn, shared by both
                prompt, chosen, rejected = chosen[:-1], chosen[-1:], rejected[-1:]
            if not prompt or not chosen or not rejected:
                raise ValueError("empty prompt, chosen or rejected")
        except (KeyError, TypeError, ValueError) as e:
            raise MalformedRowError(
                f"{source}: row {i}: malformed preference pair ({type(e).__name__}: {e})"
            ) from e
        rows.append(
            {
                "prompt": prompt,
                "chosen": chosen,
                "rejected": rejected,
                "flaw": "given",
                "language": "en",
                "task": "general",
            }
        )
        if limit is not None and len(rows) >= limit:
            break
    return rows


# -- problem sets as a task world's data (the data stage's config and splits) --------------------


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
    answer_format: AnswerFormat = Field(
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
    answer_format: AnswerFormat = "gsm8k"


class MATHData(ProblemsData):
    """MATH (Hendrycks et al.): problem / solution with the answer in the last \\boxed{}."""

    kind: Literal["math"] = "math"
    path: str = Field("DigitalLearningGmbH/MATH-lighteval", **external())
    question_key: str = "problem"
    answer_key: str = "solution"
    answer_format: AnswerFormat = "boxed"


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


def problem_splits(cfg: ProblemsData | ReasoningGymData) -> tuple[dict[str, Dataset], dict[str, dict]]:
    """Train and test splits of a real problem set, and what was read and dropped per split.

    Malformed records raise (naming the file and row); well-formed but unusable ones are dropped
    and counted (:func:`clean_rows`): duplicates, over-long prompts, training
    questions that are test questions. A split left empty is an error, not an empty artifact.
    """
    if isinstance(cfg, ReasoningGymData):
        where = {s: f"reasoning-gym:{cfg.task}[{s}]" for s in ("train", "test")}
        raw_test = reasoning_gym_rows(cfg.task, cfg.n_test, seed=cfg.seed + 1)
        exclude = {question_of(r) for r in raw_test}
        raw_train = reasoning_gym_rows(cfg.task, cfg.n_train, seed=cfg.seed, exclude=exclude)
    else:
        where = {"train": f"{cfg.path}[{cfg.train_split}]", "test": f"{cfg.path}[{cfg.test_split}]"}

        def load(split: str) -> list[dict]:
            raw = read_records(cfg.path, split)
            return problem_rows(
                raw, f"{cfg.path}[{split}]", cfg.question_key, cfg.answer_key, cfg.answer_format
            )

        raw_test, raw_train = load(cfg.test_split), load(cfg.train_split)
    test, test_dropped = clean_rows(raw_test, cfg.max_prompt_chars)
    test = test[: cfg.n_test]
    held_out = {question_of(r) for r in test}
    train, train_dropped = clean_rows(raw_train, cfg.max_prompt_chars, held_out)
    train = train[: cfg.n_train]
    stats = {
        "train": {"read": len(raw_train), "kept": len(train), "dropped": dict(train_dropped)},
        "test": {"read": len(raw_test), "kept": len(test), "dropped": dict(test_dropped)},
    }
    for name, rows in (("train", train), ("test", test)):
        if not rows:
            raise MalformedRowError(
                f"{where[name]}: no usable problems in the {name} split (read {stats[name]['read']}, "
                f"dropped {stats[name]['dropped'] or 'none'})"
            )
    splits = {"train": Dataset.from_list(train), "test": Dataset.from_list(test)}
    if getattr(cfg, "general_path", None):
        raw = read_records(cfg.general_path, cfg.general_split)
        source = f"{cfg.general_path}[{cfg.general_split}]"
        rows = general_rows(raw, source, cfg.general_key, None)
        general, dropped = clean_rows(rows, cfg.max_prompt_chars)
        general = general[: cfg.n_general]
        if not general:
            raise MalformedRowError(f"{source}: no usable general prompts (read {len(rows)})")
        splits["general"] = Dataset.from_list(general)
        stats["general"] = {"read": len(rows), "kept": len(general), "dropped": dict(dropped)}
    return splits, stats
