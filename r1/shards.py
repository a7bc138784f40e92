"""Work over many prompts in resumable shards: the unit of resume for every generation stage.

A shard is committed atomically (written to ``tmp-N``, then renamed to ``shard-N``), so a killed
run resumes at the first missing shard, never duplicates or loses a row, and reproduces exactly
the rows of an uninterrupted run as long as each shard's work is seeded by its own index.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from r1 import progress

_SHARD = "shard-{:05d}"


def finished_shards(work_dir: Path) -> int:
    """Shards already committed in ``work_dir`` (``Stage.resume_step`` for sharded stages)."""
    shards = work_dir / "shards"
    return len(list(shards.glob("shard-*"))) if shards.is_dir() else 0


def run_in_shards(
    work_dir: Path, n: int, size: int, build: Callable[[int, int, int], list[dict]], label: str
):
    """Rows of ``build(shard, start, end)`` for every shard of ``range(n)``, as one ``Dataset``.

    Shards already in ``work_dir/shards`` are read back instead of built; ``build`` is called only
    for the missing ones (so a stage loads its model only when there is work left).
    """
    from datasets import Dataset, concatenate_datasets, load_from_disk

    shards = work_dir / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    for stale in shards.glob("tmp-*"):  # a shard cut off mid-write by a kill
        shutil.rmtree(stale, ignore_errors=True)
    count = (n + size - 1) // size
    done = sum((shards / _SHARD.format(i)).exists() for i in range(count))
    meter = progress.Meter(count, done=done, unit="shard", name=label)
    for i in range(count):
        final = shards / _SHARD.format(i)
        if final.exists():
            continue
        rows = build(i, i * size, min((i + 1) * size, n))
        tmp = shards / f"tmp-{i:05d}"
        Dataset.from_list(rows).save_to_disk(str(tmp))
        os.rename(tmp, final)
        meter.update(i + 1, f"{len(rows)} rows")
    parts = [load_from_disk(str(shards / _SHARD.format(i))) for i in range(count)]
    return (concatenate_datasets(parts) if parts else Dataset.from_list([])), count
