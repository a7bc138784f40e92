"""Report stage: the R1 paper's table for this run, plus training curves.

Inputs are named ``eval/<stage>`` (evaluate artifacts, one per model, in pipeline order),
``train/<stage>`` (trainer artifacts whose ``train_log.jsonl`` gives the curves) and
``extra/<name>`` (any artifact: its manifest metrics, under ``<name>``). Writes
``report.json`` (``{"stages": {<stage>: metrics}, "training": ..., "extra": ...}``), ``report.md``
and PNG plots.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from r1.config import Section
from r1.runner import Stage, StageContext
from r1.training import read_log_history

COLUMNS = (
    ("accuracy", "accuracy (greedy)"),
    ("pass@1", "pass@1"),
    ("pass@k", "pass@k"),
    ("maj@k", "maj@k"),
    ("format_rate", "format"),
    ("lang_consistency", "lang consistency"),
    ("self_check_rate", "self-check"),
    ("mean_length", "mean length"),
)
CURVES = (
    ("reward", "reward"),
    ("rewards/accuracy/mean", "accuracy reward"),
    ("rewards/format/mean", "format reward"),
    ("rewards/language_consistency/mean", "language reward"),
    ("completions/mean_length", "completion length (tokens)"),
    ("entropy", "entropy"),
)


class ReportConfig(Section):
    title: str = "r1-pipeline report"
    order: list[str] = Field(default_factory=list, description="evaluated stages in pipeline order")
    curves: list[str] = Field(default_factory=list, description="GRPO stages whose curves are plotted")
    extra: dict[str, Any] = Field(default_factory=dict, description="more figures to report as is")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if v > 1.5 else f"{v:.3f}"
    return str(v)


def markdown_table(stages: dict[str, dict]) -> str:
    head = "| stage | " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|---" * (len(COLUMNS) + 1) + "|"
    rows = [
        f"| {name} | " + " | ".join(_fmt(m.get(k, "")) for k, _ in COLUMNS) + " |"
        for name, m in stages.items()
    ]
    return "\n".join([head, rule, *rows])


def plot_curves(curves: dict[str, list[dict]], path: Path) -> bool:
    """One panel per curve metric, one line per GRPO stage; False when there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(k, t) for k, t in CURVES if any(k in row for rows in curves.values() for row in rows)]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        for label, rows in curves.items():
            pts = [(r["step"], r[key]) for r in rows if key in r and "step" in r]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, _smooth(list(ys)), label=label)
        ax.set_title(title)
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _smooth(ys: list[float], window: int = 10) -> list[float]:
    """Trailing moving average: per-step GRPO rewards on 8 prompts are noisy."""
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= window:
            acc -= ys[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _wall(metrics: dict) -> str:
    """Wall seconds of the attempt that finished the stage, flagged when it was a resume."""
    wall = metrics.get("wall_seconds", "")
    resumed = metrics.get("resumed_from")
    return f"{wall} (resumed at step {resumed})" if resumed else str(wall)


def build_report(ctx: StageContext) -> None:
    cfg: ReportConfig = ctx.config
    stages: dict[str, dict] = {}
    for name in cfg.order:
        ref = ctx.inputs[f"eval/{name}"]
        metrics = json.loads(ref.file("metrics.json").read_text(encoding="utf-8"))
        stages[name] = {**metrics, "artifact": ref.key}
    curves: dict[str, list[dict]] = {}
    training: dict[str, dict] = {}
    for name in cfg.curves:
        ref = ctx.inputs[f"train/{name}"]
        rows = [
            {**r, "step": r.get("step", i + 1)}
            for i, r in enumerate(read_log_history(ref.file("train_log.jsonl")))
        ]
        curves[name] = [r for r in rows if "reward" in r]
        manifest = json.loads(ref.file("manifest.json").read_text(encoding="utf-8"))
        training[name] = {**manifest.get("metrics", {}), "artifact": ref.key}
    extra = dict(cfg.extra)
    for role, ref in sorted(ctx.inputs.items()):
        if role.startswith("extra/"):
            manifest = json.loads(ref.file("manifest.json").read_text(encoding="utf-8"))
            extra[role.removeprefix("extra/")] = {**manifest.get("metrics", {}), "artifact": ref.key}
    report = {"title": cfg.title, "stages": stages, "training": training, **extra}
    (ctx.out_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=False), encoding="utf-8")
    plotted = plot_curves(curves, ctx.out_dir / "grpo_curves.png")
    md = [f"# {cfg.title}", "", markdown_table(stages), ""]
    if training:
        md += ["| training stage | steps | wall seconds |", "|---|---|---|"]
        md += [f"| {n} | {t.get('steps', '')} | {_wall(t)} |" for n, t in training.items()]
        md += [""]
    if plotted:
        md += ["![GRPO curves](grpo_curves.png)", ""]
    for key, value in extra.items():
        md += [f"**{key}**: `{json.dumps(value)}`", ""]
    (ctx.out_dir / "report.md").write_text("\n".join(md), encoding="utf-8")


STAGE = Stage(name="report", version="1", fn=build_report)
