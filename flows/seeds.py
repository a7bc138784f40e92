"""One recipe over several seeds: each seed's run as its own flow, then one report of the spread.

A single run's figure reads as more certain than it is (CPU kernels and seeds move them by several
points). ``r1 run r1-zero --seeds 0,1,2`` runs the flow once per seed (:func:`flows.recipes.seeded`:
every stage the seed does not change, the task data first, is shared) and reports, per stage and
metric, the mean, the standard deviation and a 95 % interval over seeds.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, tags

from flows.common import publish_report, start
from flows.recipes import seeded
from flows.registry import flow_spec
from stages import report


@flow(name="seeds", log_prints=False)
def over_seeds(flow_name: str, recipe, seeds: list[int]) -> str:
    """Run ``flow_name`` once per seed and report the spread; return the summary's report.json."""
    run = start(recipe)
    spec = flow_spec(flow_name)
    if not spec.trains:
        raise ValueError(f"--seeds compares trained models; {flow_name} trains none")
    runs = {}
    for seed in seeds:
        one = seeded(recipe, seed)
        with tags(f"seed:{seed}"):
            result = spec.flow().with_options(flow_run_name=one.name)(one)
        runs[f"seed{seed}"] = run.store.ref(Path(result).parent.name)  # the seed's report artifact
    cfg = report.SeedsReportConfig(title=f"{recipe.name} over seeds", seeds=list(seeds))
    out = run(report.SEEDS, cfg, label="seeds_report", **runs)
    return publish_report(run.store, f"{recipe.name}-seeds", out)
