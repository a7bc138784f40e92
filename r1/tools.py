"""Tools a policy may call during a rollout, and what an episode's calls say about their use.

The micro-world's tool is a calculator for the +/- chains its problems are made of. A call is a
JSON object in the chat template's tool format, ``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>``, ending the assistant turn; the result comes back as a ``tool`` message and the
model continues. TRL's GRPOTrainer runs that loop in training (``tools=``), the evaluation's
generation runs the same loop offline (:class:`r1.generation.ToolLoop`), and both hand the
rewards the same thing: the completion as chat messages (assistant turns with ``tool_calls``,
tool turns with results). The episode statistics below read those messages, so the rewards and
the report's tool metrics are one implementation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_EXPRESSION = re.compile(r"^\s*-?\d{1,12}(\s*[+-]\s*\d{1,12}){0,8}\s*$")
_NUMBER = re.compile(r"-?\d+")


def calculator(expression: str) -> str:
    """Evaluate a chain of integer additions and subtractions, such as ``47+8-15``.

    Args:
        expression: integers joined by + and -, at most nine of them.
    """
    if not isinstance(expression, str) or not _EXPRESSION.match(expression):
        raise ValueError(f"calculator takes integers joined by + and -, got {expression!r}")
    return str(sum(int(term) for term in re.findall(r"[+-]?\d+", expression.replace(" ", ""))))


TOOLS: dict[str, Callable[..., str]] = {"calculator": calculator}


def tools_named(names: Sequence[str]) -> list[Callable[..., str]]:
    """The tool functions a recipe names; an unknown name fails with the known ones."""
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise ValueError(f"unknown tools {unknown}; known: {sorted(TOOLS)}")
    return [TOOLS[n] for n in names]


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as the model writes it (compact JSON between the tool tags)."""
    body = json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"), ensure_ascii=False)
    return f"{TOOL_OPEN}{body}{TOOL_CLOSE}"


def _messages(completion: Any) -> list[dict]:
    if isinstance(completion, dict):
        return [completion]
    return [m for m in completion if isinstance(m, dict)] if isinstance(completion, list) else []


def _is_error(content: Any) -> bool:
    return (
        isinstance(content, dict)
        and "error" in content
        or (isinstance(content, str) and content.lstrip().startswith("{") and "error" in content)
    )


def episode_stats(completion: Any) -> dict[str, int]:
    """Calls in one episode (a completion as chat messages): made, well formed, and used.

    ``attempts`` counts parsed calls plus tool tags left unparsed in the text (malformed JSON, an
    unclosed call). ``well_formed`` calls parsed and their tool ran without an error. ``used``
    calls were well formed and the next assistant turn's first number is the tool's result: the
    chain went on from the value it asked for instead of ignoring it.
    """
    msgs = _messages(completion)
    attempts = well_formed = used = 0
    for i, m in enumerate(msgs):
        role = m.get("role", "assistant")
        if role == "assistant":
            content = m.get("content") or ""
            attempts += len(m.get("tool_calls") or []) + (
                content.count(TOOL_OPEN) if isinstance(content, str) else 0
            )
        elif role == "tool":
            content = m.get("content")
            if _is_error(content):
                continue
            well_formed += 1
            after = next((n for n in msgs[i + 1 :] if n.get("role", "assistant") == "assistant"), None)
            first = _NUMBER.search(str((after or {}).get("content") or ""))
            used += bool(first and first.group() == str(content).strip())
    return {"attempts": attempts, "well_formed": well_formed, "used": used}
