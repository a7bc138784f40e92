"""One rank of a stage launched under ``accelerate launch``: ``python -m r1.rank <spec.json>``.

The parent (:mod:`r1.launch`) writes the spec: which stage (module and name), its config as JSON,
its inputs and folders. Every rank rebuilds the stage call from it and trains; the main rank
writes the artifact's files and its metrics. The parent commits the artifact after all ranks exit.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from r1 import progress
from r1.launch import METRICS_FILE
from r1.lifetime import die_with_parent
from r1.stage import StageContext, load_stage
from r1.store import ArtifactRef
from r1.training import is_main_process, world_size


def run_rank(spec_path: Path) -> None:
    """Rebuild the stage call from the spec and run it; the main rank reports metrics."""
    from accelerate import PartialState

    # Set up the process group (and DeepSpeed's) before any model loads: under ZeRO-3,
    # from_pretrained partitions weights at load time and needs the real world size.
    PartialState()
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    stage = load_stage(spec["stage_module"], spec["stage_name"])
    ctx = StageContext(
        config=stage.parse_config(spec["config"]),
        inputs={k: ArtifactRef.model_validate(v) for k, v in spec["inputs"].items()},
        out_dir=Path(spec["out_dir"]),
        work_dir=Path(spec["work_dir"]),
        label=spec["label"],
    )
    with progress.stage(ctx.label):
        stage.fn(ctx)
    ctx.metrics["world_size"] = world_size()
    if is_main_process():
        tmp = Path(spec["work_dir"], METRICS_FILE + ".tmp")
        tmp.write_text(json.dumps(ctx.metrics, default=str), encoding="utf-8")
        tmp.replace(Path(spec["work_dir"], METRICS_FILE))


def main(spec_path: Path) -> None:
    die_with_parent()  # the launcher's agent is this rank's parent
    run_rank(spec_path)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank exits while the main rank is still writing
    # The work is done and written: leave without running C++ teardown. A CI run once saw a ZeRO-3
    # rank abort there ("terminate called without an active exception") after a finished stage,
    # which failed the stage although its artifact was complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m r1.rank <spec.json>")
    main(Path(sys.argv[1]))
