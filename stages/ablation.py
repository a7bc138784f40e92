"""Ablation report: named GRPO variants, each over seeds, compared the same way.

Inputs, per variant and seed, are the GRPO artifact (its ``train_log.jsonl`` with the held-out
pass@1 measured during training, ``generation/tokens`` and ``step_time`` per step) and the
evaluation of its model; :func:`ablation_inputs` keys them as the stage reads them. Per variant
the report gives, as mean and sample sd over seeds: greedy accuracy, pass@1, mean completion
length, self-check rate (the final evaluations), GRPO wall time and generated tokens, and the
training time at which the held-out curve first reaches the baseline variant's final held-out
pass@1 (``time_to_baseline_s``; None when some seed never does, with ``reached_baseline`` saying
how many did). Plots overlay held-out pass@1 against training time and against generated tokens,
and completion length against step.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from pydantic import Field

from r1.config import Section
from r1.stage import Stage, StageContext
from r1.store import ArtifactRef
from r1.training import read_log_history


class AblationReportConfig(Section):
    title: str = "GRPO variants"
    baseline: str = "grpo"
    variants: list[str] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    notes: dict[str, str] = Field(default_factory=dict, description="one line per variant: what it changes")


def _role(variant: str, seed: int, kind: str) -> str:
    return f"{variant}/seed{seed}/{kind}"


def ablation_roles(cfg: AblationReportConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(_role(v, s, k) for v in cfg.variants for s in cfg.seeds for k in ("grpo", "eval")), ()


def ablation_inputs(runs: dict[tuple[str, int], tuple[ArtifactRef, ArtifactRef]]) -> dict[str, ArtifactRef]:
    """``{(variant, seed): (grpo artifact, its evaluation)}`` keyed the way the stage reads them."""
    out = {}
    for (variant, seed), (trained, evaluated) in runs.items():
        out[_role(variant, seed, "grpo")] = trained
        out[_role(variant, seed, "eval")] = evaluated
    return out


def curve(log: list[dict]) -> list[dict[str, float]]:
    """Held-out points with the training time and tokens spent up to them (heldout eval excluded)."""
    points, wall, tokens = [], 0.0, 0.0
    for row in log:
        before = (wall, tokens)
        wall += row.get("step_time", 0.0) or 0.0
        tokens += row.get("generation/tokens", 0.0) or 0.0
        if "heldout/pass@1" in row:
            at = (wall, tokens) if row["heldout/step"] == row.get("step") else before  # step 0: before step 1
            points.append(
                {"step": row["heldout/step"], "wall": at[0], "tokens": at[1], "pass@1": row["heldout/pass@1"]}
            )
    return points


def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(cfg: AblationReportConfig, runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """The report's numbers from each run's metrics and curve (pure: tested on hand-made runs)."""
    base_curves = [r["curve"] for r in runs[cfg.baseline].values() if r["curve"]]
    target = statistics.mean(c[-1]["pass@1"] for c in base_curves) if base_curves else None
    out: dict[str, Any] = {}
    for variant, seeds in runs.items():
        row: dict[str, Any] = {}
        for key in (
            "pass@1",
            "accuracy",
            "mean_length",
            "self_check_rate",
            "wall_seconds",
            "generated_tokens",
        ):
            mean, sd = _mean_sd([r[key] for r in seeds.values()])
            row[key], row[f"{key}_sd"] = mean, sd
        reach = []
        for r in seeds.values():
            hit = next((p["wall"] for p in r["curve"] if target is not None and p["pass@1"] >= target), None)
            reach.append(hit)
        reached = [t for t in reach if t is not None]
        row["time_to_baseline_s"] = (
            statistics.mean(reached) if reached and len(reached) == len(reach) else None
        )
        row["reached_baseline"] = f"{len(reached)}/{len(reach)}"
        row["per_seed"] = {str(s): {k: v for k, v in r.items() if k != "curve"} for s, r in seeds.items()}
        out[variant] = row
    return {"baseline": cfg.baseline, "baseline_heldout_pass@1": target, "seeds": cfg.seeds, "variants": out}


def build_ablation_report(ctx: StageContext) -> None:
    cfg: AblationReportConfig = ctx.config
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for v in cfg.variants:
        for s in cfg.seeds:
            trained, evaluated = ctx.inputs[_role(v, s, "grpo")], ctx.inputs[_role(v, s, "eval")]
            log = read_log_history(trained.file("train_log.jsonl"))
            m = json.loads(evaluated.file("metrics.json").read_text(encoding="utf-8"))
            runs.setdefault(v, {})[s] = {
                "pass@1": m["pass@1"],
                "accuracy": m["accuracy"],
                "mean_length": m["mean_length"],
                "self_check_rate": m["self_check_rate"],
                "wall_seconds": trained.manifest()["metrics"]["wall_seconds"],
                "generated_tokens": sum(r.get("generation/tokens", 0) or 0 for r in log),
                "curve": curve(log),
                "lengths": [
                    (r["step"], r["completions/mean_length"]) for r in log if "completions/mean_length" in r
                ],
            }
    report = {"title": cfg.title, **summarize(cfg, runs)}
    (ctx.out_dir / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    plotted = plot(runs, cfg, ctx.out_dir / "ablation_curves.png")
    (ctx.out_dir / "report.md").write_text(markdown(report, cfg, plotted), encoding="utf-8")


def _fmt(v: Any, digits: int = 3) -> str:
    return "" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def markdown(report: dict[str, Any], cfg: AblationReportConfig, plotted: bool) -> str:
    head = (
        "| variant | greedy accuracy | pass@1 | mean length | self-check | wall s | generated tokens "
        "| time to baseline s | what it changes |"
    )
    lines = [
        f"# {report['title']}",
        "",
        f"Mean ± sample sd over seeds {cfg.seeds}. Time to baseline: training time until the held-out "
        f"curve first reaches `{cfg.baseline}`'s final held-out pass@1 "
        f"({_fmt(report['baseline_heldout_pass@1'])}); blank when a seed never does.",
        "",
        head,
        "|---" * 9 + "|",
    ]
    for name, r in report["variants"].items():
        cells = [
            f"{_fmt(r['accuracy'])} ± {_fmt(r['accuracy_sd'])}",
            f"{_fmt(r['pass@1'])} ± {_fmt(r['pass@1_sd'])}",
            f"{_fmt(r['mean_length'], 1)} ± {_fmt(r['mean_length_sd'], 1)}",
            f"{_fmt(r['self_check_rate'])}",
            f"{_fmt(r['wall_seconds'], 0)} ± {_fmt(r['wall_seconds_sd'], 0)}",
            f"{_fmt(r['generated_tokens'], 0)}",
            f"{_fmt(r['time_to_baseline_s'], 0)} ({r['reached_baseline']})",
            cfg.notes.get(name, ""),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    if plotted:
        lines += ["![held-out pass@1 and completion length](ablation_curves.png)", ""]
    return "\n".join(lines)


def _seed_mean(curves: list[list[dict]], key: str) -> list[float]:
    """Point by point mean over seeds (as far as the shortest curve goes)."""
    n = min(len(c) for c in curves)
    return [statistics.mean(c[i][key] for c in curves) for i in range(n)]


def plot(runs: dict[str, dict[int, dict[str, Any]]], cfg: AblationReportConfig, path: Path) -> bool:
    """Held-out pass@1 against training time and generated tokens, length against step (seed means)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not any(r["curve"] for seeds in runs.values() for r in seeds.values()):
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for variant, seeds in runs.items():
        curves = [r["curve"] for r in seeds.values() if r["curve"]]
        if curves:
            wall, tokens, rate = (_seed_mean(curves, key) for key in ("wall", "tokens", "pass@1"))
            axes[0].plot(wall, rate, marker=".", label=variant)
            axes[1].plot(tokens, rate, marker=".", label=variant)
        lengths = [r["lengths"] for r in seeds.values()]
        n = min(len(x) for x in lengths)
        if n:
            steps = [lengths[0][i][0] for i in range(n)]
            means = [statistics.mean(x[i][1] for x in lengths) for i in range(n)]
            window = 10
            smooth = [statistics.mean(means[max(0, i - window + 1) : i + 1]) for i in range(n)]
            axes[2].plot(steps, smooth, label=variant)
    for ax, (x, title) in zip(
        axes,
        (
            ("training seconds", "held-out pass@1"),
            ("generated tokens", "held-out pass@1"),
            ("GRPO step", "completion length"),
        ),
        strict=True,
    ):
        ax.set_xlabel(x)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


STAGE = Stage(
    name="ablation_report",
    version="1",
    fn=build_ablation_report,
    config=AblationReportConfig,
    roles_of=ablation_roles,
)
