"""Thinking-mode fusion data (Qwen3's stage 3): one set that teaches both modes on request.

From the rejection-sampled SFT set (verified reasoning traces and non-reasoning answers with an
empty think block) this stage writes, per reasoning row, the thinking example (the trace) and,
for ``no_think_share`` of them, a non-thinking example of the same prompt: the final answer after
an empty think block, the way the fusion chat template pre-fills it, always marked ``/no_think``.
Non-reasoning rows are non-thinking examples. ``switch_share`` of the other examples carry an
explicit ``/think`` or ``/no_think`` at the start of the user turn; unmarked reasoning rows teach
that thinking is the default. Every row records its ``mode`` and whether it carries a switch; ``stats.json`` counts them.
"""

from __future__ import annotations

import json
import random

from pydantic import Field

from r1.answers import extract_answer
from r1.config import Section
from r1.modes import EMPTY_THINK, Mode, obeys, with_mode
from r1.rewards import completion_text
from r1.stage import Stage, StageContext


class FusionDataConfig(Section):
    no_think_share: float = Field(
        0.5, ge=0, le=1, description="reasoning prompts that also get a direct answer"
    )
    switch_share: float = Field(0.8, ge=0, le=1, description="examples whose user turn carries the switch")
    seed: int = 0


def fusion_rows(rows: list[dict], cfg: FusionDataConfig) -> list[dict]:
    """Both modes' examples from a curated SFT set's rows (see the module docstring)."""
    rng = random.Random(f"{cfg.seed}-fusion")
    out = []

    def add(row: dict, mode: Mode, completion: str, always_switch: bool = False) -> None:
        switched = always_switch or rng.random() < cfg.switch_share
        out.append(
            {
                "prompt": with_mode(row["prompt"], mode) if switched else row["prompt"],
                "completion": [{"role": "assistant", "content": completion}],
                "mode": mode,
                "switched": switched,
                "kind": row.get("kind", "reasoning"),
                "language": row.get("language", "en"),
            }
        )

    for row in rows:
        text = completion_text(row["completion"])
        if row.get("kind") == "general" or obeys("no_think", text):
            add(row, "no_think", text)  # R1's non-reasoning data: direct answers, switch or not
            continue
        add(row, "think", text)  # unmarked reasoning prompts teach that thinking is the default
        answer = extract_answer(text)
        if answer is not None and rng.random() < cfg.no_think_share:
            # the same prompt answered directly: it must say so, or it would contradict the default
            add(row, "no_think", f"{EMPTY_THINK}<answer>{answer}</answer>", always_switch=True)
    rng.shuffle(out)
    return out


def build_fusion_data(ctx: StageContext) -> None:
    from datasets import Dataset

    cfg: FusionDataConfig = ctx.config
    rows = fusion_rows([dict(r) for r in ctx.inputs["sft"].dataset()], cfg)
    if not rows:
        raise ValueError(f"[{ctx.label}] the SFT set {ctx.inputs['sft'].key} is empty")
    Dataset.from_list(rows).save_to_disk(str(ctx.out_dir))
    stats = {
        "rows": len(rows),
        "think": sum(r["mode"] == "think" for r in rows),
        "no_think": sum(r["mode"] == "no_think" for r in rows),
        "switched": sum(r["switched"] for r in rows),
    }
    (ctx.out_dir / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    ctx.metrics.update(stats)
    print(f"[{ctx.label}] {stats}", flush=True)


STAGE = Stage(name="fusion_data", version="2", fn=build_fusion_data, config=FusionDataConfig, inputs=("sft",))
