"""The content-addressed artifact store.

An artifact's key is a hash of (stage name, stage version, the config the stage reads, the keys of
its input artifacts), so the same work is never done twice and bumping a stage's version
invalidates it and everything downstream, nothing else. A stage writes into a temporary directory;
the store then writes ``manifest.json`` (every file with size and sha256, config, inputs, metrics,
library versions, code revision) *last* and renames the directory into place, so a visible
artifact is always complete. A cache hit is accepted only when the manifest verifies.

Layout under the root (``runs/`` by default, ``$R1_STORE`` or the recipe's ``store`` otherwise)::

    artifacts/<stage>-<hash>/   finished artifacts (datasets as Arrow, checkpoints as HF folders)
    work/<stage>-<hash>/        an unfinished stage's checkpoints and shards (resume state)
    tmp/                        artifacts being written (renamed into artifacts/ when complete)
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MANIFEST = "manifest.json"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
_LIBRARIES = ("torch", "transformers", "trl", "datasets", "accelerate", "prefect", "pyarrow", "math_verify")


class ArtifactRef(BaseModel):
    """A pointer to a finished artifact, passed between stages (and persisted by Prefect)."""

    key: str
    stage: str
    path: str

    def file(self, *parts: str) -> Path:
        return Path(self.path, *parts)

    def dataset(self):
        """The artifact as a ``Dataset``/``DatasetDict``, held in memory.

        Loading from disk would let ``datasets`` write ``cache-*.arrow`` files of any later
        ``map``/``filter`` (TRL's tokenization, say) into this artifact's folder, after which it no
        longer matches its manifest. In memory, derived data never touches the artifact.
        """
        from datasets import load_from_disk

        return load_from_disk(self.path, keep_in_memory=True)


@dataclass(frozen=True)
class Verification:
    ok: bool
    reason: str = ""


def default_root() -> Path:
    """``$R1_STORE`` when set, else ``runs/`` in the project directory."""
    return store_path(os.environ.get("R1_STORE") or PROJECT_ROOT / "runs")


def store_path(root: str | Path) -> Path:
    """A store root as a local path; ``file://`` URLs are paths, other URLs a clear error.

    The commit is an atomic rename, which object stores do not have: mount them (s3fs, gcsfuse)
    or use a shared filesystem instead.
    """
    text = str(root)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    if "://" in text:
        raise ValueError(
            f"artifact store {text!r}: URLs other than file:// are not supported (the commit is an "
            "atomic rename); use a local or shared-filesystem path, or mount the bucket"
        )
    return Path(root)


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def artifact_key(stage: str, version: str, config: dict[str, Any], inputs: dict[str, str]) -> str:
    """``<stage>-<16 hex>``: sha256 over the stage identity, its config and its input keys."""
    payload = canonical_json({"stage": stage, "version": version, "config": config, "inputs": inputs})
    return f"{stage}-{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()


@cache
def code_revision() -> str:
    """The git commit of the code that produced an artifact, ``+dirty`` when uncommitted changes exist."""
    try:
        dirty = _git("status", "--porcelain", "--untracked-files=no")
        return _git("rev-parse", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@cache
def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            out[name] = version(name.replace("_", "-"))
        except PackageNotFoundError:
            continue
    return out


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


class Store:
    """Artifacts on a local (or mounted) filesystem; all renames stay within one filesystem."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = store_path(root) if root is not None else default_root()
        self.artifacts = self.root / "artifacts"
        self.work = self.root / "work"
        self.tmp = self.root / "tmp"
        self._verified: dict[str, tuple] = {}

    # -- lookup -----------------------------------------------------------------------------
    def path(self, key: str) -> Path:
        return self.artifacts / key

    def ref(self, key: str) -> ArtifactRef:
        return ArtifactRef(key=key, stage=key.rsplit("-", 1)[0], path=str(self.path(key)))

    def work_dir(self, key: str) -> Path:
        return self.work / key

    def manifest(self, key: str) -> dict[str, Any]:
        return json.loads((self.path(key) / MANIFEST).read_text(encoding="utf-8"))

    def exists(self, key: str) -> bool:
        return (self.path(key) / MANIFEST).is_file()

    def verify(self, key: str, deep: bool | None = None) -> Verification:
        """Check the manifest against the files: sizes and sha256 (``R1_VERIFY=size`` skips hashing).

        A verified artifact is remembered for this process while its manifest is unchanged, so a
        flow that reads one artifact in several stages hashes it once.
        """
        deep = os.environ.get("R1_VERIFY", "sha256") != "size" if deep is None else deep
        root = self.path(key)
        mpath = root / MANIFEST
        if not mpath.is_file():
            return Verification(False, "missing" if not root.exists() else "no manifest")
        stamp = (mpath.stat().st_mtime_ns, deep)
        if self._verified.get(key) == stamp:
            return Verification(True)
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
            listed = manifest["files"]
        except (OSError, ValueError, KeyError) as e:
            return Verification(False, f"unreadable manifest: {e}")
        if manifest.get("key") != key:
            return Verification(False, f"manifest is for {manifest.get('key')!r}")
        present = {p.relative_to(root).as_posix() for p in _files(root)}
        extra = present - set(listed)
        if extra:
            return Verification(False, f"unlisted files: {sorted(extra)[:3]}")
        for rel, meta in listed.items():
            p = root / rel
            if not p.is_file():
                return Verification(False, f"missing file {rel}")
            if p.stat().st_size != meta["size"]:
                return Verification(False, f"size mismatch in {rel}")
            if deep and sha256_file(p) != meta["sha256"]:
                return Verification(False, f"sha256 mismatch in {rel}")
        self._verified[key] = stamp
        return Verification(True)

    # -- writing ----------------------------------------------------------------------------
    @contextmanager
    def writing(
        self, key: str, stage: str, version: str, config: dict, inputs: dict[str, str]
    ) -> Iterator[_Writer]:
        """Yield a writer over a fresh temporary directory; commit it atomically on success.

        On an exception the temporary directory is removed and nothing becomes visible.
        """
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        for stale in self.tmp.glob(f"{key}.*"):  # left by a killed process
            shutil.rmtree(stale, ignore_errors=True)
        tmp = self.tmp / f"{key}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        writer = _Writer(tmp)
        try:
            yield writer
            self._commit(tmp, key, stage, version, config, inputs, writer.metrics)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _commit(
        self, tmp: Path, key: str, stage: str, version: str, config: dict, inputs: dict, metrics: dict
    ) -> None:
        files = {
            p.relative_to(tmp).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in _files(tmp)
        }
        manifest = {
            "key": key,
            "stage": stage,
            "version": version,
            "config": config,
            "inputs": inputs,
            "files": files,
            "metrics": metrics,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "libraries": library_versions(),
            "code_revision": code_revision(),
        }
        part = tmp / (MANIFEST + ".part")
        with open(part, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, sort_keys=True, default=str)
            f.flush()
            os.fsync(f.fileno())
        part.rename(tmp / MANIFEST)
        dest = self.path(key)
        if dest.exists():
            if self.verify(key).ok:
                return  # another process finished the same work first; keep theirs
            shutil.rmtree(dest)  # a corrupt copy: replace it
        try:
            os.rename(tmp, dest)
        except OSError:
            # Another process (e.g. another rank under `accelerate launch`) renamed its copy in
            # between: keep theirs if it verifies, else this is a real error.
            if not self.verify(key).ok:
                raise

    # -- listing ----------------------------------------------------------------------------
    def list(self) -> list[dict[str, Any]]:
        """Manifests of all artifacts, oldest first."""
        if not self.artifacts.exists():
            return []
        out = []
        for d in self.artifacts.iterdir():
            try:
                out.append(json.loads((d / MANIFEST).read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda m: m.get("created", ""))

    def lineage(self, key: str) -> list[tuple[int, str, str]]:
        """Depth-first ancestry of an artifact as (depth, role, key) rows, the artifact first."""
        rows: list[tuple[int, str, str]] = []

        def walk(k: str, role: str, depth: int) -> None:
            rows.append((depth, role, k))
            if self.exists(k):
                for r, parent in sorted(self.manifest(k).get("inputs", {}).items()):
                    walk(parent, r, depth + 1)

        walk(key, "", 0)
        return rows


class _Writer:
    """What a stage gets to fill: a directory and a metrics dict that goes into the manifest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.metrics: dict[str, Any] = {}
