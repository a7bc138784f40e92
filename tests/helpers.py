"""Importable test helpers: the ranks `accelerate launch` starts import rewards by module path."""

from __future__ import annotations

from r1.rewards import completion_text


def brevity_reward(completions, **kwargs) -> list[float]:
    """Shorter is better: a reward that varies within every group, so GRPO always has a signal."""
    return [-len(completion_text(c)) / 50 for c in completions]


def zh_flat_reward(completions, language, **kwargs) -> list[float]:
    """Constant on Chinese prompts (their groups carry no advantage), shorter-is-better on English ones."""
    return [
        1.0 if lang == "zh" else -len(completion_text(c)) / 50
        for c, lang in zip(completions, language, strict=True)
    ]
