"""Two runs on one machine: each at most about twice as slow as alone, not thrashing.

    python bench/sharing.py [--recipe configs/tiny/r1_zero.yaml] [overrides ...]

Runs a flow (by default the tiny R1-Zero recipe on 2 threads with a longer GRPO stage, so that
training dominates) twice alone, one after the other, each in a fresh store, then twice at
once, and prints each run's wall time and its ratio to the alone time. Fair sharing of two cores
is 2x; threads that spin-wait for a core the other run holds make it several times worse
(``r1/cores.py`` says what was measured and what the trainers do about it).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["runtime.num_threads=2", "grpo.max_steps=40", "grpo.prompts_per_step=4", "grpo.num_generations=8"]
# --size default: the default recipe's model and GRPO batch on the tiny data (where thrashing shows)
DEFAULT_SIZE = [
    "runtime.num_threads=2",
    "base.model={hidden_size: 128, intermediate_size: 384, num_hidden_layers: 4, num_attention_heads: 4, num_key_value_heads: 2}",
    "base.pretrain.max_steps=40",
    "grpo.max_steps=30",
    "grpo.prompts_per_step=8",
    "grpo.num_generations=8",
    "grpo.max_completion_length=80",
]


def command(store: Path, recipe: str, overrides: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "flows.cli",
        "run",
        "r1-zero",
        "--recipe",
        recipe,
        f"store={store}",
        *overrides,
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default=str(ROOT / "configs/tiny/r1_zero.yaml"))
    ap.add_argument("--size", choices=("tiny", "default"), default="tiny")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    args.overrides = args.overrides or (DEFAULT if args.size == "tiny" else DEFAULT_SIZE)
    with tempfile.TemporaryDirectory() as tmp:
        alone = []
        for i in range(2):
            t = time.monotonic()
            subprocess.run(
                command(Path(tmp, f"alone{i}"), args.recipe, args.overrides),
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            alone.append(time.monotonic() - t)
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(
                command(Path(tmp, f"both{i}"), args.recipe, args.overrides),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(2)
        ]
        both = []
        for p in procs:
            p.wait()
            both.append(time.monotonic() - t0)
        if any(p.returncode for p in procs):
            raise SystemExit("a concurrent run failed")
    base = sum(alone) / 2
    print(f"alone: {alone[0]:.1f} s, {alone[1]:.1f} s (mean {base:.1f} s)")
    for i, b in enumerate(both):
        print(f"concurrent run {i}: {b:.1f} s = {b / base:.2f}x its time alone")
    print(f"worst slowdown {max(both) / base:.2f}x (fair sharing of two cores: 2x)")


if __name__ == "__main__":
    main()
