"""The store on an object store: fsspec's in-memory filesystem and S3 (a moto server, over HTTP).

Two caches on one remote stand for two machines: what one commits, the other plans as cached and
reads; a failed upload commits nothing; a corrupt object is caught before a stage reads it.
"""

from __future__ import annotations

import uuid

import pytest

from r1.runner import plan, provenance, run_stage, stage_key
from r1.stage import Stage
from r1.store import MANIFEST, RemoteStore, Store, open_store
from tests.test_store import STAGE, Cfg


@pytest.fixture(params=["memory", "s3"])
def remote_url(request) -> str:
    """A fresh, empty store URL on each kind of object store."""
    name = f"r1-{uuid.uuid4().hex[:10]}"
    if request.param == "memory":
        return f"memory://{name}/runs"
    return request.getfixturevalue("s3_store_url")


def _machine(url: str, tmp_path, name: str) -> RemoteStore:
    return RemoteStore(url, cache=tmp_path / name)


def _copy_parent(ctx):
    text = ctx.inputs["parent"].file("data.txt").read_text()
    (ctx.out_dir / "data.txt").write_text(text.upper())


def test_open_store_picks_the_kind_and_refuses_unknown_urls(tmp_path):
    assert type(open_store(tmp_path)) is Store
    assert open_store(f"file://{tmp_path}").root == tmp_path
    assert isinstance(open_store("memory://bucket/runs"), RemoteStore)
    with pytest.raises(ValueError, match="open_store"):
        Store("memory://bucket/runs")
    with pytest.raises(ValueError, match="nosuchfs"):
        open_store("nosuchfs://bucket/runs")


def test_what_one_machine_commits_another_plans_as_cached_and_reads(remote_url, tmp_path):
    a = _machine(remote_url, tmp_path, "a")
    assert a.list() == [] and not a.exists("toy-0") and a.verify("toy-0").reason == "missing"
    ref = run_stage(a, STAGE, Cfg(), {})
    blob = a.fs.find(a._remote(ref.key), detail=False)
    assert sorted(p.rsplit("/", 1)[-1] for p in blob) == ["data.txt", MANIFEST, "more.bin"]

    b = _machine(remote_url, tmp_path, "b")
    assert plan(b, STAGE, Cfg(), {}).status == "cached"
    assert not b.path(ref.key).exists()  # planning downloads nothing
    child = run_stage(
        b, Stage("toy2", "1", _copy_parent, Cfg, inputs=("parent",)), Cfg(), {"parent": b.ref(ref.key)}
    )
    assert child.file("data.txt").read_text() == "VALUE=1"
    assert b.cache.verify(ref.key).ok  # the input was downloaded into b's cache, hashes checked

    assert [m["key"] for m in a.list()] == [ref.key, child.key]
    assert a.lineage(child.key) == [(0, "", child.key), (1, "parent", ref.key)]
    c = _machine(remote_url, tmp_path, "c")
    assert c.verify(child.key, deep=True).ok and c.materialize(c.ref(child.key)).file("data.txt").is_file()


def test_an_interrupted_upload_commits_nothing_and_the_next_run_finishes_it(
    remote_url, tmp_path, monkeypatch
):
    a = _machine(remote_url, tmp_path, "a")
    calls = []

    def counted(ctx):
        calls.append(1)
        STAGE.fn(ctx)

    stage = Stage("toy", "1", counted, Cfg)
    put = a.fs.put_file
    sent = []

    def flaky_put(lpath, rpath, **kwargs):
        if sent:
            raise ConnectionError("network gone")
        sent.append(rpath)
        return put(lpath, rpath, **kwargs)

    monkeypatch.setattr(a.fs, "put_file", flaky_put)
    with pytest.raises(ConnectionError):
        run_stage(a, stage, Cfg(), {})
    monkeypatch.undo()
    key = stage_key(stage, Cfg(), {})
    other = _machine(remote_url, tmp_path, "other")
    assert not other.exists(key) and not other.verify(key).ok
    assert a.fs.find(a._remote(key)) == []  # the partial folder was removed
    assert a.cache.verify(key).ok  # built and committed locally
    assert not a.verify(key).ok and a.unpublished(key)  # checking wrote nothing to the store
    assert plan(a, stage, Cfg(), {}).status == "publishing"

    ref = run_stage(a, stage, Cfg(), {})  # the rerun uploads the cached copy instead of rebuilding
    assert len(calls) == 1 and ref.key == key
    assert other.verify(key, deep=True).ok


def test_a_corrupt_object_is_caught_before_anything_reads_it(remote_url, tmp_path):
    a = _machine(remote_url, tmp_path, "a")
    ref = run_stage(a, STAGE, Cfg(), {})
    (target,) = [p for p in a.fs.find(a._remote(ref.key)) if p.endswith("data.txt")]
    a.fs.pipe_file(target, b"value=9")  # same size, other bytes

    b = _machine(remote_url, tmp_path, "b")
    assert b.verify(ref.key).ok  # a listing sees sizes only
    deep = b.verify(ref.key, deep=True)
    assert not deep.ok and "sha256 mismatch in data.txt" in deep.reason
    with pytest.raises(ValueError, match="sha256 mismatch"):
        run_stage(
            b, Stage("toy2", "1", _copy_parent, Cfg, inputs=("parent",)), Cfg(), {"parent": b.ref(ref.key)}
        )
    assert not b.path(ref.key).exists() and not list(b.cache.tmp.iterdir())  # nothing half-copied


def test_a_worker_that_loses_the_race_adopts_the_committed_artifact(remote_url, tmp_path):
    a, b = _machine(remote_url, tmp_path, "a"), _machine(remote_url, tmp_path, "b")
    stage = Stage("toy", "1", lambda ctx: (ctx.out_dir / "data.txt").write_text(uuid.uuid4().hex), Cfg)
    prov = provenance(stage, Cfg(), {})  # b plans a run, then a commits the same key first
    key = prov.key
    assert plan(b, stage, Cfg(), {}).key == key
    with b.writing(prov) as w:
        (w.path / "data.txt").write_text("b's bytes")
        theirs = run_stage(a, stage, Cfg(), {})
    b.publish(key)  # b's commit is in its cache; publishing finds a's and adopts it
    assert theirs.key == key
    assert b.path(key).joinpath("data.txt").read_text() == theirs.file("data.txt").read_text()
    assert b.manifest(key) == a.manifest(key) and b.cache.verify(key).ok


def test_a_multi_machine_launch_is_refused_on_an_object_store(tmp_path):
    from r1.launch import LaunchConfig, LaunchError
    from stages.sft import SFTStageConfig

    store = _machine("memory://multi/runs", tmp_path, "a")
    launch = LaunchConfig(mode="accelerate", num_processes=2, num_machines=2)
    with pytest.raises(LaunchError, match="shared filesystem"):
        run_stage(store, Stage("sft", "1", STAGE.fn, SFTStageConfig), SFTStageConfig(launch=launch), {})
