"""Faults leave nothing behind: interrupted runs resume exactly, concurrent runs share a store,
a killed run takes its Prefect server with it, a store that cannot take the report link still
reports. The scripted interruptions are those of the fault-injection run that found the store's
other bugs: what held there (every rerun finishes, nothing half-written is ever visible, no
finished artifact changes, GRPO resumes bit-identical) must keep holding."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_R1_ZERO

pytestmark = pytest.mark.e2e
ARGS = ("grpo.max_steps=12", "grpo.save_steps=2")
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _cli(store: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "flows.cli", "run", "r1-zero", "--recipe", str(TINY_R1_ZERO)]
    return [*cmd, f"store={store}", *ARGS, *extra]


def _files(store: Path) -> dict[str, dict]:
    """Each committed artifact's listed files (path -> size and sha256), by key."""
    out = {}
    for m in (store / "artifacts").glob("*/manifest.json"):
        out[m.parent.name] = json.loads(m.read_text())["files"]
    return out


_TIMED = {"train_log.jsonl", "report.json", "report.md"}  # hold wall times, which differ by run


def _learned(store: Path) -> dict[str, object]:
    """Everything a run computed, by artifact: files by sha256, GRPO's per-step log without timings.

    Pretraining logs means over windows of steps, and a window that spans a resume averages only
    the steps after it (TRL's ``num_tokens`` restarts too), so its log is not compared; its
    weights are.
    """
    out: dict[str, object] = {}
    for key, files in _files(store).items():
        out[key] = {f: meta["sha256"] for f, meta in files.items() if f not in _TIMED}
        log = store / "artifacts" / key / "train_log.jsonl"
        if key.startswith("grpo-") and log.is_file():
            rows = [json.loads(line) for line in log.read_text().splitlines()]
            untimed = [
                {k: v for k, v in r.items() if not any(t in k for t in ("time", "timing", "per_second"))}
                for r in rows
            ]
            out[f"{key}/train_log"] = untimed
    return out


def _all_verify(store: Path) -> None:
    from r1.store import Store

    s = Store(store)
    folders = [d.name for d in (store / "artifacts").iterdir()] if (store / "artifacts").is_dir() else []
    bad = {k: s.verify(k, deep=True).reason for k in folders if not s.verify(k, deep=True).ok}
    assert not bad, f"visible artifacts that do not verify: {bad}"


# (signal, what must newly exist in the store before it is sent), in the order the flow meets them
KILLS = [
    (signal.SIGKILL, "work/base-*/checkpoint-*/trainer_state.json"),  # pretraining, mid-run
    (signal.SIGKILL, "tmp/evaluate-*"),  # an evaluation being written
    (signal.SIGINT, "work/grpo-*/checkpoint-4/trainer_state.json"),  # Ctrl-C during GRPO
    (signal.SIGKILL, "work/grpo-*/checkpoint-8/trainer_state.json"),  # kill -9 after resuming
]


def _run_until(store: Path, pattern: str, sig: int) -> None:
    before = set(store.glob(pattern))
    proc = subprocess.Popen(
        _cli(store), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while not set(store.glob(pattern)) - before:
            assert proc.poll() is None, f"the run ended before {pattern}:\n{proc.stdout.read()}"
            assert time.monotonic() < deadline, f"no {pattern} within 300 s"
            time.sleep(0.02)
        proc.send_signal(sig)
    finally:
        proc.wait(timeout=120)


def test_scripted_interruptions_resume_exactly(tmp_path):
    reference = subprocess.run(
        _cli(tmp_path / "ref"), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert reference.returncode == 0, reference.stdout + reference.stderr
    expected = _learned(tmp_path / "ref")

    store = tmp_path / "killed"
    for sig, pattern in KILLS:
        finished = _files(store) if store.exists() else {}
        _run_until(store, pattern, sig)
        _all_verify(store)  # nothing half-written is visible
        now = _files(store)
        assert all(now[k] == v for k, v in finished.items()), "a finished artifact changed"
    out = subprocess.run(_cli(store), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[r1_zero] resuming from step 8" in out.stdout or "[r1_zero] cached" in out.stdout
    _all_verify(store)
    assert _learned(store) == expected  # same keys; weights, data and logs bit-identical to the clean run


def test_two_flows_on_one_store_both_finish(tmp_path):
    """Started 1 s apart, one of two runs failed: the other's clean-up removed its folders."""
    store = tmp_path / "shared"
    first = subprocess.Popen(
        _cli(store), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    time.sleep(1.0)
    second = subprocess.Popen(
        _cli(store), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    outs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], "\n---\n".join(outs)
    reports = {o.split("report: ")[1].split()[0] for o in outs}
    assert len(reports) == 1
    _all_verify(store)
    assert "waiting: another run is building" in "".join(outs)


def _servers() -> set[int]:
    out = subprocess.run(
        ["pgrep", "-f", "uvicorn.*prefect.server.api.server:create_app"], capture_output=True, text=True
    )
    return {int(p) for p in out.stdout.split()}


def test_a_killed_run_takes_its_prefect_server_with_it(tmp_path):
    before = _servers()
    proc = subprocess.Popen(
        _cli(tmp_path), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not (_servers() - before) or not (tmp_path / "artifacts").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        ours = _servers() - before
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    deadline = time.monotonic() + 20
    while ours & _servers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ours & _servers(), "the run's Prefect server outlived it"


def test_a_store_that_cannot_take_the_report_link_still_reports(tmp_path):
    """A read-only store with everything cached failed writing reports/."""
    first = subprocess.run(_cli(tmp_path), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    reports = tmp_path / "reports"
    for link in reports.iterdir():
        link.unlink()
    reports.rmdir()
    reports.write_text("not a folder")  # as root, permissions would not stop the write; this does
    again = subprocess.run(_cli(tmp_path), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "could not link" in again.stdout and "report: " in again.stdout
