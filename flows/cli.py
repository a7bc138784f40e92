"""``r1``: run flows with recipe overrides, and inspect the artifact store.

r1 run r1-zero [--recipe configs/r1_zero.yaml] [--seeds 0,1,2] [section.key=value ...]
r1 plan r1-zero [overrides ...]          per stage: cached, resumes or runs; runs nothing
r1 config r1-zero grpo.learning_rate=1e-4   print the resolved recipe and its store, run nothing
r1 recipes                              the flows and their default recipes
r1 artifacts                            artifacts with their stage, size, inputs and headline figures
r1 lineage KEY                          an artifact's ancestry (KEY: a key or a unique prefix of one)
r1 verify [KEY ...]                     re-hash artifacts against their manifests
r1 export KEY DIR [--push-to-hub REPO]  a model as a clean Hugging Face folder with its model card
r1 compare REPORT ...                   reports side by side (report.json, its folder, or a run name)

Every subcommand takes --store DIR (a path or an object-store URL; default $R1_STORE or runs/).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import flows  # noqa: F401  (sets Prefect's telemetry off before anything imports prefect)
from r1.config import ConfigError
from r1.store import open_store


def _run(args: argparse.Namespace) -> int:
    from flows import recipes
    from flows.registry import flow_spec
    from r1.noise import quiet_known_noise

    os.environ["R1_PROGRESS"] = "verbose" if args.verbose else "quiet" if args.quiet else "normal"
    if not args.verbose:
        _one_line_run_failures()  # Prefect's console handler exists once prefect is imported
        quiet_known_noise()

    spec = flow_spec(args.flow)
    recipe = recipes.load(args.flow, args.recipe, args.overrides)
    if args.seeds and not spec.trains:
        raise ConfigError(f"--seeds compares trained models; {spec.name} trains none")
    result = launch(spec, recipe, args.overrides, args.seeds)
    print(f"{spec.returns}: {result}", flush=True)
    return 0


def launch(spec, recipe, overrides: list[str], seeds: list[int] | None = None) -> str:
    """Run a flow (or its seeds) as Prefect shows it: named by recipe and overrides, tagged by flow and recipe."""
    from prefect import tags

    run_name = " ".join([recipe.name, *overrides])[:200]
    with tags(f"flow:{spec.name}", f"recipe:{recipe.name}"):
        if seeds:
            from flows.seeds import over_seeds

            name = f"{run_name} --seeds {','.join(map(str, seeds))}"
            return over_seeds.with_options(flow_run_name=name)(spec.name, recipe, seeds)
        return spec.flow().with_options(flow_run_name=run_name)(recipe)


def _recipes(args: argparse.Namespace) -> int:
    from flows.registry import CONFIGS, FLOWS

    width = max(len(name) for name in FLOWS)
    for spec in FLOWS.values():
        path = spec.default_recipe.relative_to(CONFIGS.parent)
        print(f"{spec.name:<{width}}  {path}  {spec.description}")
    return 0


def _seed_list(text: str) -> list[int]:
    """``0,1,2`` as ``[0, 1, 2]`` (distinct non-negative integers)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seeds must be integers separated by commas, got {text!r}"
        ) from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"seeds must be distinct non-negative integers, got {text!r}")
    return seeds


def _config(args: argparse.Namespace) -> int:
    import yaml

    from flows import recipes
    from flows.common import store_for

    recipe = recipes.load(args.flow, args.recipe, args.overrides)
    print(f"# store: {store_for(recipe.store).location}")
    print(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False, allow_unicode=True), end="")
    return 0


def _plan(args: argparse.Namespace) -> int:
    """Per stage, what a run would do now: ``cached``, ``resuming from step N`` or ``running``."""
    from flows import recipes
    from flows.common import planning
    from flows.registry import flow_spec

    spec = flow_spec(args.flow)
    recipe = recipes.load(args.flow, args.recipe, args.overrides)
    runs = [(f"seed {s}", recipes.seeded(recipe, s)) for s in args.seeds] if args.seeds else [("", recipe)]
    counts: dict[str, int] = {}
    for title, one in runs:
        if title:
            print(f"# {title}")
        with planning() as plans:
            spec.flow().fn(one)
        for p in plans:
            print(p.line())
            counts[p.status] = counts.get(p.status, 0) + 1
    print("plan: " + ", ".join(f"{n} {status}" for status, n in counts.items()))
    return 0


def _artifacts(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    rows = store.list()
    if not rows:
        print(f"no artifacts in {store.location}")
        return 0
    for m in rows:
        inputs = ", ".join(f"{role}={key}" for role, key in sorted(m.get("inputs", {}).items())) or "-"
        size = sum(f.get("size", 0) for f in m.get("files", {}).values())
        print(f"{m['key']:<32} {m.get('created', ''):<26} {_size(size):>8}  {_headline(m)}  inputs: {inputs}")
    return 0


# the figures `r1 artifacts` shows first, when an artifact has them
_HEADLINE = (
    "accuracy",
    "pass@1",
    "final_reward",
    "pairwise_accuracy",
    "final_loss",
    "steps",
    "kept",
    "n_train",
)


def _headline(manifest: dict) -> str:
    metrics = manifest.get("metrics", {})
    shown = [(k, metrics[k]) for k in _HEADLINE if isinstance(metrics.get(k), int | float)][:3]
    return "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown) or "-"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def resolve_key(store, key: str) -> str:
    """An artifact key from itself or a unique prefix of one (``grpo-4e1`` for ``grpo-4e158ffe...``)."""
    if store.exists(key):
        return key
    matches = sorted({m["key"] for m in store.list()} | set(store.folders()))
    matches = [k for k in matches if k.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise FileNotFoundError(f"no artifact {key!r} in {store.location}")
    raise FileNotFoundError(
        f"{key!r} is the prefix of {len(matches)} artifacts: {', '.join(matches[:5])} ..."
    )


def _lineage(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    try:
        args.key = resolve_key(store, args.key)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for depth, role, key in store.lineage(args.key):
        print("  " * depth + (f"{role}: " if role else "") + key)
    return 0


def _export(args: argparse.Namespace) -> int:
    from r1 import cards

    store = open_store(args.store)
    try:
        out = cards.export(store, resolve_key(store, args.key), Path(args.dir))
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported: {out} (model card: {out / cards.CARD})")
    if args.push_to_hub:
        print(f"pushed: {cards.push(out, args.push_to_hub)}")
    return 0


def _report_path(name: str, store_arg: str | None) -> Path:
    """A report.json from its path, its folder, or a run name under ``<store>/reports``."""
    p = Path(name)
    for candidate in (p, p / "report.json", open_store(store_arg).root / "reports" / name / "report.json"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no report {name!r} (a report.json, its folder, or a name in <store>/reports)")


def _compare(args: argparse.Namespace) -> int:
    import json

    from stages.report import compare_reports

    try:
        paths = [_report_path(name, args.store) for name in args.reports]
        # each report by its folder's name: the run name under <store>/reports, or the folder given
        reports = {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in paths}
        print(compare_reports(reports), end="")
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _verify(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    if not store.exists_root():
        print(f"error: no artifact store at {store.location}", file=sys.stderr)
        return 1
    try:
        keys = [resolve_key(store, k) for k in args.keys]
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    keys = keys or sorted({m["key"] for m in store.list()} | set(store.folders()))
    bad = 0
    for key in keys:
        v = store.verify(key, deep=True)
        bad += not v.ok
        print(f"{'ok ' if v.ok else 'BAD'} {key}" + (f"  ({v.reason})" if not v.ok else ""))
    return 1 if bad else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="r1", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    from importlib.metadata import version

    from flows.registry import FLOWS
    from r1.store import code_revision

    p.add_argument(
        "--version", action="version", version=f"r1-pipeline {version('r1-pipeline')} ({code_revision()})"
    )
    commands = (
        ("run", _run, "run a flow"),
        ("plan", _plan, "say per stage whether it is cached, resumes or runs, without running"),
        ("config", _config, "print the resolved recipe and the store it uses"),
    )
    for name, fn, help_ in commands:
        s = sub.add_parser(name, help=help_)
        s.add_argument("flow", help=" | ".join(FLOWS))
        s.add_argument("--recipe", help="recipe YAML (default: configs/<flow>.yaml)")
        s.add_argument("--store", help="artifact store (the same as the override store=DIR)")
        s.add_argument(
            "--verbose", action="store_true", help="every progress line, full tracebacks, libraries' warnings"
        )
        s.add_argument("--quiet", action="store_true", help="status and result lines only, no progress lines")
        s.add_argument(
            "--seeds", type=_seed_list, help="run once per seed (e.g. 0,1,2) and report mean and spread"
        )
        s.add_argument("overrides", nargs="*", help="dotted overrides, e.g. grpo.learning_rate=1e-4")
        s.set_defaults(fn=fn)
    s = sub.add_parser("recipes", help="the flows, their default recipes and what they do")
    s.set_defaults(fn=_recipes)
    s = sub.add_parser("artifacts", help="list artifacts")
    s.add_argument("--store")
    s.set_defaults(fn=_artifacts)
    s = sub.add_parser("lineage", help="an artifact's ancestry")
    s.add_argument("key")
    s.add_argument("--store")
    s.set_defaults(fn=_lineage)
    s = sub.add_parser("export", help="write a model artifact as a clean Hugging Face folder with its card")
    s.add_argument("key")
    s.add_argument("dir")
    s.add_argument("--store")
    s.add_argument("--push-to-hub", metavar="REPO", help="also upload the folder (needs the hub)")
    s.set_defaults(fn=_export)
    s = sub.add_parser("compare", help="several runs' reports side by side")
    s.add_argument(
        "reports", nargs="+", help="report.json, a report folder, or a run name under <store>/reports"
    )
    s.add_argument("--store")
    s.set_defaults(fn=_compare)
    s = sub.add_parser("verify", help="re-hash artifacts")
    s.add_argument("keys", nargs="*")
    s.add_argument("--store")
    s.set_defaults(fn=_verify)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, extra = p.parse_known_args(argv)
    # Overrides may follow options (`run r1-zero --recipe x.yaml a.b=1`); argparse stops filling a
    # positional list at the first option, so the rest arrive here.
    if extra and (not hasattr(args, "overrides") or any(e.startswith("-") or "=" not in e for e in extra)):
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    if hasattr(args, "overrides") and getattr(args, "store", None):
        args.overrides = [*args.overrides, f"store={args.store}"]
    verbose = getattr(args, "verbose", False)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    except Exception as e:  # a failed stage: one report, our frames only unless --verbose
        print(failure_report(e, verbose), file=sys.stderr, end="")
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


class _NoTraceback(logging.Filter):
    """Keep Prefect's one-line task/flow failure messages on the console, drop their tracebacks.

    Prefect's API handler sits on the run loggers themselves and sees the record first, so the
    UI keeps the whole traceback; the console shows it once, from :func:`main`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(("prefect.task_runs", "prefect.flow_runs")):
            record.exc_info, record.exc_text = None, None
        return True


def _one_line_run_failures() -> None:
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _NoTraceback) for f in handler.filters):
            handler.addFilter(_NoTraceback())


def failure_report(exc: BaseException, verbose: bool = False) -> str:
    """The traceback of ``exc`` and its causes, without Prefect's and the libraries' frames.

    What a user needs is where the project's code (or their reward) failed; ``--verbose`` keeps
    every frame. Finished stages stay finished: the message says how to resume.
    """
    import traceback

    lines = traceback.format_exception(exc)  # one string per frame
    if not verbose:
        site = ("site-packages", "/lib/python3")
        lines = [
            ln
            for ln in lines
            if not (ln.lstrip().startswith('File "') and any(s in ln.split('"')[1] for s in site))
        ]
    return "".join(lines) + "(finished stages are kept: run the same command again to resume)\n"


if __name__ == "__main__":
    sys.exit(main())
