"""Thinking modes (Qwen3's thinking-mode fusion): one model that reasons or answers directly.

A prompt asks for a mode with a switch in a user turn: ``/think`` or ``/no_think``, the last
one in the conversation winning (``with_mode`` puts it at the front of the last user turn), thinking when there is none (Qwen3's convention). A
non-thinking answer is an empty think block and then the answer; chat templates that know the
modes pre-fill that empty block in the generation prompt, so a completion may start after it.
These helpers are pure functions over prompts and texts, shared by the template, the fusion data,
the rewards and the evaluation, so every place agrees on what "obeys the mode" means.
"""

from __future__ import annotations

import re
from typing import Any, Literal

Mode = Literal["think", "no_think"]
MODES: tuple[Mode, ...] = ("think", "no_think")
THINK_SWITCH, NO_THINK_SWITCH = "/think", "/no_think"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THINK = THINK_OPEN + THINK_CLOSE
_SWITCH_WORD = re.compile(r"(?<!\S)/(?:no_think|think)(?!\S) ?")


def _user_turns(prompt: Any) -> list[str]:
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list):
        return []
    return [str(m.get("content") or "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]


def _switch_in(text: str) -> Mode | None:
    """The last switch in one text (``/no_think`` contains no ``/think``, so rfind tells them apart)."""
    a, b = text.rfind(THINK_SWITCH), text.rfind(NO_THINK_SWITCH)
    return "think" if a > b else "no_think" if b > a else None


def switch_of(prompt: Any) -> Mode | None:
    """The mode the prompt's last switch asks for; None when no user turn carries one."""
    mode = None
    for text in _user_turns(prompt):
        mode = _switch_in(text) or mode
    return mode


def requested_mode(prompt: Any) -> Mode:
    """The mode a prompt asks for: its last switch, thinking when it has none."""
    return switch_of(prompt) or "think"


def with_mode(prompt: Any, mode: Mode) -> Any:
    """The prompt with ``mode``'s switch opening its last user turn (chat messages or a string).

    Any place in the turn counts (the last switch of the conversation wins); the front is where
    a small model notices it least: its reading of the problem is anchored at the end of the
    prompt, and a token after the question moves every operand (appended, the micro-world's
    rejection-SFT model fell from 0.80 to 0.19 greedy accuracy before any fusion training;
    prepended, to 0.42). A switch the turn already holds is replaced, so the newest request is the one that counts.
    """
    switch = THINK_SWITCH if mode == "think" else NO_THINK_SWITCH
    if isinstance(prompt, str):
        return f"{switch} {_SWITCH_WORD.sub('', prompt)}"
    messages = [dict(m) for m in prompt]
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[last]["content"] = f"{switch} {_SWITCH_WORD.sub('', messages[last]['content'])}"
    return messages


def prefilled_think(rendered_prompt: str) -> str:
    """The part of a think block a rendered generation prompt already holds ("" when none).

    Templates pre-fill ``<think>`` (R1's) or an empty ``<think></think>`` (non-thinking mode);
    the completion continues after it, so checks on the whole answer put it back first.
    """
    tail = rendered_prompt.rstrip()
    if tail.endswith(THINK_CLOSE) and THINK_OPEN in tail:
        return tail[tail.rfind(THINK_OPEN) :]
    return THINK_OPEN if tail.endswith(THINK_OPEN) else ""


def think_content(text: str) -> str | None:
    """What the first think block of a whole answer holds; None when it has no closed block first."""
    stripped = text.lstrip()
    if not stripped.startswith(THINK_OPEN):
        return None
    end = stripped.find(THINK_CLOSE)
    return None if end < 0 else stripped[len(THINK_OPEN) : end]


def obeys(mode: Mode, text: str) -> bool:
    """Whether a whole answer (pre-fill included) is in ``mode``.

    Thinking: it opens with a closed, non-empty think block. Non-thinking: an empty think block
    and no other thinking after it.
    """
    content = think_content(text)
    if content is None:
        return False
    if mode == "think":
        return bool(content.strip())
    return not content.strip() and text.count(THINK_OPEN) == 1


def whole_answer(prompt: Any, text: str) -> str:
    """A completion with the think block its prompt pre-fills put back in front.

    A rendered string prompt says what it pre-filled; a chat prompt that asks for ``/no_think``
    is pre-filled with an empty think block by a template that knows the modes. A completion
    that opens its own think block is left as it is.
    """
    if text.lstrip().startswith(THINK_OPEN):
        return text
    if isinstance(prompt, str):
        return prefilled_think(prompt) + text
    return (EMPTY_THINK + text) if switch_of(prompt) == "no_think" else text
