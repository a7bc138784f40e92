"""Reward functions in TRL's convention, and the registry that recipes name.

Every reward is ``fn(completions, **dataset_columns) -> list[float]``; completions are strings or
chat-message lists (conversational data), so the same functions serve TRL's GRPOTrainer, the
evaluate stage and the data filters. A recipe lists rewards with weights and keyword arguments
side by side::

    rewards:
      - {name: accuracy, weight: 1.0}
      - {name: format, weight: 0.1}
      - {name: language_consistency, weight: 0.5, kwargs: {latin_languages: [en]}}
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from r1.answers import DEFAULT_TIMEOUT_S, answers_match, extract_answer
from r1.language import language_share

Completion = str | list[dict[str, Any]]
RewardFn = Callable[..., list[float | None]]

_FORMAT = re.compile(r"^\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*$", re.DOTALL)
_TAG = re.compile(r"</?(think|answer)>")


def completion_text(completion: Completion) -> str:
    """The generated text of a completion given as a string or as chat messages."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant")


def _prompt_prefills_think(prompt: Any) -> bool:
    """A prompt string that ends in ``<think>`` (some chat templates pre-fill it)."""
    return isinstance(prompt, str) and prompt.rstrip().endswith("<think>")


def is_well_formatted(text: str) -> bool:
    """Exactly one ``<think>...</think>`` then exactly one ``<answer>...</answer>``, nothing else."""
    m = _FORMAT.match(text)
    if not m:
        return False
    return len(_TAG.findall(text)) == 4


def accuracy_reward(
    completions: Sequence[Completion],
    answer: Sequence[str | None],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **_: Any,
) -> list[float | None]:
    """1.0 when the extracted answer is equivalent to the reference ``answer`` column, else 0.0.

    Rows without a reference (general prompts mixed into the final RL stage) get None, which
    TRL leaves out of the reward instead of counting it as wrong.
    """
    return [
        None
        if gold is None or str(gold) == ""
        else float(answers_match(str(gold), extract_answer(completion_text(c)), timeout_s))
        for c, gold in zip(completions, answer, strict=True)
    ]


def format_reward(
    completions: Sequence[Completion],
    prompts: Sequence[Any] | None = None,
    think_prefilled: bool = False,
    **_: Any,
) -> list[float]:
    """1.0 for ``<think>...</think>`` followed by ``<answer>...</answer>``, else 0.0.

    When the chat template pre-fills ``<think>`` (``think_prefilled``, or a string prompt that ends
    in it), the completion starts inside the think block; the tag is put back before checking,
    or a naive check would score every completion 0.
    """
    prompts = prompts if prompts is not None else [None] * len(completions)
    out = []
    for c, p in zip(completions, prompts, strict=True):
        text = completion_text(c)
        if (think_prefilled or _prompt_prefills_think(p)) and not text.lstrip().startswith("<think>"):
            text = "<think>" + text
        out.append(float(is_well_formatted(text)))
    return out


def language_consistency_reward(
    completions: Sequence[Completion],
    language: Sequence[str],
    latin_languages: Sequence[str] = ("en",),
    **_: Any,
) -> list[float]:
    """Share of chain-of-thought words in the row's target ``language`` (R1's stage-2 reward)."""
    latin = tuple(latin_languages)
    return [
        language_share(completion_text(c), lang, latin) for c, lang in zip(completions, language, strict=True)
    ]


def summary_of(text: str) -> str:
    """The final summary: the text after the last ``</think>`` (all of it when there is none)."""
    return text.rsplit("</think>", 1)[1].strip() if "</think>" in text else text.strip()


class RewardModelScorer:
    """A sequence-classification reward model scoring (prompt, response) pairs; one instance per path."""

    _loaded: dict[str, RewardModelScorer] = {}

    def __init__(self, model, tokenizer, batch_size: int = 64) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "right"  # the head reads the last non-pad token
        self.batch_size = batch_size

    @classmethod
    def load(cls, path) -> RewardModelScorer:
        key = str(path)
        if key not in cls._loaded:
            from transformers import AutoModelForSequenceClassification

            from r1.models import load_tokenizer

            cls._loaded[key] = cls(
                AutoModelForSequenceClassification.from_pretrained(key), load_tokenizer(key)
            )
        return cls._loaded[key]

    def score(self, prompts: Sequence[Any], responses: Sequence[str]) -> list[float]:
        import torch

        texts = [
            self.tokenizer.apply_chat_template(
                [
                    *([{"role": "user", "content": p}] if isinstance(p, str) else list(p)),
                    {"role": "assistant", "content": r},
                ],
                tokenize=False,
            )
            for p, r in zip(prompts, responses, strict=True)
        ]
        out: list[float] = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                texts[i : i + self.batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            )
            with torch.inference_mode():
                out += self.model(**enc.to(self.model.device)).logits[:, 0].float().tolist()
        return out


def preference_reward(
    completions: Sequence[Completion],
    prompts: Sequence[Any],
    reward_model_path: str | None = None,
    kind: Sequence[str] | None = None,
    only_kind: str | None = "general",
    **_: Any,
) -> list[float | None]:
    """The reward model's score (sigmoid, 0..1) of each final summary; None outside ``only_kind`` rows.

    R1 scores only the summary after ``</think>`` with its helpfulness model, and applies it to
    general prompts while reasoning prompts keep their rule rewards.
    """
    if reward_model_path is None:
        raise ValueError("preference_reward needs reward_model_path (the reward model artifact)")
    import math

    kinds = list(kind) if kind is not None else [only_kind] * len(completions)
    idx = [i for i, k in enumerate(kinds) if only_kind is None or k == only_kind]
    out: list[float | None] = [None] * len(completions)
    if idx:
        scorer = RewardModelScorer.load(reward_model_path)
        scores = scorer.score(
            [prompts[i] for i in idx], [summary_of(completion_text(completions[i])) for i in idx]
        )
        for i, s in zip(idx, scores, strict=True):
            out[i] = 1.0 / (1.0 + math.exp(-s))
    return out


REGISTRY: dict[str, RewardFn] = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "language_consistency": language_consistency_reward,
    "preference": preference_reward,
}


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator that adds a reward to the registry under ``name`` (for user extensions)."""

    def deco(fn: RewardFn) -> RewardFn:
        REGISTRY[name] = fn
        return fn

    return deco


class RewardSpec(BaseModel):
    """One reward in a recipe: registry name, weight and keyword arguments together."""

    model_config = ConfigDict(extra="forbid")

    name: str
    weight: float = 1.0
    kwargs: dict[str, Any] = Field(default_factory=dict)


class RewardError(RuntimeError):
    """A reward function raised; the message names the reward and an offending completion."""


def build_reward(spec: RewardSpec, context: dict[str, Any] | None = None) -> RewardFn:
    """The registry function bound to the spec's kwargs, named after the spec for TRL's logs.

    Exceptions are re-raised as :class:`RewardError` naming the reward, so a broken reward stops
    the stage with a clear message (its checkpoints are kept and a rerun resumes).
    """
    fn = lookup_reward(spec.name)

    @functools.wraps(fn)
    def reward(completions, **columns):
        try:
            return fn(completions, **{**columns, **(context or {}), **spec.kwargs})
        except Exception as e:
            sample = completion_text(completions[0])[:120] if completions else ""
            raise RewardError(
                f"reward {spec.name!r} raised {type(e).__name__}: {e} (first completion: {sample!r})"
            ) from e

    reward.__name__ = spec.name.rsplit(":", 1)[-1]
    return reward


def lookup_reward(name: str) -> RewardFn:
    """A registry name, or ``package.module:function`` for a user's own reward.

    The import form works where the registry cannot: in the ranks ``accelerate launch`` starts,
    which import the recipe's rewards afresh.
    """
    if ":" in name:
        module, attr = name.split(":", 1)
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise KeyError(f"reward {name!r} cannot be imported: {e}") from e
    if name not in REGISTRY:
        raise KeyError(f"unknown reward {name!r}; known: {sorted(REGISTRY)} or module:function")
    return REGISTRY[name]


def build_rewards(
    specs: Sequence[RewardSpec], context: dict[str, Any] | None = None
) -> tuple[list[RewardFn], list[float]]:
    """Reward functions and weights for TRL's ``reward_funcs`` / ``reward_weights``.

    ``context`` holds run-time arguments a stage supplies to every reward (e.g. the path of the
    reward-model artifact); a reward that does not use one ignores it.
    """
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"a reward is listed twice: {names}")
    return [build_reward(s, context) for s in specs], [s.weight for s in specs]
