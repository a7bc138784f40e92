"""Running a stage against the store: plan (key, cached/resume/run), then run and commit.

Stages follow the contract in :mod:`r1.stage`. Planning checks the call against what the stage
declares and decides, without side effects, whether its artifact is cached, waits to be
published, resumes or runs. Flows wrap :func:`run_stage` in Prefect tasks whose cache key is the
artifact key (see ``flows/common.py``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from r1 import cards
from r1.config import hashable
from r1.external import fingerprints
from r1.launch import LaunchConfig, LaunchError, launch_stage, stage_launch
from r1.progress import duration
from r1.stage import Stage, StageContext
from r1.store import ArtifactRef, Provenance, RemoteStore, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    key: str
    status: Literal["cached", "publishing", "running", "resuming"]
    resume_step: int | None
    label: str
    unit: str = "step"

    def line(self) -> str:
        """The one status line a stage prints when it starts."""
        what = {
            "cached": "cached",
            "running": "running",
            "publishing": "publishing (built earlier, not yet in the store)",
        }.get(self.status, f"resuming from {self.unit} {self.resume_step}")
        return f"[{self.label}] {what} ({self.key})"


def provenance(stage: Stage, config: BaseModel, inputs: dict[str, ArtifactRef]) -> Provenance:
    """What the stage's artifact is made of: its config, its inputs and the outside files it reads."""
    return Provenance(
        stage.name,
        stage.version,
        hashable(config),
        {k: v.key for k, v in inputs.items()},
        fingerprints(config),
    )


def stage_key(stage: Stage, config: BaseModel, inputs: dict[str, ArtifactRef]) -> str:
    return provenance(stage, config, inputs).key


def plan(
    store: Store | RemoteStore,
    stage: Stage,
    config: BaseModel,
    inputs: dict[str, ArtifactRef],
    label: str = "",
) -> Plan:
    """Decide without side effects whether the stage is a cache hit, a resume or a fresh run.

    A call that does not match what the stage declares (its config type, its input roles) raises
    :class:`r1.stage.StageInputError` here, before anything runs.
    """
    stage.check(config, inputs)
    key = stage_key(stage, config, inputs)
    label = label or stage.name
    if store.verify(key).ok:
        return Plan(key, "cached", None, label)
    if store.unpublished(key):
        return Plan(key, "publishing", None, label)
    step = stage.resume_step(store.work_dir(key)) if stage.resume_step else None
    return Plan(key, "resuming" if step else "running", step, label, stage.resume_unit)


def execute(stage: Stage, ctx: StageContext) -> None:
    """Call the stage function here, or under ``accelerate launch`` when its config asks for it."""
    from r1 import progress

    launch = stage_launch(ctx.config)
    if launch is None:
        with progress.stage(ctx.label):
            stage.fn(ctx)
    else:
        launch_stage(stage, ctx, launch)


def run_stage(
    store: Store | RemoteStore,
    stage: Stage,
    config: BaseModel,
    inputs: dict[str, ArtifactRef],
    label: str = "",
    announce: bool = True,
    planned: Plan | None = None,
) -> ArtifactRef:
    """Return the verified artifact for this stage, running (or resuming) it when needed.

    ``planned`` is the plan the caller already made (a flow prints it before Prefect runs the
    task). The build holds the key's lock (:meth:`Store.lock`): a second run of the same stage on
    this store waits for the first and takes its artifact, and never removes its folders.
    """
    p = planned or plan(store, stage, config, inputs, label)
    if announce:
        print(p.line(), flush=True)
    if p.status == "cached":
        return store.ref(p.key)
    launch = stage_launch(config)
    if launch is not None and launch.num_machines > 1 and not store.shared_work:
        # Checkpoints are written by machine 0 only; a machine that cannot see them would not
        # resume with the others, and the ranks would go out of step.
        raise LaunchError(
            f"stage {p.label}: a launch over {launch.num_machines} machines needs a store on a shared "
            f"filesystem (its checkpoints must be visible to every machine), not {store.location}"
        )
    if launch is not None and launch.machine_rank > 0:
        inputs = {role: store.materialize(ref) for role, ref in inputs.items()}
        store.work_dir(p.key).mkdir(parents=True, exist_ok=True)
        return _follow(store, stage, config, inputs, p, launch)

    def waiting() -> None:
        print(f"[{p.label}] waiting: another run is building {p.key}", flush=True)

    with store.lock(p.key, on_wait=waiting):
        p = plan(store, stage, config, inputs, p.label)  # the run we waited for may have built it
        if p.status == "cached":
            return store.ref(p.key)
        if p.status == "running" or p.status == "resuming":
            _build(store, stage, config, inputs, p)
        store.publish(p.key)  # an object store's commit; a local store's artifact already is
    return store.ref(p.key)


def _build(
    store: Store | RemoteStore, stage: Stage, config: BaseModel, inputs: dict[str, ArtifactRef], p: Plan
) -> None:
    """Run the stage into a fresh temporary artifact and commit it (the caller holds the lock)."""
    existing = store.verify(p.key)
    if store.path(p.key).exists() and not existing.ok:
        log.warning("artifact %s fails verification (%s); rebuilding it", p.key, existing.reason)
    prov = provenance(stage, config, inputs)
    inputs = {role: store.materialize(ref) for role, ref in inputs.items()}  # readable here
    work = store.work_dir(p.key)
    work.mkdir(parents=True, exist_ok=True)
    with store.writing(prov) as w:
        ctx = StageContext(config=config, inputs=inputs, out_dir=w.path, work_dir=work, label=p.label)
        start = time.monotonic()
        execute(stage, ctx)
        w.metrics.update(ctx.metrics)
        # This attempt's time only: a resumed stage says where it resumed so readers can scale it.
        w.metrics["wall_seconds"] = round(time.monotonic() - start, 3)
        if p.resume_step:
            w.metrics["resumed_from"] = p.resume_step
        if cards.is_model(w.path) and not (w.path / cards.CARD).exists():
            (w.path / cards.CARD).write_text(_card(store, prov, w.metrics), encoding="utf-8")
    print(f"[{p.label}] done in {duration(w.metrics['wall_seconds'])}", flush=True)
    if not stage.keep_work:
        shutil.rmtree(work, ignore_errors=True)


def _card(store: Store | RemoteStore, prov: Provenance, metrics: dict) -> str:
    """The model card of an artifact being built: its manifest-to-be and its parents' lineage."""
    # no "created": the card leaves out what differs between attempts (time, resumes)
    draft = {**prov.manifest_fields(), "metrics": metrics}
    lineage = [(0, "", prov.key)]
    for role, key in sorted(prov.inputs.items()):
        rows = store.lineage(key)
        lineage += [(depth + 1, role if depth == 0 else r, k) for depth, r, k in rows]
    return cards.model_card(
        draft, parent=lambda k: store.manifest(k) if store.exists(k) else None, lineage=lineage
    )


def _follow(
    store: Store | RemoteStore,
    stage: Stage,
    config: BaseModel,
    inputs: dict[str, ArtifactRef],
    p: Plan,
    launch: LaunchConfig,
) -> ArtifactRef:
    """Machine ``machine_rank > 0`` of a multi-machine launch: train, then take machine 0's commit.

    Only machine 0 writes and commits the artifact, so every machine must see one store (a shared
    mount or an object store); this machine's ranks write into a scratch directory that is dropped.
    """
    scratch = Path(tempfile.mkdtemp(prefix=f"{p.key}.machine{launch.machine_rank}."))
    try:
        ctx = StageContext(
            config=config, inputs=inputs, out_dir=scratch, work_dir=store.work_dir(p.key), label=p.label
        )
        launch_stage(stage, ctx, launch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    deadline = time.monotonic() + launch.commit_timeout
    while not store.verify(p.key).ok:
        if time.monotonic() > deadline:
            raise LaunchError(
                f"stage {p.label}: this machine's ranks finished, but machine 0 did not commit {p.key} to "
                f"{store.location} within {launch.commit_timeout:.0f} s; every machine must use one shared store"
            )
        time.sleep(1.0)
    return store.ref(p.key)
