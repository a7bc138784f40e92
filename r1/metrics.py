"""Evaluation metrics over generated completions, R1's protocol.

Greedy accuracy alone hides what RL changes: R1 reports pass@1 as the mean correctness of k
samples at the evaluation temperature. Language mixing is also measured on samples (greedy
outputs rarely mix).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from statistics import mean

from r1.answers import answers_match, extract_answer
from r1.generation import Generated
from r1.language import language_share
from r1.rewards import is_well_formatted
from r1.tools import episode_stats

DEFAULT_SELF_CHECK = r"\b(wait|check|verify)\b|等等|检查"


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """The most common extracted answer (first seen wins ties); None when none was extracted."""
    found = [a for a in answers if a]
    if not found:
        return None
    counts = Counter(found)
    best = max(counts.values())
    return next(a for a in found if counts[a] == best)


def score_problem(
    gold: str, language: str | None, greedy: Generated, samples: Sequence[Generated], self_check: re.Pattern
) -> dict:
    """Per-problem record: greedy and sampled correctness, format, length, language, checks."""
    answers = [extract_answer(s.text) for s in samples]
    correct = [answers_match(gold, a) for a in answers]
    return {
        "greedy": greedy.text,
        "greedy_correct": answers_match(gold, extract_answer(greedy.text)),
        "greedy_format": is_well_formatted(greedy.text),
        "samples": [s.text for s in samples],
        "sample_correct": correct,
        "sample_format": [is_well_formatted(s.text) for s in samples],
        "sample_tokens": [s.num_tokens for s in samples],
        "sample_single_language": [
            language is None or language_share(s.text, language) == 1.0 for s in samples
        ],
        "sample_self_check": [bool(self_check.search(s.text)) for s in samples],
        "maj_correct": answers_match(gold, majority_answer(answers)),
        **tool_columns(samples),
    }


def tool_columns(samples: Sequence[Generated]) -> dict[str, list[int]]:
    """Per-sample tool calls (attempted, well formed, used) when the completions could call tools."""
    if not samples or samples[0].messages is None:
        return {}
    stats = [episode_stats(s.messages) for s in samples]
    return {f"sample_tool_{k}": [st[k] for st in stats] for k in ("attempts", "well_formed", "used")}


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean of per-problem values: ``sqrt(var / n)``.

    For a 0/1 value per problem (greedy accuracy, pass@k) this is the binomial standard error
    ``sqrt(p (1 - p) / n)``. Rates over k samples are averaged per problem first, since samples
    of one problem are not independent.
    """
    n = len(values)
    if n == 0:
        return 0.0
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / n / n)


def tool_rates(records: Sequence[dict]) -> dict[str, list[float]]:
    """Per-problem tool metrics: the share of samples that call, and calls per sample."""
    return {
        "tool_call_rate": [mean(a > 0 for a in r["sample_tool_attempts"]) for r in records],
        "calls_per_episode": [mean(r["sample_tool_attempts"]) for r in records],
    }


def pooled_tool_shares(records: Sequence[dict]) -> dict[str, float]:
    """Of all calls: the share well formed (parsed, ran); of those, the share whose result was used."""
    total = {k: sum(sum(r[f"sample_tool_{k}"]) for r in records) for k in ("attempts", "well_formed", "used")}
    return {
        "well_formed_call_rate": total["well_formed"] / total["attempts"] if total["attempts"] else 0.0,
        "used_call_rate": total["used"] / total["well_formed"] if total["well_formed"] else 0.0,
        "tool_calls": total["attempts"],
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator from ``n`` samples of which ``c`` are correct (Chen et al., 2021).

    ``1 - C(n - c, k) / C(n, k)``: the chance that k of the n samples, drawn without replacement,
    hold at least one correct one; computed as a product, as in the HumanEval code, so large n
    does not overflow. ``k = n`` is "any correct", ``k = 1`` the mean correctness.
    """
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples (n = {n})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def aggregate(records: Sequence[dict], pass_at: Sequence[int] = ()) -> dict[str, float]:
    """Dataset-level metrics from per-problem records, with each one's standard error in ``se``.

    ``pass_at`` adds ``pass@j`` for each j from the unbiased estimator over the k samples.
    """
    per_problem = {
        "accuracy": [float(r["greedy_correct"]) for r in records],
        "greedy_format_rate": [float(r["greedy_format"]) for r in records],
        "pass@1": [mean(r["sample_correct"]) for r in records],
        "pass@k": [float(any(r["sample_correct"])) for r in records],
        "maj@k": [float(r["maj_correct"]) for r in records],
        "format_rate": [mean(r["sample_format"]) for r in records],
        "mean_length": [mean(r["sample_tokens"]) for r in records],
        "lang_consistency": [mean(r["sample_single_language"]) for r in records],
        "self_check_rate": [mean(r["sample_self_check"]) for r in records],
    }
    for j in pass_at:
        per_problem[f"pass@{j}"] = [
            pass_at_k(len(r["sample_correct"]), sum(r["sample_correct"]), j) for r in records
        ]
    if records and "sample_tool_attempts" in records[0]:
        per_problem |= tool_rates(records)
    # statistics.mean of 0/1 values is an int when exact: a rate is a float either way
    out: dict = {name: float(mean(values)) for name, values in per_problem.items()}
    out["se"] = {name: standard_error(values) for name, values in per_problem.items()}
    if records and "sample_tool_attempts" in records[0]:
        out |= pooled_tool_shares(records)
    out["k"] = len(records[0]["samples"]) if records else 0
    out["n_problems"] = len(records)
    return out
