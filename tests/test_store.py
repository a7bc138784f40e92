"""Artifact store: stable keys, atomic commits, verification that catches tampering."""

from __future__ import annotations

import json

import pytest

from r1.config import Section
from r1.runner import Stage, plan, run_stage
from r1.store import MANIFEST, artifact_key


class Cfg(Section):
    value: int = 1


def _write(ctx):
    (ctx.out_dir / "data.txt").write_text(f"value={ctx.config.value}")
    (ctx.out_dir / "sub").mkdir()
    (ctx.out_dir / "sub" / "more.bin").write_bytes(b"\x00\x01")
    ctx.metrics["value"] = ctx.config.value


STAGE = Stage("toy", "1", _write)


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
        run_stage(store, Stage("toy", "1", boom), Cfg(), {})
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
    b = run_stage(store, Stage("toy2", "1", _write), Cfg(value=2), {"parent": a})
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
