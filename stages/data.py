"""Task data stage: RL prompts, the held-out split and whatever else the task's world provides.

Writes one Arrow ``DatasetDict`` with splits ``train`` (RL prompts) and ``test`` (held out:
excluded from everything a model trains on) and, for the micro-world, ``corpus`` (imperfect
traces for pretraining) and ``general`` (non-reasoning prompts for the SFT mix, the preference
pairs and the final RL stage); ``stats.json`` says what was read and dropped per split. The world
(:mod:`data.worlds`) builds the splits; this stage only writes them.
"""

from __future__ import annotations

import json

from datasets import DatasetDict

from data.worlds import DataConfig, world_of
from r1.stage import Stage, StageContext


def splits_of(cfg) -> set[str]:
    """The splits this stage writes for ``cfg`` (recipes check the splits their stages read)."""
    return world_of(cfg.kind).splits(cfg)


def build_task_data(ctx: StageContext) -> None:
    splits, stats, metrics = world_of(ctx.config.kind).build(ctx.config)
    DatasetDict(splits).save_to_disk(str(ctx.out_dir))
    (ctx.out_dir / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
    ctx.metrics.update(metrics)
    ctx.metrics.update({f"n_{name}": len(ds) for name, ds in splits.items()})
    dropped = {f"{split}.{k}": v for split, st in stats.items() for k, v in st["dropped"].items()}
    if dropped:
        ctx.metrics["dropped"] = dropped
        print(f"[{ctx.label}] dropped {dropped} (see stats.json)", flush=True)


STAGE = Stage(name="task_data", version="1", fn=build_task_data, config=DataConfig)
