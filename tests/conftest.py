"""Shared fixtures: one thread, no hub, Prefect on a throwaway local API, tiny models built here."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import socket  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
TINY_R1_ZERO = ROOT / "configs" / "tiny" / "r1_zero.yaml"


@pytest.fixture(scope="session")
def prefect_api():
    """A temporary Prefect API for the whole session (flows need one)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        yield


@pytest.fixture
def store(tmp_path):
    from r1.store import Store

    return Store(tmp_path / "store")


@pytest.fixture(scope="session")
def tiny_recipe():
    from flows.recipes import load

    return load("r1-zero", TINY_R1_ZERO)


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory, tiny_recipe):
    """Task data and a briefly pretrained tiny base model, built once per session."""
    from r1.runner import run_stage
    from r1.store import Store
    from stages import base, data

    store = Store(tmp_path_factory.mktemp("world"))
    task_data = run_stage(store, data.STAGE, tiny_recipe.data, {}, "data")
    base_model = run_stage(store, base.STAGE, tiny_recipe.base, {"data": task_data}, "base")
    return store, task_data, base_model


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server on a free local port; s3fs reaches it through fsspec's config."""
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    import fsspec.config

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "key": "testing",
        "secret": "testing",
    }
    saved = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = options
    yield options
    if saved is None:
        fsspec.config.conf.pop("s3", None)
    else:
        fsspec.config.conf["s3"] = saved
    server.stop()


@pytest.fixture
def s3_store_url(s3_endpoint) -> str:
    """A store URL in a fresh bucket of the moto server."""
    import fsspec

    bucket = f"r1-{uuid.uuid4().hex[:10]}"
    fsspec.filesystem("s3").mkdir(bucket)
    return f"s3://{bucket}/runs"


def find_gsm8k() -> Path | None:
    """The machine's GSM8K copy (``../shared/data/gsm8k`` beside the project; read, never copied in).

    A clone elsewhere (CI's) still finds the machine's copy at its usual place.
    """
    for candidate in (ROOT.parent / "shared" / "data" / "gsm8k", Path("/work/shared/data/gsm8k")):
        if (candidate / "test.jsonl").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    found = find_gsm8k()
    if found is None:
        pytest.skip("GSM8K is not on this machine (../shared/data/gsm8k)")
    return found
