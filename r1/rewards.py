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

import difflib
import functools
import importlib
import inspect
import json
import logging
import math
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from r1.answers import DEFAULT_TIMEOUT_S, Deadline, answers_match, extract_answer
from r1.config import new_option
from r1.language import is_known_language, language_share
from r1.modes import obeys, switch_of, whole_answer
from r1.tools import episode_stats

log = logging.getLogger(__name__)

Completion = str | list[dict[str, Any]]
RewardFn = Callable[..., list[float | None]]

_TAG = re.compile(r"</?(?:think|answer)>")
_FORMAT_TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
DEFAULT_BATCH_TIMEOUT_S = 30.0


def _content_text(content: Any) -> str:
    """A message's content: a string, or a list of parts (``{"type": "text", "text": ...}``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p if isinstance(p, str) else str(p.get("text") or "") if isinstance(p, dict) else ""
            for p in content
        )
    return ""


def completion_text(completion: Completion | None) -> str:
    """The generated text of a completion given as a string or as chat messages ("" for None).

    Message contents may be strings or lists of parts, as multimodal chat formats write them;
    anything else counts as no text, so a malformed completion scores 0 instead of crashing a step.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if not isinstance(completion, list):
        return ""
    return "".join(
        _content_text(m.get("content"))
        for m in completion
        if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
    )


def is_well_formatted(text: str) -> bool:
    """Exactly one ``<think>...</think>`` then exactly one ``<answer>...</answer>``, nothing else.

    One linear scan over the tags (a backtracking regex over model output is quadratic): the first
    five tags are enough to tell, whatever the completion's length.
    """
    tags = []
    for m in _TAG.finditer(text):
        tags.append(m)
        if len(tags) > 4:
            return False
    if [m.group() for m in tags] != _FORMAT_TAGS:
        return False
    outside = (text[: tags[0].start()], text[tags[1].end() : tags[2].start()], text[tags[3].end() :])
    return not any(part.strip() for part in outside)


def accuracy_reward(
    completions: Sequence[Completion],
    answer: Sequence[str | None],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    batch_timeout_s: float | None = DEFAULT_BATCH_TIMEOUT_S,
    **_: Any,
) -> list[float | None]:
    """1.0 when the extracted answer is equivalent to the reference ``answer`` column, else 0.0.

    Rows without a reference (general prompts mixed into the final RL stage) get None, which
    TRL leaves out of the reward instead of counting it as wrong. Each check has ``timeout_s``
    and the whole batch ``batch_timeout_s``: answers left unchecked when it runs out count as
    wrong (with a warning), so hostile completions never stall a step for longer.
    """
    deadline = Deadline(batch_timeout_s)
    out = [
        None
        if gold is None or str(gold) == ""
        else float(answers_match(str(gold), extract_answer(completion_text(c)), timeout_s, deadline))
        for c, gold in zip(completions, answer, strict=True)
    ]
    if deadline.unchecked:
        log.warning(
            "accuracy: %d of %d answers were not checked in time (limit %.1fs each, %ss per batch); "
            "counted as wrong",
            deadline.unchecked,
            len(out),
            timeout_s,
            batch_timeout_s,
        )
    return out


def format_reward(
    completions: Sequence[Completion],
    prompts: Sequence[Any] | None = None,
    think_prefilled: bool = False,
    **_: Any,
) -> list[float]:
    """1.0 for ``<think>...</think>`` followed by ``<answer>...</answer>``, else 0.0.

    When the chat template pre-fills ``<think>`` (``think_prefilled``, or a string prompt that ends
    in it) or an empty think block (a ``/no_think`` prompt), the completion starts after it; the
    pre-fill is put back before checking, or a naive check would score every completion 0.
    """
    prompts = prompts if prompts is not None else [None] * len(completions)
    out = []
    for c, p in zip(completions, prompts, strict=True):
        text = completion_text(c)
        if think_prefilled and not text.lstrip().startswith("<think>"):
            text = "<think>" + text
        out.append(float(is_well_formatted(whole_answer(p, text))))
    return out


def thinking_mode_reward(
    completions: Sequence[Completion], prompts: Sequence[Any] | None = None, **_: Any
) -> list[float | None]:
    """1.0 when the completion obeys its prompt's ``/think`` or ``/no_think`` switch, else 0.0.

    Qwen3's fusion RL rewards following the requested mode: thinking is a closed, non-empty think
    block; not thinking is an empty one and then the answer. Prompts without a switch get None
    (nothing was requested), so the reward can run over mixed batches.
    """
    prompts = prompts if prompts is not None else [None] * len(completions)
    out: list[float | None] = []
    for c, p in zip(completions, prompts, strict=True):
        mode = switch_of(p)
        out.append(None if mode is None else float(obeys(mode, whole_answer(p, completion_text(c)))))
    return out


def language_consistency_reward(
    completions: Sequence[Completion],
    language: Sequence[str | None],
    latin_languages: Sequence[str] = ("en",),
    prompts: Sequence[Any] | None = None,
    **_: Any,
) -> list[float | None]:
    """Share of chain-of-thought words in the row's target ``language`` (R1's stage-2 reward).

    A row without a language gets None (TRL leaves it out); a language code this reward cannot
    label scores 0.0 with a warning, never an exception in the middle of training. The chain is
    read with the prompt's pre-filled think block put back (a ``/no_think`` answer has none).
    """
    latin = tuple(latin_languages)
    prompts = prompts if prompts is not None else [None] * len(completions)
    out: list[float | None] = []
    for c, lang, p in zip(completions, language, prompts, strict=True):
        if lang is None:
            out.append(None)
        elif not is_known_language(lang):
            log.warning("language_consistency: unknown language code %r; scored 0", lang)
            out.append(0.0)
        else:
            out.append(language_share(whole_answer(p, completion_text(c)), lang, latin))
    return out


def _check_language_kwargs(kwargs: dict[str, Any]) -> None:
    """Recipe-load check of ``latin_languages`` (lingua would otherwise fail mid-training)."""
    codes = kwargs.get("latin_languages", ("en",))
    if isinstance(codes, str) or not all(isinstance(c, str) for c in codes):
        raise ValueError(f"latin_languages must be a list of language codes, got {codes!r}")
    unknown = [c for c in codes if not is_known_language(c)]
    if unknown:
        raise ValueError(f"latin_languages: unknown language codes {unknown} (ISO 639-1, e.g. en, fr, de)")


language_consistency_reward.check_kwargs = _check_language_kwargs  # type: ignore[attr-defined]


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


def _group_key(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def kimi_length_reward(
    completions: Sequence[Completion],
    answer: Sequence[str | None],
    prompts: Sequence[Any] | None = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    trainer_state: Any = None,
    warmup_steps: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **_: Any,
) -> list[float | None]:
    """Kimi k1.5's length reward: within each prompt's group, shorter correct answers earn more.

    ``lambda = 0.5 - (len - min_len) / (max_len - min_len)`` over the group's completions; a
    correct completion gets ``lambda``, a wrong one ``min(0, lambda)`` (long wrong answers are
    penalised, short ones not rewarded). A group whose lengths are all equal gets 0. Lengths are
    tokens when the trainer passes ``completion_ids`` (TRL does), else characters. Before
    ``warmup_steps`` training steps it scores 0: Kimi adds it after a warm-up, as it slows early
    training. Rows without a reference answer get None.
    """
    n = len(completions)
    if trainer_state is not None and getattr(trainer_state, "global_step", 0) < warmup_steps:
        return [0.0] * n
    lengths = (
        [len(ids) for ids in completion_ids]
        if completion_ids is not None
        else [len(completion_text(c)) for c in completions]
    )
    correct = accuracy_reward(completions, answer, timeout_s=timeout_s)
    groups: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts if prompts is not None else [None] * n):
        groups.setdefault(_group_key(prompt), []).append(i)
    out: list[float | None] = [None] * n
    for rows in groups.values():
        lo, hi = min(lengths[i] for i in rows), max(lengths[i] for i in rows)
        for i in rows:
            lam = 0.5 - (lengths[i] - lo) / (hi - lo) if hi > lo else 0.0
            out[i] = None if correct[i] is None else lam if correct[i] == 1.0 else min(0.0, lam)
    return out


def tool_format_reward(completions: Sequence[Completion], **_: Any) -> list[float | None]:
    """Share of an episode's tool calls that were well formed and ran (None without a call).

    Agent RL's format reward: a call with broken JSON, an unknown tool or arguments the tool
    rejects scores 0 for that call. Episodes that call nothing are left out.
    """
    out: list[float | None] = []
    for c in completions:
        s = episode_stats(c)
        out.append(s["well_formed"] / s["attempts"] if s["attempts"] else None)
    return out


def tool_use_reward(completions: Sequence[Completion], **_: Any) -> list[float | None]:
    """Share of an episode's well-formed calls whose result the next step goes on from.

    Calling and then ignoring the answer is the habit to unlearn: a call counts when the next
    assistant turn starts from the tool's value. Episodes without a working call get None.
    """
    out: list[float | None] = []
    for c in completions:
        s = episode_stats(c)
        out.append(s["used"] / s["well_formed"] if s["well_formed"] else None)
    return out


REGISTRY: dict[str, RewardFn] = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "language_consistency": language_consistency_reward,
    "preference": preference_reward,
    "kimi_length": kimi_length_reward,
    "thinking_mode": thinking_mode_reward,
    "tool_format": tool_format_reward,
    "tool_use": tool_use_reward,
}
# Rewards made by a factory from the spec's kwargs (TRL's are callables built per configuration).
FACTORIES: dict[str, str] = {
    "soft_overlong": "trl.rewards:get_soft_overlong_punishment",  # DAPO's soft overlong punishment
    "cosine_scaled": "trl.rewards:get_cosine_scaled_reward",
}


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator that adds a reward to the registry under ``name`` (for user extensions)."""

    def deco(fn: RewardFn) -> RewardFn:
        REGISTRY[name] = fn
        return fn

    return deco


ALLOW_MODULES_ENV = "R1_ALLOW_REWARD_MODULES"


def allowed_reward_modules() -> tuple[str, ...] | None:
    """Modules a deployment lets ``module:function`` rewards import (None: any, ``*`` in the env).

    Set by the operator of a work pool (``R1_ALLOW_REWARD_MODULES=my_rewards,tests.helpers``): a
    deployment's parameters come from whoever can start a run, and a reward import runs code.
    """
    raw = os.environ.get(ALLOW_MODULES_ENV, "")
    if raw.strip() == "*":
        return None
    return tuple(m.strip() for m in raw.split(",") if m.strip())


def _allowed(module: str, allow: tuple[str, ...] | None) -> bool:
    return allow is None or any(module == m or module.startswith(m + ".") for m in allow)


def lookup_reward(name: str, allow_modules: tuple[str, ...] | None = None) -> RewardFn:
    """A registry name, or ``package.module:function`` for a user's own reward.

    The import form works where the registry cannot: in the ranks ``accelerate launch`` starts,
    which import the recipe's rewards afresh. Importing runs the module's code: a recipe that
    names one is code, and ``allow_modules`` (a deployment's allow-list) limits what it may import.
    """
    if ":" in name:
        module, attr = name.split(":", 1)
        if not _allowed(module, allow_modules):
            raise KeyError(
                f"reward {name!r} imports {module!r}, which this deployment does not allow "
                f"(the operator may allow it: {ALLOW_MODULES_ENV}={module})"
            )
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise KeyError(f"reward {name!r} cannot be imported: {e}") from e
        if not callable(fn):
            raise KeyError(f"reward {name!r} is not callable")
        return fn
    if name in FACTORIES:
        return lookup_reward(FACTORIES[name])
    if name not in REGISTRY:
        known = [*REGISTRY, *FACTORIES]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise KeyError(f"unknown reward {name!r}{hint}; known: {sorted(known)} or module:function")
    return REGISTRY[name]


def is_factory(spec: RewardSpec) -> bool:
    """Whether the spec names a factory: its kwargs build the reward, which then takes none."""
    return spec.factory or spec.name in FACTORIES


def reward_parameters(fn: RewardFn, factory: bool = False) -> list[str]:
    """The named parameters a recipe may bind (a reward's, but ``completions``; a factory's, all)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check against
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in kinds and (factory or p.name != "completions")]


def check_reward_kwargs(name: str, fn: RewardFn, kwargs: dict[str, Any], factory: bool = False) -> None:
    """Raise ``ValueError`` for a keyword the reward (or its factory) does not take, or one it needs."""
    known = reward_parameters(fn, factory)
    for key in kwargs:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            what = "reward factory" if factory else "reward"
            raise ValueError(f"{what} {name!r} takes no argument {key!r}{hint}; it takes {known}")
    if factory:
        try:
            inspect.signature(fn).bind(**kwargs)
        except TypeError as e:
            raise ValueError(f"reward factory {name!r}: {e}") from None
    check = getattr(fn, "check_kwargs", None)
    if check is not None:
        check(kwargs)


class RewardSpec(BaseModel):
    """One reward in a recipe: registry name, weight and keyword arguments together.

    The name is resolved and the arguments bound against the function's signature when the
    recipe loads, so a typo fails before any stage runs.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    weight: float = 1.0
    kwargs: dict[str, Any] = Field(default_factory=dict)
    on_nonfinite: Literal["error", "zero"] = Field(
        "error",
        description="a NaN or infinite score: stop the step naming the reward, or count it and use 0",
        **new_option(),
    )
    factory: bool = Field(
        False,
        description="module:function is a factory: kwargs build the reward (registry factories know it)",
        **new_option(),
    )

    @field_validator("name")
    @classmethod
    def _resolve(cls, name: str, info: ValidationInfo) -> str:
        try:
            lookup_reward(name, _allow_from(info))
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        return name

    @model_validator(mode="after")
    def _bind(self, info: ValidationInfo) -> RewardSpec:
        check_reward_kwargs(
            self.name, lookup_reward(self.name, _allow_from(info)), self.kwargs, is_factory(self)
        )
        return self


def _allow_from(info: ValidationInfo) -> tuple[str, ...] | None:
    context = info.context or {}
    return context.get("allow_reward_modules") if isinstance(context, dict) else None


class RewardError(RuntimeError):
    """A reward function failed or returned a bad score; the message names the reward."""


def _checked_scores(spec: RewardSpec, scores: Any, n: int, stats: dict[str, int]) -> list[float | None]:
    """The reward's scores, one per completion, each None or finite (NaN/inf: error or 0, counted)."""
    if not isinstance(scores, list | tuple) or len(scores) != n:
        got = len(scores) if isinstance(scores, list | tuple) else type(scores).__name__
        raise RewardError(f"reward {spec.name!r} returned {got} scores for {n} completions")
    out: list[float | None] = []
    for s in scores:
        if s is None:
            out.append(None)
            continue
        try:
            value = float(s)
        except (TypeError, ValueError):
            raise RewardError(f"reward {spec.name!r} returned a non-number {s!r}") from None
        if not math.isfinite(value):
            if spec.on_nonfinite == "error":
                raise RewardError(
                    f"reward {spec.name!r} returned {value} (set on_nonfinite: zero to count such "
                    "scores and train on 0 instead)"
                )
            stats["nonfinite"] += 1
            log.warning("reward %r returned %s; scored 0 (%d so far)", spec.name, value, stats["nonfinite"])
            value = 0.0
        out.append(value)
    return out


def build_reward(spec: RewardSpec, context: dict[str, Any] | None = None) -> RewardFn:
    """The registry function bound to the spec's kwargs, named after the spec for TRL's logs.

    Exceptions are re-raised as :class:`RewardError` naming the reward, so a broken reward stops
    the stage with a clear message (its checkpoints are kept and a rerun resumes); so are scores
    that are not one finite number (or None) per completion. ``reward.stats["nonfinite"]`` counts
    the NaN/inf scores replaced by 0 under ``on_nonfinite: zero``.
    """
    fn = lookup_reward(spec.name)
    bound = spec.kwargs
    if is_factory(spec):  # the factory takes the spec's kwargs; the reward it makes takes none
        fn, bound = fn(**spec.kwargs), {}
    extra = context or {}
    stats = {"nonfinite": 0}

    @functools.wraps(fn)
    def reward(completions, **columns):
        try:
            scores = fn(completions=completions, **{**columns, **extra, **bound})
        except Exception as e:
            sample = completion_text(completions[0])[:120] if completions else ""
            raise RewardError(
                f"reward {spec.name!r} raised {type(e).__name__}: {e} (first completion: {sample!r})"
            ) from e
        return _checked_scores(spec, scores, len(completions), stats)

    reward.__name__ = spec.name.rsplit(":", 1)[-1]
    reward.stats = stats  # type: ignore[attr-defined]
    return reward


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
