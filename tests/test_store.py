"""Artifact store: stable keys, atomic commits, verification that catches tampering."""

from __future__ import annotations

import json
import shutil

import pytest

from r1.config import Section
from r1.runner import plan, run_stage
from r1.stage import Stage
from r1.store import MANIFEST, artifact_key


class Cfg(Section):
    value: int = 1


def _write(ctx):
    (ctx.out_dir / "data.txt").write_text(f"value={ctx.config.value}")
    (ctx.out_dir / "sub").mkdir()
    (ctx.out_dir / "sub" / "more.bin").write_bytes(b"\x00\x01")
    ctx.metrics["value"] = ctx.config.value


STAGE = Stage("toy", "1", _write, Cfg)
CHILD = Stage("toy2", "1", _write, Cfg, inputs=("parent",))


def test_key_is_stable_and_covers_identity():
    k = artifact_key("s", "1", {"a": 1, "b": [1, 2]}, {"model": "m-1"})
    assert k == artifact_key("s", "1", {"b": [1, 2], "a": 1}, {"model": "m-1"})  # order-free
    assert k.startswith("s-") and len(k) == len("s-") + 16
    others = [
        artifact_key("t", "1", {"a": 1, "b": [1, 2]}, {"model": "m-1"}),
        artifact_key("s", "2", {"a": 1, "b": [1, 2]}, {"model": "m-1"}),
        artifact_key("s", "1", {"a": 2, "b": [1, 2]}, {"model": "m-1"}),
        artifact_key("s", "1", {"a": 1, "b": [1, 2]}, {"model": "m-2"}),
    ]
    assert len({k, *others}) == 5


def test_run_commits_manifest_with_hashes_and_provenance(store):
    ref = run_stage(store, STAGE, Cfg(), {})
    m = store.manifest(ref.key)
    assert set(m["files"]) == {"data.txt", "sub/more.bin"}
    assert m["config"] == {"value": 1} and m["metrics"]["value"] == 1 and m["metrics"]["wall_seconds"] >= 0
    assert {"torch", "transformers", "trl", "python"} <= set(m["libraries"])
    assert m["code_revision"]
    assert store.verify(ref.key).ok
    assert plan(store, STAGE, Cfg(), {}).status == "cached"
    assert not list(store.tmp.iterdir())


def test_crash_leaves_no_visible_artifact(store):
    def boom(ctx):
        (ctx.out_dir / "half.txt").write_text("partial")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        run_stage(store, Stage("toy", "1", boom, Cfg), Cfg(), {})
    key = plan(store, STAGE, Cfg(), {}).key
    assert not store.path(key).exists()
    assert not list(store.tmp.iterdir())
    assert plan(store, STAGE, Cfg(), {}).status == "running"


def test_tampered_files_fail_verification_and_are_rebuilt(store):
    ref = run_stage(store, STAGE, Cfg(), {})
    (store.path(ref.key) / "data.txt").write_text("value=9")  # same size, other content
    store._verified.clear()
    v = store.verify(ref.key)
    assert not v.ok and "sha256" in v.reason
    assert plan(store, STAGE, Cfg(), {}).status == "running"
    run_stage(store, STAGE, Cfg(), {})  # rebuilds over the corrupt copy
    assert store.verify(ref.key).ok
    assert (store.path(ref.key) / "data.txt").read_text() == "value=1"


def test_unlisted_or_missing_files_fail(store):
    ref = run_stage(store, STAGE, Cfg(), {})
    (store.path(ref.key) / "extra.txt").write_text("x")
    store._verified.clear()
    assert "unlisted" in store.verify(ref.key).reason
    (store.path(ref.key) / "extra.txt").unlink()
    (store.path(ref.key) / "sub" / "more.bin").unlink()
    store._verified.clear()
    assert "missing" in store.verify(ref.key).reason


def test_manifest_for_another_key_fails(store):
    ref = run_stage(store, STAGE, Cfg(), {})
    mpath = store.path(ref.key) / MANIFEST
    m = json.loads(mpath.read_text())
    m["key"] = "toy-0000000000000000"
    mpath.write_text(json.dumps(m))
    store._verified.clear()
    assert not store.verify(ref.key).ok


def test_lineage_walks_inputs(store):
    a = run_stage(store, STAGE, Cfg(value=1), {})
    b = run_stage(store, CHILD, Cfg(value=2), {"parent": a})
    rows = store.lineage(b.key)
    assert rows == [(0, "", b.key), (1, "parent", a.key)]
    assert [m["key"] for m in store.list()] == [a.key, b.key] or {m["key"] for m in store.list()} == {
        a.key,
        b.key,
    }


def test_store_roots_are_paths_or_file_urls(tmp_path):
    from r1.store import Store

    assert Store(f"file://{tmp_path}").root == tmp_path
    with pytest.raises(ValueError, match="open_store"):
        Store("s3://bucket/runs")


def test_an_edited_outside_file_gives_a_new_key_and_the_manifest_says_what_was_read(store, tmp_path):
    from data.problems import ProblemsData
    from stages import data

    src = tmp_path / "problems"
    src.mkdir()

    def write(answer: int) -> None:
        for split in ("train", "test"):
            rows = [{"question": f"{split} {i}: 2+{i}?", "answer": str(2 + i + answer)} for i in range(4)]
            (src / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    write(0)
    cfg = ProblemsData(path=str(src))
    first = run_stage(store, data.STAGE, cfg, {})
    read = store.manifest(first.key)["external"]["path"]
    assert read["path"] == str(src.resolve()) and read["files"] == 2 and len(read["sha256"]) == 64
    assert plan(store, data.STAGE, cfg, {}).status == "cached"
    write(1)  # the user repairs the answers: same path, same sizes, other bytes
    again = plan(store, data.STAGE, cfg, {})
    assert again.status == "running" and again.key != first.key
    assert run_stage(store, data.STAGE, cfg, {}).dataset()["test"][0]["answer"] == "3"


def test_symlinks_and_edited_manifests_fail_verification(store, tmp_path):
    ref = run_stage(store, STAGE, Cfg(), {})
    outside = tmp_path / "outside.txt"
    outside.write_text("value=1")
    target = store.path(ref.key) / "data.txt"
    target.unlink()
    target.symlink_to(outside)  # same bytes, but it points out of the store
    store._verified.clear()
    assert "symlink" in store.verify(ref.key).reason
    shutil.rmtree(store.path(ref.key))
    ref = run_stage(store, STAGE, Cfg(), {})
    mpath = store.path(ref.key) / MANIFEST
    m = json.loads(mpath.read_text())
    m["inputs"] = {"parent": "toy-ffffffffffffffff"}  # an edit that keeps the key field
    mpath.write_text(json.dumps(m))
    store._verified.clear()
    assert "does not match its key" in store.verify(ref.key).reason


def test_lineage_survives_a_cycle_in_edited_manifests(store):
    a = run_stage(store, STAGE, Cfg(value=1), {})
    b = run_stage(store, CHILD, Cfg(value=2), {"parent": a})
    mpath = store.path(a.key) / MANIFEST
    m = json.loads(mpath.read_text())
    m["inputs"] = {"child": b.key}
    mpath.write_text(json.dumps(m))
    rows = store.lineage(b.key)
    assert rows == [(0, "", b.key), (1, "parent", a.key), (2, "child", f"{b.key} (cycle)")]


def test_verify_fails_on_a_missing_store_and_on_folders_without_a_manifest(store):
    import subprocess
    import sys

    from tests.conftest import ROOT

    def verify(root) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "flows.cli", "verify", "--store", str(root)]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)

    missing = verify(store.root.parent / "no-such-store")
    assert missing.returncode == 1 and "no artifact store" in missing.stderr
    ref = run_stage(store, STAGE, Cfg(), {})
    (store.artifacts / "toy-0123456789abcdef").mkdir()  # a folder that never got its manifest
    out = verify(store.root)
    assert out.returncode == 1
    assert f"ok  {ref.key}" in out.stdout and "BAD toy-0123456789abcdef  (no manifest)" in out.stdout


def test_two_runs_of_one_stage_build_it_once_and_neither_fails(store):
    """Two runs 1 s apart on one store: the clean-up of one removed the other's folders."""
    import threading
    import time

    calls = []

    def slow(ctx):
        calls.append(1)
        time.sleep(1.0)
        _write(ctx)

    stage = Stage("toy", "1", slow, Cfg)
    results, errors = [], []

    def run():
        try:
            results.append(run_stage(store, stage, Cfg(), {}, announce=False).key)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    threads[0].start()
    time.sleep(0.2)
    threads[1].start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2 and results[0] == results[1]
    assert len(calls) == 1 and store.verify(results[0]).ok


def test_plan_refuses_a_call_that_does_not_match_what_the_stage_declares(store):
    """A wiring mistake fails when the stage is planned, before anything runs or is written."""
    from r1.stage import StageInputError
    from stages import evaluate, grpo

    a = run_stage(store, STAGE, Cfg(), {})
    with pytest.raises(StageInputError, match=r"missing \['parent'\]"):
        plan(store, CHILD, Cfg(), {})
    with pytest.raises(StageInputError, match=r"unexpected \['extra'\]"):
        plan(store, CHILD, Cfg(), {"parent": a, "extra": a})
    with pytest.raises(StageInputError, match="reads a EvalConfig config, not Cfg"):
        plan(store, evaluate.STAGE, Cfg(), {"model": a, "data": a})
    plan(store, grpo.STAGE, grpo.GRPOStageConfig(), {"model": a, "data": a, "reward_model": a})  # optional
    with pytest.raises(StageInputError, match=r"missing \['data'\]"):
        run_stage(store, grpo.STAGE, grpo.GRPOStageConfig(), {"model": a})
    assert len(store.list()) == 1 and not list(store.work.glob("*"))
