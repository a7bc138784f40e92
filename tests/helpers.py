"""Importable test helpers: the ranks `accelerate launch` starts import rewards by module path."""

from __future__ import annotations

from r1.rewards import completion_text


def brevity_reward(completions, **kwargs) -> list[float]:
    """Shorter is better: a reward that varies within every group, so GRPO always has a signal."""
    return [-len(completion_text(c)) / 50 for c in completions]
