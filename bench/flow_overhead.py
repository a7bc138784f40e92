"""Orchestration overhead of the R1-Zero flow: flow wall time against the summed compute of its stages.

    python bench/flow_overhead.py [--recipe configs/tiny/r1_zero.yaml] [overrides ...]

Runs the flow twice in a fresh store: cold (every stage runs; overhead = wall - sum of the stages'
own wall time from their manifests) and warm (every stage a cache hit; the whole time is
overhead). Prints both as ratios. The first flow of a process also pays Prefect's ephemeral API
start-up, reported separately as the cost of a warm rerun.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flows  # noqa: E402,F401
from flows.r1_zero import r1_zero  # noqa: E402
from flows.recipes import load  # noqa: E402
from r1.store import Store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--recipe", default=str(Path(__file__).resolve().parent.parent / "configs/tiny/r1_zero.yaml")
    )
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        recipe = load("r1-zero", args.recipe, [f"store={tmp}", *args.overrides])
        t = time.monotonic()
        r1_zero(recipe)
        cold = time.monotonic() - t
        compute = sum(m["metrics"].get("wall_seconds", 0.0) for m in Store(tmp).list())
        t = time.monotonic()
        r1_zero(recipe)
        warm = time.monotonic() - t
    print(f"recipe: {args.recipe}")
    print(f"cold flow wall time      {cold:8.2f} s")
    print(f"summed stage compute     {compute:8.2f} s")
    print(f"orchestration overhead   {cold - compute:8.2f} s   ratio wall/compute = {cold / compute:.3f}")
    print(f"warm rerun (all cached)  {warm:8.2f} s   ratio warm/cold = {warm / cold:.3f}")


if __name__ == "__main__":
    main()
