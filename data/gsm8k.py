"""GSM8K loader for real-model recipes: local JSONL files (or the hub id when online).

Rows come out in the same shape as the micro-world's: a conversational ``prompt`` with R1-Zero's
system prompt, the final numeric ``answer`` (after ``####``), and ``language``.
"""

from __future__ import annotations

import json
from pathlib import Path

R1_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and "
    "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
    "<answer> answer here </answer>."
)


class MalformedRowError(ValueError):
    """A dataset row that lacks a field or whose answer cannot be read; names the file and line."""


def final_answer(solution: str) -> str:
    """The number after ``####`` in a GSM8K solution, thousands separators removed."""
    if "####" not in solution:
        raise ValueError("no '####' final answer")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def load_jsonl(path: str | Path, limit: int | None = None) -> list[dict]:
    """GSM8K rows from a local JSONL file, each checked; a bad row raises naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GSM8K file not found: {path}")
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                question, answer = raw["question"], final_answer(raw["answer"])
            except (ValueError, KeyError, TypeError) as e:
                raise MalformedRowError(f"{path}:{lineno}: malformed GSM8K row ({e})") from e
            rows.append(
                {
                    "prompt": [
                        {"role": "system", "content": R1_SYSTEM_PROMPT},
                        {"role": "user", "content": question},
                    ],
                    "answer": answer,
                    "language": "en",
                }
            )
            if limit is not None and len(rows) >= limit:
                break
    return rows
