"""The seam between the generic stages and a task world.

A world is where the task data comes from: the micro-world (generated problems, a pretraining
corpus, a closed vocabulary, a generator of clean traces and of preference pairs) or a problem
set (GSM8K, MATH, reasoning-gym, a user's files), which has only problems. The stages never ask
which world they are in; they ask the world of their task data for what they need:

=================  ====================================================  =====================
what               who asks                                              problem sets
=================  ====================================================  =====================
``build``          the data stage: splits, ``stats.json``, metrics       yes
``splits``         recipes, at load time: which splits the data has      yes
``lexicon``        the micro base stage: its word tokenizer              no (use a checkpoint)
``clean_trace``    curation: correct traces for cold-start prompts       no (``curated: 0``)
``direct_answer``  curation: non-reasoning answers, an empty think        no (``non_reasoning: 0``)
``preference``     preference pairs for the reward model                 no (``preferences.path``)
=================  ====================================================  =====================

A second world plugs in by subclassing :class:`World` and adding it to :data:`WORLDS` with its
config in :data:`DataConfig`; no stage changes.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from datasets import Dataset
from pydantic import Field

from data import microworld
from data.problems import GSM8KData, MATHData, ProblemsData, ReasoningGymData, problem_splits
from r1 import progress


class MicroWorldData(microworld.WorldConfig):
    kind: Literal["microworld"] = "microworld"


DataConfig = Annotated[
    MicroWorldData | ProblemsData | GSM8KData | MATHData | ReasoningGymData, Field(discriminator="kind")
]


@dataclass(frozen=True)
class Lexicon:
    """A closed vocabulary: words, characters, and whether the world's tool calls are in it."""

    words: list[str]
    chars: str
    tools: bool = False


class WorldError(ValueError):
    """A stage asked a world for something it does not have; the message says what to set instead."""


class World:
    """What a world offers the generic stages; a problem set (this class) offers problems only."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def build(self, cfg) -> tuple[dict[str, Dataset], dict[str, dict], dict[str, Any]]:
        """The task data: splits, per-split stats (read / kept / dropped) and manifest metrics."""
        splits, stats = problem_splits(cfg)
        return splits, stats, {}

    def splits(self, cfg) -> set[str]:
        return {"train", "test"} | ({"general"} if getattr(cfg, "general_path", None) else set())

    def lexicon(self, cfg: dict) -> Lexicon:
        """The closed vocabulary a word tokenizer is built from (``cfg``: the data manifest's config)."""
        raise WorldError(f"{self.kind} data has no closed vocabulary: use base.kind pretrained")

    def clean_trace(self, row: dict, rng: random.Random) -> str:
        """A correct, well-formed reasoning trace for a training prompt."""
        raise WorldError(f"{self.kind} data has no generator of clean traces: set curated: 0")

    def direct_answer(self, row: dict) -> str:
        """A non-reasoning completion (an empty think) for a general prompt."""
        raise WorldError(
            f"{self.kind} data has no reference answers for general prompts: set non_reasoning: 0"
        )

    def preference(self, row: dict, rng: random.Random) -> tuple[str, str, str]:
        """(chosen, rejected, flaw) completions for a general prompt."""
        raise WorldError(f"{self.kind} data cannot make preference pairs: give them in preferences.path")


class MicroWorld(World):
    """The generated micro-world (:mod:`data.microworld`): everything a CPU recipe needs."""

    def __init__(self) -> None:
        super().__init__("microworld")

    def build(self, cfg: MicroWorldData) -> tuple[dict[str, Dataset], dict[str, dict], dict[str, Any]]:
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
        # RL prompts are draws from the task distribution: repeats are allowed (and counted); the
        # test split is distinct by construction.
        repeats = len(train) - len({(p.expression, p.language) for p in train})
        stats = {
            "train": {"read": len(train), "kept": len(train), "dropped": {}, "repeated_prompts": repeats},
            "test": {"read": len(test), "kept": len(test), "dropped": {}},
        }
        return splits, stats, corpus_stats(splits["corpus"])

    def splits(self, cfg: MicroWorldData) -> set[str]:
        return {"train", "test", "corpus"} | ({"general"} if cfg.n_general else set())

    def lexicon(self, cfg: dict) -> Lexicon:
        words, chars = list(microworld.ENGLISH_WORDS), microworld.CHINESE_CHARS + microworld.SYMBOLS
        if (cfg.get("tools") or {}).get("enabled"):
            return Lexicon(words + microworld.TOOL_WORDS, chars + microworld.TOOL_SYMBOLS, tools=True)
        return Lexicon(words, chars)

    def clean_trace(self, row: dict, rng: random.Random) -> str:
        problem = microworld.problem_from_expression(row["expression"], row["language"])
        return microworld.render_trace(problem, rng)

    def direct_answer(self, row: dict) -> str:
        return microworld.general_completion(row["answer"])

    def preference(self, row: dict, rng: random.Random) -> tuple[str, str, str]:
        task = microworld.GeneralTask(
            row["prompt"][-1]["content"], row["answer"], row["wrong"], row["language"], row["task"]
        )
        return microworld.preference_pair(task, rng)


WORLDS: dict[str, World] = {
    "microworld": MicroWorld(),
    **{kind: World(kind) for kind in ("problems", "gsm8k", "math", "reasoning_gym")},
}


def world_of(kind: str) -> World:
    """The world behind a data config's ``kind``."""
    if kind not in WORLDS:
        raise WorldError(f"no world for data kind {kind!r}; known: {sorted(WORLDS)}")
    return WORLDS[kind]


def world_for(task_data) -> World:
    """The world a task-data artifact (an ``ArtifactRef``) was built in, from its manifest."""
    return world_of(task_data.manifest()["config"]["kind"])


def _corpus_rows(cfg: microworld.WorldConfig, exclude: set[str]) -> dict[str, list]:
    """The pretraining corpus; with the world's tool on, ``messages`` holds the tool traces.

    A tool trace is a conversation with the calculator offered (JSON, "" for plain rows); its
    ``completion`` is the assistant text alone. Tool draws have their own stream, so the problems
    and the slips are the plain corpus's whatever the tool settings.
    """
    rng = random.Random(f"{cfg.seed}-corpus")
    drawn = microworld.generate_problems(rng, cfg, cfg.corpus.size, exclude)
    tools = cfg.tools if cfg.tools.enabled else None
    tool_rng = random.Random(f"{cfg.seed}-tools")
    completions, messages = [], []
    meter = progress.Meter(len(drawn), unit="corpus traces", interval=10.0, every=len(drawn))
    for i, p in enumerate(drawn, 1):
        meter.update(i)
        offered = tools is not None and tool_rng.random() < tools.corpus_share
        parts = microworld.trace_parts(p, rng, cfg.corpus, tools if offered else None, tool_rng)
        completions.append("".join(x for x in parts if isinstance(x, str)))
        messages.append(json.dumps(microworld.tool_conversation(p.prompt, parts)) if offered else "")
    rows = {
        "prompt": [p.prompt for p in drawn],
        "completion": completions,
        "answer": [str(p.answer) for p in drawn],
        "language": [p.language for p in drawn],
    }
    return rows | ({"messages": messages} if tools is not None else {})


def corpus_stats(corpus: Dataset) -> dict[str, float]:
    """How imperfect the corpus is: the base model's teacher, measured."""
    from r1.metrics import DEFAULT_SELF_CHECK
    from r1.rewards import accuracy_reward, format_reward, language_consistency_reward

    n = len(corpus)
    comps = corpus["completion"]
    acc = accuracy_reward(comps, corpus["answer"])
    fmt = format_reward(comps)
    lang = language_consistency_reward(comps, corpus["language"])
    check = re.compile(DEFAULT_SELF_CHECK)
    out = {
        "corpus_size": n,
        "corpus_correct_rate": sum(acc) / n,
        "corpus_format_rate": sum(fmt) / n,
        "corpus_single_language_rate": sum(v == 1.0 for v in lang) / n,
        "corpus_self_check_rate": sum(bool(check.search(c)) for c in comps) / n,
    }
    if "messages" in corpus.column_names:
        from r1.tools import episode_stats

        episodes = [episode_stats(json.loads(m)) for m in corpus["messages"] if m]
        out["corpus_tool_traces"] = len(episodes)
        out["corpus_tool_calls"] = sum(e["attempts"] for e in episodes)
        out["corpus_tool_results_used"] = sum(e["used"] for e in episodes) / max(1, out["corpus_tool_calls"])
    return out
