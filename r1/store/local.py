"""The artifact store on a local (or mounted) filesystem.

A stage writes into a temporary directory; the store then writes ``manifest.json`` *last* and
renames the directory into place, so a visible artifact is always complete. A cache hit is
accepted only when the manifest verifies. Layout under the root (``runs/`` by default,
``$R1_STORE`` or the recipe's ``store`` otherwise)::

    artifacts/<stage>-<hash>/   finished artifacts (datasets as Arrow, checkpoints as HF folders)
    work/<stage>-<hash>/        an unfinished stage's checkpoints and shards (resume state)
    tmp/                        artifacts being written (renamed into artifacts/ when complete)
    locks/<stage>-<hash>.lock   held by the one process building that artifact
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from r1.store.keys import (
    MANIFEST,
    PROJECT_ROOT,
    ArtifactRef,
    Provenance,
    Verification,
    lineage,
    manifest_key,
    sha256_file,
)


def default_root() -> str | Path:
    """``$R1_STORE`` when set, else ``runs/`` in the project directory."""
    return os.environ.get("R1_STORE") or PROJECT_ROOT / "runs"


def is_remote(root: str | Path) -> bool:
    """Whether a store root names an object store (any URL but ``file://``)."""
    text = str(root)
    return "://" in text and not text.startswith("file://")


def store_path(root: str | Path) -> Path:
    """A local store root as a path (``file://`` URLs are paths); a remote URL is a clear error."""
    text = str(root)
    if is_remote(text):
        raise ValueError(f"artifact store {text!r} is a URL, not a local path: open it with open_store()")
    return Path(text.removeprefix("file://"))


def store_identity(root: str | Path) -> str:
    """What names a store across processes: its URL, or its local path made absolute."""
    return str(root).rstrip("/") if is_remote(root) else str(store_path(root).resolve())


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


def _symlink(root: Path) -> str | None:
    """The first symlink at or under ``root``: an artifact is plain files, so it can point nowhere."""
    if root.is_symlink():
        return root.name
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in (*dirnames, *filenames):
            if Path(dirpath, name).is_symlink():
                return Path(dirpath, name).relative_to(root).as_posix()
    return None


class Store:
    """Artifacts on a local (or mounted) filesystem; all renames stay within one filesystem."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = store_path(default_root() if root is None else root)
        self.location = str(self.root)  # what messages and Prefect's cache key name the store by
        self.shared_work = True  # work dirs (resume state) live where every user of the store sees them
        self.artifacts = self.root / "artifacts"
        self.work = self.root / "work"
        self.tmp = self.root / "tmp"
        self.locks = self.root / "locks"
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
        try:
            if manifest_key(manifest) != key:
                return Verification(False, "manifest does not match its key (config or inputs edited)")
        except KeyError as e:
            return Verification(False, f"unreadable manifest: no {e}")
        outside = _symlink(root)
        if outside:
            return Verification(False, f"symlink in the artifact: {outside}")
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
    def lock(self, key: str, on_wait=None) -> Iterator[None]:
        """Hold ``key``'s lock: one process at a time builds an artifact, its tmp and work folders.

        A second run of the same stage on this store waits here (``on_wait`` is called first), then
        finds the first one's artifact. The lock is an ``flock`` the kernel releases when its
        process dies, so a killed run never leaves it held.
        """
        import fcntl

        self.locks.mkdir(parents=True, exist_ok=True)
        with open(self.locks / f"{key}.lock", "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    @contextmanager
    def writing(self, prov: Provenance) -> Iterator[_Writer]:
        """Yield a writer over a fresh temporary directory; commit it atomically on success.

        On an exception the temporary directory is removed and nothing becomes visible. Callers
        hold :meth:`lock`, so the stale folders removed here are never another live run's.
        """
        key = prov.key
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        for stale in self.tmp.glob(f"{key}.*"):  # left by a killed process
            shutil.rmtree(stale, ignore_errors=True)
        tmp = self.tmp / f"{key}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        writer = _Writer(tmp)
        try:
            yield writer
            self._commit(tmp, prov, writer.metrics)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _commit(self, tmp: Path, prov: Provenance, metrics: dict) -> None:
        files = {
            p.relative_to(tmp).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in _files(tmp)
        }
        manifest = {
            **prov.manifest_fields(),
            "files": files,
            "metrics": metrics,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        part = tmp / (MANIFEST + ".part")
        with open(part, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, sort_keys=True, default=str)
            f.flush()
            os.fsync(f.fileno())
        part.rename(tmp / MANIFEST)
        self.install(tmp, prov.key)

    def install(self, tmp: Path, key: str) -> None:
        """Rename a complete directory (manifest included) into ``artifacts/``: the atomic commit."""
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

    def materialize(self, ref: ArtifactRef) -> ArtifactRef:
        """The artifact readable at ``ref.path`` on this machine; local artifacts already are."""
        return ref

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

    def exists_root(self) -> bool:
        """Whether the store's root exists at all (``r1 verify`` on a mistyped path must fail)."""
        return self.root.is_dir()

    def folders(self) -> list[str]:
        """Names of every folder under ``artifacts/``, with or without a manifest (for ``r1 verify``)."""
        return sorted(d.name for d in self.artifacts.iterdir()) if self.artifacts.is_dir() else []

    def lineage(self, key: str) -> list[tuple[int, str, str]]:
        """Depth-first ancestry of an artifact as (depth, role, key) rows (:func:`keys.lineage`)."""
        return lineage(key, self.exists, self.manifest)

    # -- publishing (a local store is its own publication) -------------------------------------
    def unpublished(self, key: str) -> bool:
        """Whether a finished artifact waits to be published (never, on a local store)."""
        return False

    def publish(self, key: str) -> None:
        """Make a committed artifact visible to every user of the store (it already is)."""


class _Writer:
    """What a stage gets to fill: a directory and a metrics dict that goes into the manifest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.metrics: dict[str, Any] = {}
