"""Report stage: the R1 paper's table for this run, plus training curves.

The config says what each input is: ``evaluations`` (evaluate artifacts, one per model, in table
order), ``training`` (trainer artifacts: their metrics, and their ``train_log.jsonl`` curves) and
``extras`` (any artifact: its manifest metrics, under its name). :func:`report_inputs` keys the
artifacts the way the stage reads them, so a flow never spells a role. Writes ``report.json``
(``{"stages": {<stage>: metrics}, "training": ..., <extra>: ...}``), ``report.md`` and the plots;
every reward a stage logged is plotted, a user's own ``@register`` rewards included.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import Field

from r1.config import Section
from r1.stage import Stage, StageContext
from r1.store import ArtifactRef
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
AFTER_REWARDS = (("completions/mean_length", "completion length (tokens)"), ("entropy", "entropy"))
HELDOUT = "heldout/pass@1"  # logged by grpo.heldout_eval every N steps


class ReportConfig(Section):
    title: str = "r1-pipeline report"
    evaluations: list[str] = Field(default_factory=list, description="evaluated models, in table order")
    training: list[str] = Field(default_factory=list, description="trainer stages: metrics and curves")
    extras: list[str] = Field(default_factory=list, description="artifacts whose metrics are reported")
    extra: dict[str, Any] = Field(default_factory=dict, description="more figures to report as is")


def _role(kind: str, name: str) -> str:
    return f"{kind}:{name}"


def report_roles(cfg: ReportConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The input roles ``cfg`` names (all required): what ``Stage.check`` holds a call to."""
    kinds = (("evaluation", cfg.evaluations), ("training", cfg.training), ("extra", cfg.extras))
    return tuple(_role(kind, name) for kind, names in kinds for name in names), ()


def report_inputs(
    evaluations: dict[str, ArtifactRef],
    training: dict[str, ArtifactRef] | None = None,
    extras: dict[str, ArtifactRef] | None = None,
) -> dict[str, ArtifactRef]:
    """The report stage's inputs, keyed the way it reads them (pair with the same names in its config)."""
    out = {_role("evaluation", n): ref for n, ref in evaluations.items()}
    out |= {_role("training", n): ref for n, ref in (training or {}).items()}
    return out | {_role("extra", n): ref for n, ref in (extras or {}).items()}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if v > 1.5 else f"{v:.3f}"
    return str(v)


def _cell(m: dict, key: str, spread: dict | None = None) -> str:
    """A value with its uncertainty: ``± sd`` over seeds, else ``± se`` of this one evaluation."""
    if key not in m:
        return ""
    if spread and key in spread and spread[key].get("sd") is not None:
        return f"{_fmt(m[key])} ± {_fmt(spread[key]['sd'])}"
    se = (m.get("se") or {}).get(key)
    return f"{_fmt(m[key])} ± {_fmt(se)}" if se is not None else _fmt(m[key])


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table: one header row, the rule, the rows (every table of the report is one)."""
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def markdown_table(stages: dict[str, dict], spread: dict[str, dict] | None = None) -> str:
    rows = [
        [name, *(_cell(m, k, (spread or {}).get(name)) for k, _ in COLUMNS)] for name, m in stages.items()
    ]
    return md_table(["stage", *(title for _, title in COLUMNS)], rows)


def compare_reports(reports: dict[str, dict]) -> str:
    """Several runs' reports side by side (``r1 compare``): one table, a row per report and stage.

    Each row keeps its own uncertainty: the sd over seeds for a seeds report, the standard error
    over problems for a single run; the lines above the table say which, and each run's k.
    """
    stages: dict[str, dict] = {}
    spread: dict[str, dict] = {}
    about = []
    for name, r in reports.items():
        if not r.get("stages"):
            raise ValueError(f"{name}: not a run report (no stages)")
        seeds = r.get("seeds")
        first = next(iter(r["stages"].values()))
        k = f"; k = {first['k']}" if "k" in first else ""
        what = f"mean ± sd over seeds {','.join(map(str, seeds))}" if seeds else "one run, ± se over problems"
        about.append(f"- **{name}**: {r.get('title', '')} ({what}{k})")
        for stage, m in r["stages"].items():
            stages[f"{name} / {stage}"] = m
            if seeds:
                spread[f"{name} / {stage}"] = r.get("spread", {}).get(stage, {})
    return "\n".join([*about, "", markdown_table(stages, spread)]) + "\n"


MODE_COLUMNS = (("accuracy", "accuracy"), ("pass@1", "pass@1"), ("mean_length", "mean length"))
MODE_COLUMNS += (("mode_adherence", "follows the mode"),)


def mode_table(stages: dict[str, dict]) -> str:
    """Fused models in each thinking mode (``by_mode`` of their evaluation), ± se."""
    rows = [
        [name, mode, *(_cell(m, k) for k, _ in MODE_COLUMNS)]
        for name, metrics in stages.items()
        for mode, m in (metrics.get("by_mode") or {}).items()
    ]
    return md_table(["stage", "mode", *(title for _, title in MODE_COLUMNS)], rows)


TOOL_COLUMNS = (("accuracy", "accuracy"), ("pass@1", "pass@1"), ("tool_call_rate", "samples that call"))
TOOL_COLUMNS += (("calls_per_episode", "calls per sample"), ("well_formed_call_rate", "calls well formed"))
TOOL_COLUMNS += (("used_call_rate", "results used"),)


def tool_table(stages: dict[str, dict]) -> str:
    """Evaluations with tools offered: accuracy beside how the model called them."""
    rows = [
        [name, *(_cell(m, k) for k, _ in TOOL_COLUMNS)] for name, m in stages.items() if "tool_call_rate" in m
    ]
    return md_table(["stage", *(title for _, title in TOOL_COLUMNS)], rows)


_CJK = re.compile(r"[\u4e00-\u9fff]")


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        users = [m.get("content") or "" for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(prompt)


def benchmark_table(stages: dict[str, dict]) -> str:
    """The ``<model>@<benchmark>`` evaluations: n, k, greedy accuracy, pass@j (unbiased), maj@k."""
    js = sorted({int(key[5:]) for m in stages.values() for key in m if re.fullmatch(r"pass@\d+", key)})
    cols = [("accuracy", "accuracy (greedy)"), *((f"pass@{j}", f"pass@{j}") for j in js)]
    cols += [("pass@k", "pass@k (k = n)"), ("maj@k", "maj@k"), ("format_rate", "format")]
    rows = [
        [*name.split("@", 1), m.get("n_problems", ""), m.get("k", ""), *(_cell(m, key) for key, _ in cols)]
        for name, m in stages.items()
    ]
    return md_table(["model", "benchmark", "problems", "k", *(t for _, t in cols)], rows)


def _marked_samples(records: list[dict]) -> list[dict]:
    """Every sampled completion with its marks, in record order (the marks computed once)."""
    out = []
    for r in records:
        prompt, samples = _prompt_text(r["prompt"]), r.get("samples", [])
        checks = r.get("sample_self_check") or [False] * len(samples)
        single = r.get("sample_single_language") or [True] * len(samples)
        for j, text in enumerate(samples):
            out.append(
                {
                    "prompt": prompt,
                    "answer": r.get("answer", ""),
                    "completion": text,
                    "correct": bool(r["sample_correct"][j]),
                    "self_check": bool(checks[j]),
                    "language_switch": not single[j],
                }
            )
    return out


def pick_samples(records: list[dict], per_stage: int = 3) -> list[dict]:
    """A few sampled completions worth reading: one per prompt language, then a self-check, then a switch.

    Deterministic (the first matching problem), so a report rebuilt from the same evaluation shows
    the same samples. Each carries its marks: correct, self-check, language switch.
    """
    candidates = list(enumerate(_marked_samples(records)))
    wants = (
        lambda s: not _CJK.search(s["prompt"]),
        lambda s: bool(_CJK.search(s["prompt"])),
        lambda s: s["self_check"],
        lambda s: s["language_switch"],
    )
    taken: list[int] = []
    for want in wants:
        hit = next((i for i, s in candidates if i not in taken and want(s)), None)
        if hit is not None and len(taken) < per_stage:
            taken.append(hit)
    return [candidates[i][1] for i in taken]


def samples_markdown(samples: dict[str, list[dict]], width: int = 400) -> list[str]:
    """The report's sample section: per stage, each completion in a code block with its marks."""
    md = ["## Sample completions", ""]
    for stage, picked in samples.items():
        for s in picked:
            marks = ["correct" if s["correct"] else "wrong"]
            marks += ["self-check"] * s["self_check"] + ["language switch"] * s["language_switch"]
            text = s["completion"] if len(s["completion"]) <= width else s["completion"][:width] + " ..."
            md += [
                f"**{stage}** ({', '.join(marks)}; gold {s['answer']}): {s['prompt'][:200]}",
                "",
                "```",
                text,
                "```",
                "",
            ]
    return md


def plot_curves(curves: dict[str, list[dict]], path: Path) -> bool:
    """One panel per curve metric, one line per GRPO stage; False when there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logged = {k for rows in curves.values() for row in rows for k in row}
    rewards = sorted(k for k in logged if k.startswith("rewards/") and k.endswith("/mean"))
    every = [("reward", "reward"), *((k, f"{k.split('/')[1]} reward") for k in rewards), *AFTER_REWARDS]
    panels = [(k, t) for k, t in every if k in logged]
    if HELDOUT in logged:  # R1's Figure 2: held-out pass@1 against step, measured, not smoothed
        panels.insert(0, (HELDOUT, "held-out pass@1 (± se)"))
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        for label, rows in curves.items():
            if key == HELDOUT:
                pts = [(r["heldout/step"], r[key], r.get(f"{key}_se", 0.0)) for r in rows if key in r]
                if pts:
                    xs, ys, es = zip(*sorted(pts), strict=True)
                    ax.errorbar(xs, ys, yerr=es, marker="o", ms=3, capsize=2, label=label)
                continue
            # a reward that applies to none of a step's prompts logs no number for it
            pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float) and "step" in r]
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
    samples: dict[str, list[dict]] = {}
    for name in cfg.evaluations:
        ref = ctx.inputs[_role("evaluation", name)]
        metrics = json.loads(ref.file("metrics.json").read_text(encoding="utf-8"))
        stages[name] = {**metrics, "artifact": ref.key}
        generations = Path(ref.path) / "generations"
        if generations.is_dir():
            from datasets import load_from_disk

            samples[name] = pick_samples(load_from_disk(str(generations)).to_list())
    curves: dict[str, list[dict]] = {}
    training: dict[str, dict] = {}
    for name in cfg.training:
        ref = ctx.inputs[_role("training", name)]
        rows = [
            {**r, "step": r.get("step", i + 1)}
            for i, r in enumerate(read_log_history(ref.file("train_log.jsonl")))
        ]
        curves[name] = [r for r in rows if "reward" in r or HELDOUT in r]
        training[name] = {**ref.manifest().get("metrics", {}), "artifact": ref.key}
    extra = dict(cfg.extra)
    for name in cfg.extras:
        ref = ctx.inputs[_role("extra", name)]
        extra[name] = {**ref.manifest().get("metrics", {}), "artifact": ref.key}
    report = {"title": cfg.title, "stages": stages, "training": training, **extra}
    (ctx.out_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=False), encoding="utf-8")
    plotted = plot_curves(curves, ctx.out_dir / "grpo_curves.png")
    k = next((m.get("k") for m in stages.values() if m.get("k")), None)
    n = next((m.get("n_problems") for m in stages.values() if m.get("n_problems")), None)
    md = [f"# {cfg.title}", ""]
    if k:
        md += [
            f"One run. {n} held-out problems; pass@1, pass@k, maj@k and the sampled rates from k = {k} "
            "samples per problem; ± is the standard error over problems (binomial for 0/1 rates). "
            "Other seeds and other CPUs give other draws: `--seeds 0,1,2` measures the spread.",
            "",
        ]
    task = {n: m for n, m in stages.items() if "@" not in n}
    benchmarks = {n: m for n, m in stages.items() if "@" in n}
    md += [markdown_table(task), ""]
    if benchmarks:
        md += [
            "Standard benchmarks (scored by the project's verifier; pass@j by the unbiased estimator "
            "over the k samples; ± is the standard error over problems):",
            "",
            benchmark_table(benchmarks),
            "",
        ]
    if any(m.get("by_mode") for m in stages.values()):
        md += ["Thinking modes: each prompt asked with `/think` and with `/no_think`.", ""]
        md += [mode_table(stages), ""]
    if any("tool_call_rate" in m for m in stages.values()):
        md += ["With the tool offered (the same tools and call limit as training):", ""]
        md += [tool_table(stages), ""]
    if training:
        rows = [
            [n, t.get("steps", ""), _wall(t), _fmt(t["rollout_share"]) if t.get("rollout_share") else ""]
            for n, t in training.items()
        ]
        md += [md_table(["training stage", "steps", "wall seconds", "step time in rollouts"], rows), ""]
    if plotted:
        md += ["![GRPO curves](grpo_curves.png)", ""]
    for key, value in extra.items():
        md += [f"**{key}**: `{json.dumps(value)}`", ""]
    if any(samples.values()):
        md += samples_markdown(samples)
        (ctx.out_dir / "samples.json").write_text(
            json.dumps(samples, indent=2, ensure_ascii=False), encoding="utf-8"
        )
    (ctx.out_dir / "report.md").write_text("\n".join(md), encoding="utf-8")


STAGE = Stage(name="report", version="4", fn=build_report, config=ReportConfig, roles_of=report_roles)

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (then the normal's 1.96).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145)
_T975 += (2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048)
_T975 += (2.045, 2.042)


def spread_of(values: list[float]) -> dict[str, Any]:
    """Sample standard deviation and the 95 % t-interval of the mean of ``values`` (one per seed)."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return {"sd": None, "ci95": None, "n": n}
    sd = (sum((v - m) ** 2 for v in values) / (n - 1)) ** 0.5
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / n**0.5
    return {"sd": sd, "ci95": [m - half, m + half], "n": n}


def _numeric(d: dict, prefix: str = "") -> dict[str, float]:
    """Every number of a metrics dict, nested sections (``by_mode``) as dotted keys; no ``se``."""
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "se":
            out |= _numeric(v, f"{prefix}{k}.")
        elif isinstance(v, int | float) and not isinstance(v, bool) and k not in {"k", "n_problems"}:
            out[prefix + k] = float(v)
    return out


def summarize_seeds(reports: dict[int, dict], part: str) -> tuple[dict, dict, dict]:
    """Means, spreads and per-seed values of every number in ``report[part][<name>]``."""
    names = list(dict.fromkeys(n for r in reports.values() for n in r.get(part, {})))
    means: dict[str, dict] = {}
    spread: dict[str, dict] = {}
    per_seed: dict[str, dict] = {}
    for name in names:
        rows = {seed: _numeric(r[part][name]) for seed, r in reports.items() if name in r.get(part, {})}
        metrics = list(dict.fromkeys(m for row in rows.values() for m in row))
        for metric in metrics:
            values = [row[metric] for row in rows.values() if metric in row]
            means.setdefault(name, {})[metric] = sum(values) / len(values)
            spread.setdefault(name, {})[metric] = spread_of(values)
            per_seed.setdefault(name, {})[metric] = [row.get(metric) for row in rows.values()]
    return means, spread, per_seed


class SeedsReportConfig(Section):
    title: str = "r1-pipeline report over seeds"
    seeds: list[int] = Field(min_length=1, description="one report input per seed, as seed<N>")


def build_seeds_report(ctx: StageContext) -> None:
    """One table over several seeds' reports: mean, sd and 95 % interval of every figure."""
    cfg: SeedsReportConfig = ctx.config
    reports = {
        seed: json.loads(ctx.inputs[f"seed{seed}"].file("report.json").read_text(encoding="utf-8"))
        for seed in cfg.seeds
    }
    stages, spread, per_seed = summarize_seeds(reports, "stages")
    training, training_spread, _ = summarize_seeds(reports, "training")
    out = {
        "title": cfg.title,
        "seeds": cfg.seeds,
        "stages": stages,
        "spread": spread,
        "per_seed": per_seed,
        "training": training,
        "training_spread": training_spread,
        "reports": {str(seed): ctx.inputs[f"seed{seed}"].key for seed in cfg.seeds},
    }
    (ctx.out_dir / "report.json").write_text(json.dumps(out, indent=2), encoding="utf-8")
    md = [
        f"# {cfg.title}",
        "",
        f"Mean ± sample standard deviation over {len(cfg.seeds)} seeds ({', '.join(map(str, cfg.seeds))}); "
        "`report.json` holds each figure's 95 % t-interval (`spread`) and the per-seed values.",
        "",
        markdown_table(stages, spread),
        "",
    ]
    if training:
        rows = []
        for name, t in training.items():
            sd = training_spread[name].get("wall_seconds", {}).get("sd")
            rows.append(
                [name, f"{t.get('wall_seconds', 0):.0f}" + (f" ± {sd:.0f}" if sd is not None else "")]
            )
        md += [md_table(["training stage", "wall seconds"], rows)]
        md += [""]
    md += ["Per-seed reports: " + ", ".join(f"seed {s}: `{k}`" for s, k in out["reports"].items()), ""]
    (ctx.out_dir / "report.md").write_text("\n".join(md), encoding="utf-8")


SEEDS = Stage(
    name="seeds_report",
    version="2",
    fn=build_seeds_report,
    config=SeedsReportConfig,
    roles_of=lambda cfg: (tuple(f"seed{s}" for s in cfg.seeds), ()),
)
