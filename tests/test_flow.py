"""The whole R1-Zero flow on the tiny recipe: runs, reports, reruns fully cached, resumes after SIGKILL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_R1_ZERO

pytestmark = pytest.mark.e2e
STAGES = ("data", "base", "eval:base", "r1_zero", "eval:r1_zero", "report")


def test_flow_runs_then_reruns_fully_cached(prefect_api, tmp_path, capsys):
    from flows.r1_zero import r1_zero
    from flows.recipes import load
    from r1.store import Store

    recipe = load("r1-zero", TINY_R1_ZERO, [f"store={tmp_path}"])
    report_path = Path(r1_zero(recipe))
    first = capsys.readouterr().out
    for label in STAGES:
        assert f"[{label}] running" in first
    report = json.loads(report_path.read_text())
    assert list(report["stages"]) == ["base", "r1_zero"]
    for m in report["stages"].values():
        assert {"accuracy", "pass@1", "format_rate", "mean_length"} <= set(m)
    assert (report_path.parent / "grpo_curves.png").stat().st_size > 0
    assert "## Sample completions" in (report_path.parent / "report.md").read_text(encoding="utf-8")
    assert (tmp_path / "reports" / recipe.name / "report.json").is_file()
    store = Store(tmp_path)
    assert all(store.verify(m["key"]).ok for m in store.list())
    n_artifacts = len(store.list())

    from flows.cli import launch
    from flows.registry import flow_spec

    assert Path(launch(flow_spec("r1-zero"), recipe, [f"store={tmp_path}"])) == report_path
    second = capsys.readouterr().out
    for label in STAGES:
        assert f"[{label}] cached" in second
    assert "running" not in second
    assert len(store.list()) == n_artifacts
    _prefect_shows_the_run(recipe.name, f"{recipe.name} store={tmp_path}")

    # The same recipe on a copy of the store, the original gone: every reference must point into
    # the copy (Prefect's cache is per machine, not per store).
    other = tmp_path.parent / f"{tmp_path.name}-copy"
    shutil.copytree(tmp_path, other, symlinks=True)
    shutil.rmtree(tmp_path / "artifacts")
    copied = Path(r1_zero(load("r1-zero", TINY_R1_ZERO, [f"store={other}"])))
    assert copied.is_relative_to(other) and copied.is_file()
    assert "running" not in capsys.readouterr().out


def _prefect_shows_the_run(recipe_name: str, run_name: str) -> None:
    """The flow run is named and tagged, its task runs name their artifacts, its lines reach the Logs tab."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterName,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()

    async def read():
        async with get_client() as client:
            runs = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run_name]))
            )
            assert runs, f"no flow run named {run_name!r}"
            tasks = await client.read_task_runs()
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[runs[0].id]))
            )
            artifacts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[runs[0].id]))
            )
            return runs[0], tasks, logs, artifacts

    run, tasks, logs, artifacts = asyncio.run(read())
    assert [a.type for a in artifacts] == ["markdown"] and "](data:image/png;base64," in artifacts[0].data
    assert {"flow:r1-zero", f"recipe:{recipe_name}"} <= set(run.tags)
    assert any(t.name.startswith("r1_zero grpo-") for t in tasks)
    assert any(log.message.startswith("[r1_zero] cached (grpo-") for log in logs), [x.message for x in logs][
        :5
    ]


def _cli(store: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "flows.cli",
        "run",
        "r1-zero",
        "--recipe",
        str(TINY_R1_ZERO),
        f"store={store}",
        *extra,
    ]


def _kill_at_first_grpo_checkpoint(cmd: list[str], store: Path, env: dict) -> None:
    """Start the CLI and kill -9 it once a GRPO checkpoint is complete, before GRPO finishes."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if any((store / "work").glob("grpo-*/checkpoint-*/trainer_state.json")):
                break
            assert proc.poll() is None, "the run ended before GRPO's first checkpoint:\n" + proc.stdout.read()
            time.sleep(0.05)
        else:
            pytest.fail("no GRPO checkpoint within 300 s")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert not list((store / "artifacts").glob("grpo-*")), "GRPO finished before the kill"


def test_sigkill_during_grpo_then_rerun_resumes(tmp_path):
    """Kill -9 the real CLI after GRPO's first checkpoint; the rerun skips finished stages and resumes."""
    args = ("grpo.max_steps=40", "grpo.save_steps=4")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    _kill_at_first_grpo_checkpoint(_cli(tmp_path, *args), tmp_path, env)

    out = subprocess.run(
        _cli(tmp_path, *args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for label in ("data", "base", "eval:base"):
        assert f"[{label}] cached" in out.stdout
    resumed = [line for line in out.stdout.splitlines() if line.startswith("[r1_zero] resuming from step ")]
    assert resumed, out.stdout
    assert int(resumed[0].split("step ")[1].split()[0]) >= 4
    assert "report: " in out.stdout
    report = Path(out.stdout.split("report: ")[1].split()[0])
    assert json.loads(report.read_text())["stages"]["r1_zero"]["n_problems"] == 16


def test_r1_full_flow_reports_every_stage_and_reruns_cached(prefect_api, tmp_path, capsys):
    from flows.r1_full import ORDER, r1_full
    from flows.recipes import load
    from r1.store import Store

    full = load("r1-full", ROOT / "configs/tiny/r1_full.yaml", [f"store={tmp_path}"])
    report_path = Path(r1_full(full))
    out = capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert list(report["stages"]) == list(ORDER)
    for m in report["stages"].values():
        assert {"accuracy", "pass@1", "format_rate", "lang_consistency", "mean_length"} <= set(m)
    assert 0.0 <= report["reward_model"]["pairwise_accuracy"] <= 1.0
    store = Store(tmp_path)
    assert all(store.verify(m["key"]).ok for m in store.list())
    for label in (
        "cold_start_samples",
        "cold_start_data",
        "cold_start_sft",
        "reasoning_grpo",
        "rejection_samples",
        "rejection_data",
        "rejection_sft",
        "preferences",
        "reward_model",
        "final_grpo",
    ):
        assert f"[{label}] running" in out
    assert Path(r1_full(full)) == report_path
    second = capsys.readouterr().out
    assert "running" not in second and second.count("cached") >= 20

    # thinking-mode fusion: everything up to the rejection SFT is reused, then both modes train
    fused = load("r1-full", ROOT / "configs/tiny/r1_full.yaml", [f"store={tmp_path}", "fusion.enabled=true"])
    fused_path = Path(r1_full(fused))
    report = json.loads(fused_path.read_text())
    out = capsys.readouterr().out
    assert "[rejection_sft] cached" in out and "[reward_model] cached" in out
    for label in ("fusion_data", "fusion_sft", "final_grpo", "eval:fusion_sft", "eval:final_grpo"):
        assert f"[{label}] running" in out
    assert list(report["stages"]) == [*ORDER[:-1], "fusion_sft", ORDER[-1]]
    for name in ("fusion_sft", "final_grpo"):
        by_mode = report["stages"][name]["by_mode"]
        assert set(by_mode) == {"think", "no_think"}
        assert all(0 <= m["mode_adherence"] <= 1 and "pass@1" in m for m in by_mode.values())
    assert "by_mode" not in report["stages"]["rejection_sft"]
    final = Store(tmp_path).ref(report["training"]["final_grpo"]["artifact"])
    assert "rewards/thinking_mode/mean" in final.file("train_log.jsonl").read_text()  # both modes trained
    assert "follows the mode" in (fused_path.parent / "report.md").read_text()


def test_distill_data_survives_sigkill_with_exactly_the_uninterrupted_rows(tmp_path):
    """SIGKILL during teacher generation, rerun: the same rows as an uninterrupted run, none lost or doubled."""
    from datasets import load_from_disk

    recipe = ROOT / "configs/tiny/distill.yaml"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = ("distill.samples.limit=48", "distill.samples.shard_size=2")

    def cli(store):
        return [
            sys.executable,
            "-m",
            "flows.cli",
            "run",
            "distill-data",
            "--recipe",
            str(recipe),
            f"store={store}",
            *args,
        ]

    clean = subprocess.run(
        cli(tmp_path / "clean"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert clean.returncode == 0, clean.stdout + clean.stderr
    proc = subprocess.Popen(
        cli(tmp_path / "killed"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    shards = tmp_path / "killed" / "work"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            # the teacher's sampling has 24 shards; the pipeline's own sampling stages have 2 each
            if any(len(list(d.glob("shard-*"))) >= 3 for d in shards.glob("sample-*/shards")):
                break
            assert proc.poll() is None, "finished before the kill:\n" + proc.stdout.read()
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    rerun = subprocess.run(
        cli(tmp_path / "killed"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "[teacher_traces] resuming from shard" in rerun.stdout

    clean_key = clean.stdout.split("[teacher_traces] running (")[1].split(")")[0]
    killed_key = rerun.stdout.split("[teacher_traces] resuming from shard ")[1].split("(")[1].split(")")[0]
    assert clean_key == killed_key
    a = load_from_disk(str(tmp_path / "clean" / "artifacts" / clean_key)).to_list()
    b = load_from_disk(str(tmp_path / "killed" / "artifacts" / killed_key)).to_list()
    assert a == b and len(a) == 48 * 2
    card = Path(rerun.stdout.split("data: ")[1].split()[0])
    stats = json.loads((card.parent / "stats.json").read_text())
    assert stats["generated"] == stats["kept"] + sum(stats["dropped"].values()) == 96


def test_a_second_machine_reads_the_flow_from_an_object_store(
    prefect_api, tmp_path, s3_store_url, s3_endpoint, monkeypatch, capsys
):
    """Machine A runs the flow on S3 (a moto server); machine B, another process with an empty
    cache, gets every stage as a cache hit, reads the report and re-hashes every artifact."""
    from flows.r1_zero import r1_zero
    from flows.recipes import load

    monkeypatch.setenv("R1_CACHE", str(tmp_path / "a"))
    r1_zero(load("r1-zero", TINY_R1_ZERO, [f"store={s3_store_url}"]))
    first = capsys.readouterr().out
    assert all(f"[{label}] running" in first for label in STAGES), first

    env = {**os.environ, "R1_CACHE": str(tmp_path / "b"), "FSSPEC_S3": json.dumps(s3_endpoint)}
    out = subprocess.run(_cli(s3_store_url), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert all(f"[{label}] cached" in out.stdout for label in STAGES) and "running" not in out.stdout
    report = Path(out.stdout.split("report: ")[1].split()[0])
    assert report.is_relative_to(tmp_path / "b") and json.loads(report.read_text())["stages"]["r1_zero"]
    verify = [sys.executable, "-m", "flows.cli", "verify", "--store", s3_store_url]
    checked = subprocess.run(verify, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0 and checked.stdout.count("ok ") == len(STAGES), checked.stdout


def test_a_process_work_pool_runs_the_deployed_recipe(tmp_path):
    """README's deployment path: a Prefect server, a process work pool, `prefect deploy` of the
    `r1` entry flow, `prefect deployment run` with a recipe and overrides, one worker run."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prefect = [str(Path(sys.executable).parent / "prefect")]
    api = f"http://127.0.0.1:{port}/api"
    # INFO: the worker's log then says how the flow run ended (importing `flows` sets WARNING).
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "home"),
        "PREFECT_API_URL": api,
        "PREFECT_LOGGING_LEVEL": "INFO",
    }
    server = subprocess.Popen(
        [*prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env={**env, "PREFECT_API_URL": ""},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def cli(*args: str, cwd: Path = ROOT) -> str:
        out = subprocess.run([*prefect, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout + out.stderr

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, (
                    "the Prefect server did not start"
                )
                time.sleep(0.5)
        cli("work-pool", "create", "r1", "--type", "process")
        cli("--no-prompt", "deploy", "flows/entry.py:r1", "--name", "recipe", "--pool", "r1")
        store = tmp_path / "store"
        overrides = json.dumps([f"store={store}", "grpo.max_steps=2"])
        cli(
            "deployment",
            "run",
            "r1/recipe",
            "--param",
            "flow=r1-zero",
            "--param",
            f"recipe={TINY_R1_ZERO}",
            "--param",
            f"overrides={overrides}",
        )
        worker = cli("worker", "start", "--pool", "r1", "--run-once", cwd=tmp_path)  # another directory
        assert "[r1_zero] running" in worker and "Finished in state Completed()" in worker, worker
        report = json.loads((store / "reports" / "r1-zero-tiny" / "report.json").read_text())
        assert report["stages"]["r1_zero"]["n_problems"] == 16
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def test_seeds_run_once_each_share_the_data_and_report_the_spread(tmp_path):
    out = subprocess.run(
        [*_cli(tmp_path), "--seeds", "0,1", "grpo.max_steps=2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("[data] running") == 1 and out.stdout.count("[data] cached") == 1
    assert out.stdout.count("[base] running") == 2  # the seed changes the model's initialisation
    report = json.loads(Path(out.stdout.split("report: ")[1].split()[0]).read_text())
    assert report["seeds"] == [0, 1] and set(report["stages"]) == {"base", "r1_zero"}
    spread = report["spread"]["r1_zero"]["pass@1"]
    assert (
        spread["n"] == 2 and spread["sd"] >= 0 and spread["ci95"][0] <= report["stages"]["r1_zero"]["pass@1"]
    )
    per_seed = report["per_seed"]["base"]["mean_length"]
    assert report["stages"]["base"]["mean_length"] == pytest.approx(sum(per_seed) / 2)
    single = json.loads((tmp_path / "reports" / "r1-zero-tiny-seed1" / "report.json").read_text())
    assert 0 <= single["stages"]["base"]["se"]["accuracy"] <= 0.5
    assert "standard error" in (tmp_path / "reports" / "r1-zero-tiny-seed1" / "report.md").read_text()


def test_the_tiny_ablation_trains_every_variant_and_reports_them(tmp_path):
    recipe = ROOT / "configs/tiny/ablate.yaml"
    cmd = [sys.executable, "-m", "flows.cli", "run", "ablate", "--recipe", str(recipe), f"store={tmp_path}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(Path(out.stdout.split("report: ")[1].split()[0]).read_text())
    variants = {
        "grpo",
        "dr_grpo",
        "dapo",
        "gspo",
        "dr_grpo+kimi_length",
        "dr_grpo+curated",
        "dr_grpo+curriculum",
    }
    assert set(report["variants"]) == variants and report["seeds"] == [0, 1]
    for row in report["variants"].values():
        assert {
            "pass@1",
            "pass@1_sd",
            "mean_length",
            "wall_seconds",
            "generated_tokens",
            "time_to_baseline_s",
        } <= set(row)
        assert row["generated_tokens"] > 0 and len(row["per_seed"]) == 2
    # dynamic sampling generated more than one rollout per step on a model without a signal
    assert report["variants"]["dapo"]["generated_tokens"] > report["variants"]["dr_grpo"]["generated_tokens"]
    assert "[selected_prompts] kept" in out.stdout


def test_r1_tools_runs_reports_the_tool_table_and_resumes_after_sigkill(tmp_path):
    """The agent-RL flow: kill -9 during its tool GRPO, rerun, and the report has every tool figure."""
    recipe = ROOT / "configs/tiny/r1_tools.yaml"
    cmd = [sys.executable, "-m", "flows.cli", "run", "r1-tools", "--recipe", str(recipe), f"store={tmp_path}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    _kill_at_first_grpo_checkpoint(cmd, tmp_path, env)

    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    for label in ("data", "base", "eval:base", "eval:base+tool"):
        assert f"[{label}] cached" in out.stdout
    assert "[tools_rl] resuming from step " in out.stdout
    report = json.loads(Path(out.stdout.split("report: ")[1].split()[0]).read_text())
    assert set(report["stages"]) == {"base", "base+tool", "tools_rl", "tools_rl+tool"}
    tool = report["stages"]["tools_rl+tool"]
    for key in ("tool_call_rate", "calls_per_episode", "well_formed_call_rate", "used_call_rate"):
        assert 0 <= tool[key] <= (3 if key == "calls_per_episode" else 1), key
    assert "tool_call_rate" not in report["stages"]["tools_rl"]  # no tool offered, no tool figures
    assert 0 < report["training"]["tools_rl"]["rollout_share"] < 1
