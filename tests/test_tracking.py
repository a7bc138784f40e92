"""Experiment tracking is a runtime setting: checked before anything runs, outside every key."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_R1_ZERO


def test_a_missing_backend_fails_at_load_time_with_the_install_line(monkeypatch):
    from flows.recipes import load
    from r1.config import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError) as e:
        load("r1-zero", TINY_R1_ZERO, ["runtime.report_to=[wandb]"])
    assert "runtime.report_to" in str(e.value) and "pip install -e '.[wandb]'" in str(e.value)
    with pytest.raises(ConfigError, match="report_to"):
        load("r1-zero", TINY_R1_ZERO, ["runtime.report_to=[tensorbored]"])


def test_trackers_in_trl_args_point_to_the_runtime_setting():
    from flows.recipes import load
    from r1.config import ConfigError

    with pytest.raises(ConfigError, match=r"runtime\.report_to"):
        load("r1-zero", TINY_R1_ZERO, ["grpo.trl_args={report_to: [tensorboard]}"])


@pytest.mark.e2e
def test_tensorboard_logs_survive_the_run_and_turning_them_off_retrains_nothing(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def run(*extra: str) -> str:
        cmd = [sys.executable, "-m", "flows.cli", "run", "r1-zero", "--recipe", str(TINY_R1_ZERO)]
        out = subprocess.run(
            [*cmd, f"store={tmp_path}", *extra], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    run("runtime.report_to=[tensorboard]")
    logs = tmp_path / "logs" / "r1-zero-tiny"  # the run's name
    grpo_runs = list((logs / "r1_zero").glob("grpo-*/tensorboard"))
    assert len(grpo_runs) == 1 and list((logs / "base").glob("base-*/tensorboard"))
    assert not list((tmp_path / "work").glob("*/tensorboard")), "logs must not live in a work folder"
    events = EventAccumulator(str(grpo_runs[0]))
    events.Reload()
    rewards = events.Scalars("train/reward")
    assert len(rewards) >= 2 and all(r.step > 0 for r in rewards)
    # the artifact is the one an untracked run asks for: nothing retrains
    again = run()
    assert "running" not in again and "[r1_zero] cached" in again
    report = json.loads(Path(again.split("report: ")[1].split()[0]).read_text())
    assert "r1_zero" in report["stages"]


def test_each_stage_closes_its_tracker_runs_and_a_tracker_failure_hides_nothing(monkeypatch):
    import sys
    import types

    from r1 import tracking

    calls = []
    run = types.SimpleNamespace(dir="/x")
    wandb = types.SimpleNamespace(
        run=run, finish=lambda: calls.append("finish"), teardown=lambda: calls.append("teardown")
    )
    tracking._finish(["wandb"], {"wandb": wandb})
    assert calls == ["finish", "teardown"]  # the next stage's run reads its own WANDB_DIR
    tracking._finish(["tensorboard"], {"wandb": wandb})
    assert calls == ["finish", "teardown"]  # not a backend of this run: left alone

    def broken():
        raise RuntimeError("tracker down")

    monkeypatch.setenv("R1_REPORT_TO", "wandb")
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(run=run, finish=broken, teardown=broken))
    tracking.finish_runs()  # logs a warning, raises nothing
