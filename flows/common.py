"""Stages as Prefect tasks whose cache key is the artifact key, plus the recipe's runtime section.

A Prefect cache hit is accepted only when the artifact's manifest verifies: the wrapper plans the
stage first and, when the artifact is missing or corrupt, runs the task with ``refresh_cache``
so Prefect's record (which would survive deleted files) is ignored and rewritten.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from prefect import task
from prefect.cache_policies import CachePolicy
from pydantic import BaseModel, Field, field_validator

from r1 import tracking
from r1.config import Section
from r1.lifetime import supervised
from r1.runner import Plan, plan, run_stage
from r1.stage import Stage
from r1.store import ArtifactRef, RemoteStore, Store, open_store, store_identity


def _supervise_prefect_server() -> None:
    """Make Prefect's ephemeral API server stop when the run that started it is killed.

    Prefect starts it with ``subprocess.Popen`` and stops it at exit; a SIGKILLed run never
    exits, and the server (about 200 MB) ran on. Its module gets a ``subprocess`` whose
    ``Popen`` wraps the command in :func:`r1.lifetime.supervised`; nothing else changes.
    """
    import subprocess
    import types

    from prefect.server.api import server as prefect_server

    if getattr(prefect_server.subprocess, "r1_supervised", False):
        return
    shim = types.SimpleNamespace(
        **{k: getattr(subprocess, k) for k in dir(subprocess) if not k.startswith("__")}
    )
    shim.Popen = lambda args, **kwargs: subprocess.Popen(supervised(list(args)), **kwargs)
    shim.r1_supervised = True
    prefect_server.subprocess = shim


_supervise_prefect_server()


class Runtime(Section):
    """How this machine runs the recipe; never part of an artifact key."""

    num_threads: int | None = Field(None, gt=0, description="torch CPU threads (default: torch's choice)")
    hf_offline: bool = Field(True, description="set HF_HUB_OFFLINE=1 (nothing is fetched from a model hub)")
    report_to: list[tracking.Backend] = Field(
        default_factory=list,
        description="experiment trackers for every trainer stage (tensorboard, wandb, mlflow, trackio); "
        "W&B runs offline unless WANDB_MODE says otherwise",
    )
    tracking_dir: str | None = Field(
        None, description="where trackers write (default: <store>/logs/<recipe name>/<stage>/<artifact key>)"
    )

    @field_validator("report_to")
    @classmethod
    def _installed(cls, v: list[str]) -> list[str]:
        """A missing backend fails here, before anything runs, not in the first trainer's setup."""
        missing = tracking.missing_backends(v)
        if missing:
            raise ValueError(f"tracking backend not installed: {', '.join(missing)}")
        return list(dict.fromkeys(v))


class _ArtifactKey(CachePolicy):
    """Prefect cache policy: the artifact key, qualified by the store that holds the artifact.

    Prefect's result records are shared by every store on the machine, and the same recipe gives
    the same artifact key in any store: without the store in the key, a flow on one store would
    get back references into another.
    """

    def compute_key(self, task_ctx, inputs, flow_parameters, **kwargs):
        store = hashlib.sha256(store_identity(inputs["store_root"]).encode()).hexdigest()[:12]
        return f"{inputs['key']}-{store}"


_TASKS: dict[str, object] = {}


def _task_for(stage: Stage):
    """One Prefect task per kind of stage, versioned by the stage version."""
    if stage.name not in _TASKS:

        def body(
            key: str,
            store_root: str,
            config: BaseModel,
            inputs: dict[str, ArtifactRef],
            label: str,
            planned: Plan,
        ):
            store = open_store(store_root)
            ref = run_stage(store, stage, config, inputs, label=label, announce=False, planned=planned)
            assert ref.key == key, f"stage {label} produced {ref.key}, planned {key}"
            return ref

        _TASKS[stage.name] = task(
            body,
            name=stage.name,
            version=stage.version,
            cache_policy=_ArtifactKey(),
            persist_result=True,
            result_serializer="json",
        )
    return _TASKS[stage.name]


_PLANS: contextvars.ContextVar[list[Plan] | None] = contextvars.ContextVar("r1_plans", default=None)


@contextlib.contextmanager
def planning() -> Iterator[list[Plan]]:
    """Walk a flow without running it: each stage is planned (cached, resumes, runs) and skipped.

    ``r1 plan`` calls a flow's function inside; every stage call appends its :class:`Plan` and
    returns the reference its artifact will have, so later stages plan on the right keys.
    Nothing is built, locked or published.
    """
    plans: list[Plan] = []
    token = _PLANS.set(plans)
    try:
        yield plans
    finally:
        _PLANS.reset(token)


def is_planning() -> bool:
    return _PLANS.get() is not None


def stage_task(
    store: Store | RemoteStore, stage: Stage, config: BaseModel, inputs: dict[str, ArtifactRef], label: str
) -> ArtifactRef:
    """Run ``stage`` as a Prefect task (or take its verified cache hit); print its status line.

    The stage is planned once, here: the plan decides whether Prefect may use its cached result,
    and the task takes it along instead of planning again.
    """
    p = plan(store, stage, config, inputs, label)
    plans = _PLANS.get()
    if plans is not None:
        plans.append(p)
        return store.ref(p.key)
    print(p.line(), flush=True)
    # the UI names each task run by its stage label and the artifact it makes (path: its result)
    t = _task_for(stage).with_options(task_run_name=f"{label} {p.key}", refresh_cache=p.status != "cached")
    ref = t(key=p.key, store_root=store.location, config=config, inputs=inputs, label=label, planned=p)
    # A cached Prefect result holds the path of the process that made it (for a remote store, in
    # that machine's cache): name the artifact by where it lives for this process.
    return store.ref(ref.key)


class Stages:
    """The stages of one flow run, bound to its store and recipe, so a flow reads like the recipe::

        run = Stages(store, recipe)
        sft_model = run(sft.STAGE, "cold_start_sft", model=base, data=cold_data)
        report = run(report.STAGE, cfg, label="report", **inputs)

    A section is named by its dotted path in the recipe (the label defaults to it with ``_`` for
    ``.``); a config the flow builds itself is passed as is, with its label.
    """

    def __init__(self, store: Store | RemoteStore, recipe: BaseModel) -> None:
        self.store = store
        self.recipe = recipe

    def __call__(
        self, stage: Stage, section: str | BaseModel, label: str | None = None, **inputs: ArtifactRef
    ) -> ArtifactRef:
        if isinstance(section, str):
            config = self.recipe
            for part in section.split("."):
                config = getattr(config, part)
            label = label or section.replace(".", "_")
        else:
            config = section
            if label is None:
                raise ValueError(f"a {type(section).__name__} given as is needs a label")
        return stage_task(self.store, stage, config, inputs, label)


class _PrefectTee:
    """stdout that also sends each line printed inside a flow or task run to that run's Prefect logs.

    The stages print their status and progress lines; Prefect's ``log_prints`` would replace the
    console's lines with logger records, and its console level (WARNING) would drop them. The tee
    keeps the console as it is and gives the UI's Logs tab the same lines.
    """

    def __init__(self, out) -> None:
        import logging
        import threading

        from prefect.logging.handlers import APILogHandler

        self.out = out
        self._local = threading.local()
        self.logger = logging.getLogger("r1.runs")
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        if not self.logger.handlers:
            self.logger.addHandler(APILogHandler())

    def write(self, text: str) -> int:
        n = self.out.write(text)
        buf = getattr(self._local, "buf", "") + text
        *lines, self._local.buf = buf.split("\n")
        if lines:
            from prefect.context import FlowRunContext, TaskRunContext

            if FlowRunContext.get() or TaskRunContext.get():
                for line in lines:
                    if line.strip():
                        self.logger.info(line)
        return n

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name: str):
        return getattr(self.out, name)


def _tee_prints_to_prefect() -> None:
    import sys

    if not isinstance(sys.stdout, _PrefectTee):
        sys.stdout = _PrefectTee(sys.stdout)


def start(recipe: BaseModel) -> Stages:
    """What every flow does first: apply the recipe's runtime, open its store, bind the stages."""
    _tee_prints_to_prefect()
    store = store_for(recipe.store)
    apply_runtime(recipe.runtime, flow=recipe.name, store=store)
    return Stages(store, recipe)


def apply_runtime(runtime: Runtime, flow: str = "run", store: Store | RemoteStore | None = None) -> None:
    """Apply the recipe's runtime section to this process (threads, hub access, trackers)."""
    import torch

    from r1.cores import set_max_threads

    if runtime.num_threads:
        torch.set_num_threads(runtime.num_threads)
    set_max_threads(torch.get_num_threads())
    if runtime.hf_offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    logs = (
        Path(runtime.tracking_dir) if runtime.tracking_dir else Path(store.root if store else "runs") / "logs"
    )
    tracking.configure(runtime.report_to, logs, flow)


def store_for(recipe_store: str | None) -> Store | RemoteStore:
    """The recipe's store (a path or an fsspec URL), else ``$R1_STORE``, else ``runs/`` in the project."""
    return open_store(recipe_store)


def publish_report(store: Store | RemoteStore, name: str, report: ArtifactRef) -> str:
    """Point ``<store>/reports/<name>`` at the report artifact, show it in Prefect's UI, return report.json."""
    from prefect.artifacts import create_markdown_artifact

    if is_planning():
        return str(Path(store.path(report.key), "report.json"))

    report = store.materialize(report)
    link = store.root / "reports" / name
    try:
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f"{link.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(Path(report.path).resolve(), target_is_directory=True)
        tmp.replace(link)
    except OSError as e:  # a read-only store still has its report, only not the convenience link
        print(f"[report] could not link {link} ({e.strerror}); the report is at {report.path}", flush=True)
    md = _inline_images(Path(report.path), Path(report.path, "report.md").read_text(encoding="utf-8"))
    create_markdown_artifact(md, key=_artifact_key(name), description=f"{name} report ({report.key})")
    return str(Path(report.path, "report.json"))


def _inline_images(folder: Path, md: str) -> str:
    """The report's markdown with its local images embedded (Prefect's UI cannot follow a relative link)."""
    import base64
    import re

    def embed(m: re.Match) -> str:
        image = folder / m.group(2)
        if not image.is_file():
            return m.group(0)
        data = base64.b64encode(image.read_bytes()).decode("ascii")
        return f"![{m.group(1)}](data:image/png;base64,{data})"

    return re.sub(r"!\[([^\]]*)\]\(([^):/]+\.png)\)", embed, md)


def _artifact_key(name: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "report"
