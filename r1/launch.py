"""Running a trainer stage under ``accelerate launch`` (DDP, DeepSpeed ZeRO) instead of in-process.

The parent side of a launch. The artifact contract does not change: the parent process plans
the stage, opens the artifact's temporary directory, and commits it (manifest last, atomic
rename) after the launched ranks exit cleanly. The ranks only run the stage function (every rank
trains, the main rank writes files; see :mod:`r1.rank`). The parent streams the launcher's log
and, on failure, raises with its tail.

    python -m r1.lifetime --with-parent PID accelerate...   # how the launcher is started
    python -m r1.rank <spec.json>                            # what each rank runs
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field

from r1.config import Section

SPEC_FILE = "launch_spec.{machine_rank}.json"
METRICS_FILE = "launch_metrics.json"  # the main rank's metrics, read back by the parent
PROJECT_ROOT = Path(__file__).resolve().parent.parent


class LaunchConfig(Section):
    """How a trainer stage runs. Never part of the artifact key: it changes where, not what.

    With N processes each rank gets 1/N of the recipe's batch, so the effective batch (and the
    recipe's meaning) is the same as in one process.
    """

    mode: Literal["inprocess", "accelerate"] = "inprocess"
    config_file: str | None = Field(
        None, description="accelerate config (configs/accelerate/*.yaml), relative to the project"
    )
    num_processes: int = Field(1, gt=0, description="processes in all (over every machine)")
    num_machines: int = Field(1, gt=0)
    machine_rank: int = Field(0, ge=0)
    main_process_ip: str | None = None
    main_process_port: int | None = Field(None, gt=0, lt=65536)
    threads_per_process: int = Field(1, gt=0, description="torch threads per rank on CPU")
    extra_args: list[str] = Field(default_factory=list, description="passed to accelerate launch as is")
    log_tail: int = Field(60, gt=0, description="lines of the launcher's log quoted on failure")
    commit_timeout: float = Field(
        1800, gt=0, description="machine_rank > 0: seconds to wait for machine 0's commit after training"
    )


class LaunchError(RuntimeError):
    """A launched stage failed; the message carries the command and the tail of its log."""


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else PROJECT_ROOT / p


def accelerate_command(launch: LaunchConfig, spec: Path, use_cpu: bool) -> list[str]:
    """The ``accelerate launch`` command line for one stage; every rank runs ``python -m r1.rank``."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if launch.config_file:
        cfg = _resolve(launch.config_file)
        if not cfg.is_file():
            raise FileNotFoundError(f"accelerate config not found: {launch.config_file}")
        cmd += ["--config_file", str(cfg)]
    cmd += ["--num_processes", str(launch.num_processes), "--num_machines", str(launch.num_machines)]
    cmd += ["--machine_rank", str(launch.machine_rank)]
    if launch.main_process_ip:
        cmd += ["--main_process_ip", launch.main_process_ip]
    if launch.main_process_port:
        cmd += ["--main_process_port", str(launch.main_process_port)]
    if use_cpu:
        # Not --cpu: that flag makes accelerate start one process. A CPU config (use_cpu: true,
        # configs/accelerate/cpu_*.yaml) starts N ranks that train over gloo.
        cmd += ["--num_cpu_threads_per_process", str(launch.threads_per_process)]
    if launch.num_processes > 1 and not launch.config_file and not use_cpu:
        cmd += ["--multi_gpu"]  # no config file: plain DDP over the GPUs
    return [*cmd, *launch.extra_args, "-m", "r1.rank", str(spec)]


def _use_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def write_spec(stage, ctx, machine_rank: int = 0) -> Path:
    """Everything a rank needs to rebuild the stage call, as JSON in the stage's work directory.

    One file per machine: on a shared store every machine's parent writes into the same work
    directory, each with its own output directory.
    """
    config = ctx.config
    spec = {
        "stage_module": stage.fn.__module__,
        "stage_name": stage.name,
        "config": config.model_dump(mode="json"),
        "inputs": {k: v.model_dump(mode="json") for k, v in ctx.inputs.items()},
        "out_dir": str(ctx.out_dir),
        "work_dir": str(ctx.work_dir),
        "label": ctx.label,
    }
    path = Path(ctx.work_dir, SPEC_FILE.format(machine_rank=machine_rank))
    path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return path


def launch_stage(stage, ctx, launch: LaunchConfig) -> None:
    """Run ``stage`` on ``ctx`` under accelerate; stream its log; raise with the tail on failure.

    On machine 0 the main rank's metrics land in ``ctx.metrics``; the other machines' ranks write
    nothing (see :func:`r1.runner.run_stage`, which has them wait for machine 0's commit).
    """
    spec = write_spec(stage, ctx, launch.machine_rank)
    metrics = Path(ctx.work_dir, METRICS_FILE)
    if launch.machine_rank == 0:
        metrics.unlink(missing_ok=True)
    cmd = accelerate_command(launch, spec, _use_cpu())
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
    }
    print(f"[{ctx.label}] launching {launch.num_processes} processes: {' '.join(cmd[1:])}", flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=launch.log_tail)
    # A new session, so that stopping this stage stops every rank the launcher started; and the
    # launcher dies with this process, so a killed run leaves no ranks training behind it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "r1.lifetime", "--with-parent", str(os.getpid()), *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            print(line, end="", flush=True)
        rc = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    if rc != 0:
        raise LaunchError(
            f"stage {ctx.label} failed under accelerate launch (exit {rc}).\ncommand: {' '.join(cmd)}\n"
            f"last {len(tail)} lines of its log:\n" + "\n".join(tail)
        )
    if launch.machine_rank > 0:
        return
    if not metrics.is_file():
        raise LaunchError(f"stage {ctx.label}: the launched ranks exited without writing {metrics}")
    ctx.metrics.update(json.loads(metrics.read_text(encoding="utf-8")))
    ctx.metrics["launch"] = launch.model_dump(include={"mode", "num_processes", "config_file"})


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def stage_launch(config) -> LaunchConfig | None:
    """The stage config's launch section when it asks for a launcher, else None (run in-process)."""
    launch = getattr(config, "launch", None)
    return launch if isinstance(launch, LaunchConfig) and launch.mode != "inprocess" else None
