"""Experiment tracking: a runtime setting for every trainer stage, never part of an artifact key.

``runtime.report_to: [tensorboard, wandb, mlflow, trackio]`` turns the trainers' logging on
without retraining anything (the key is computed from the stage sections, the runtime is not
one of them). Logs go to ``<store>/logs/<run name>/<stage label>/<artifact key>`` (or
``runtime.tracking_dir``): outside the stage's work folder, which is deleted when a stage
succeeds, and the same folder again when a killed stage resumes. W&B runs offline unless
``WANDB_MODE`` says otherwise (``wandb sync`` uploads later).

The flow process configures it through environment variables so the ranks of an
``accelerate launch`` (child processes) see the same setting.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path
from typing import Any, Literal

from r1 import progress

Backend = Literal["tensorboard", "wandb", "mlflow", "trackio"]
# backend -> (module that must import, the project's extra that installs it)
BACKENDS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
    "trackio": ("trackio", "trackio"),
}
# backends that take TRL's table of sampled completions
TABLE_BACKENDS = ("wandb", "trackio")

_REPORT_TO = "R1_REPORT_TO"
_DIR = "R1_TRACKING_DIR"
_FLOW = "R1_TRACKING_FLOW"


def missing_backends(names: list[str]) -> list[str]:
    """The backends in ``names`` whose package is not installed, each with how to install it."""
    out = []
    for name in names:
        module, extra = BACKENDS[name]
        if importlib.util.find_spec(module) is None:
            out.append(f"{name} (pip install -e '.[{extra}]')")
    return out


def configure(report_to: list[str], root: Path, flow: str) -> None:
    """Set this process's (and its children's) tracking: the backends, the log root, the flow name.

    The per-flow folders of MLflow and Trackio and W&B's project are defaults: a value the user
    exported is kept.
    """
    if not report_to:
        for var in (_REPORT_TO, _DIR, _FLOW):
            os.environ.pop(var, None)
        return
    root = Path(root).resolve()
    os.environ[_REPORT_TO] = ",".join(report_to)
    os.environ[_DIR] = str(root)
    os.environ[_FLOW] = flow
    if "wandb" in report_to:  # nothing leaves the machine unless the user says so
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_PROJECT", "r1-pipeline")
        os.environ.setdefault("WANDB_QUIET", "true")  # no run summary on the console; the run has it
    os.environ.setdefault("MLFLOW_TRACKING_URI", (root / "mlruns").as_uri())
    os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", flow)
    os.environ.setdefault("TRACKIO_DIR", str(root / "trackio"))


def report_to() -> list[str]:
    """The backends this process reports to ([] unless the flow's runtime configured some)."""
    return [b for b in os.environ.get(_REPORT_TO, "").split(",") if b]


def run_dir(work_dir: Path) -> Path:
    """Where the running stage's logs go: named by run (the recipe name), stage label (:func:`r1.progress.stage`) and run (the artifact key)."""
    flow = os.environ.get(_FLOW, "run")
    return Path(os.environ.get(_DIR, "logs")) / flow / progress.label() / Path(work_dir).name


def trainer_kwargs(work_dir: Path) -> dict[str, Any]:
    """TrainingArguments for tracking: ``report_to``, a run name, and the stage's log folder.

    TensorBoard and W&B read their folder from the environment (``TENSORBOARD_LOGGING_DIR``,
    ``WANDB_DIR``) when the trainer is built, so it is set here, per stage, just before.
    """
    backends = report_to()
    if not backends:
        return {"report_to": []}
    where = run_dir(work_dir)
    where.mkdir(parents=True, exist_ok=True)
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(where / "tensorboard")
    os.environ["WANDB_DIR"] = str(where)
    flow = os.environ.get(_FLOW, "run")
    return {
        "report_to": backends,
        "run_name": f"{flow}/{progress.label()}/{Path(work_dir).name}",
        "project": flow,
    }


def finish_runs() -> None:
    """End the trackers' active runs, so the next stage of the flow starts its own.

    The trainers' callbacks start a run when training begins but leave W&B's, MLflow's and
    Trackio's open (they are per process), and a later stage would log into it.
    """
    import logging
    import sys

    try:
        _finish(report_to(), sys.modules)
    except Exception as e:  # a tracker's own failure must not hide the stage's result or error
        logging.getLogger(__name__).warning("could not close the tracker runs: %s", e)


def _finish(backends: list[str], modules: dict) -> None:
    if "wandb" in backends and "wandb" in modules and modules["wandb"].run is not None:
        wandb = modules["wandb"]
        print(f"[{progress.label()}] W&B run (offline: `wandb sync` uploads it): {wandb.run.dir}", flush=True)
        wandb.finish()
        wandb.teardown()  # its settings (WANDB_DIR) are read once per setup: the next stage sets its own
    if "mlflow" in backends and "mlflow" in modules and modules["mlflow"].active_run() is not None:
        modules["mlflow"].end_run()
    if "trackio" in backends and "trackio" in modules:
        with contextlib.suppress(Exception):  # no run was started (trackio raises then): nothing to end
            modules["trackio"].finish()
