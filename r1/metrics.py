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
    }


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


def aggregate(records: Sequence[dict]) -> dict[str, float]:
    """Dataset-level metrics from per-problem records, with each one's standard error in ``se``."""
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
    out: dict = {name: mean(values) for name, values in per_problem.items()}
    out["se"] = {name: standard_error(values) for name, values in per_problem.items()}
    out["k"] = len(records[0]["samples"]) if records else 0
    out["n_problems"] = len(records)
    return out
