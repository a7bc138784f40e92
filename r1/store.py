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
    locks/<stage>-<hash>.lock   held by the one process building that artifact

An fsspec URL (``s3://``, ``gs://``, ...) as the root gives a :class:`RemoteStore`: the object store
holds the shared artifacts and a local cache of this layout holds the copies stages read and write.
Object stores have no rename, so there the commit is the manifest: an artifact's files go to a
folder named after its manifest's hash, and the manifest, one object written in one PUT, goes last.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MANIFEST = "manifest.json"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger(__name__)
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


def open_store(root: str | Path | None = None) -> Store:
    """The store at ``root`` (default :func:`default_root`): local for paths, remote for URLs."""
    root = default_root() if root is None else root
    return RemoteStore(str(root)) if is_remote(root) else Store(root)


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def artifact_key(
    stage: str,
    version: str,
    config: dict[str, Any],
    inputs: dict[str, str],
    external: dict[str, dict[str, Any]] | None = None,
) -> str:
    """``<stage>-<16 hex>``: sha256 over the stage identity, its config, its input keys and the
    content hashes of what it reads from outside the store (``r1.external``; absent when none)."""
    data: dict[str, Any] = {"stage": stage, "version": version, "config": config, "inputs": inputs}
    if external:
        data["external"] = {name: fp.get("sha256") or fp.get("name") for name, fp in external.items()}
    payload = canonical_json(data)
    return f"{stage}-{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class Provenance:
    """What an artifact is made of: everything its key covers, recorded in its manifest."""

    stage: str
    version: str
    config: dict[str, Any]  # the hashable part of the stage's config
    inputs: dict[str, str]  # role -> input artifact key
    external: dict[str, dict[str, Any]] = field(default_factory=dict)  # r1.external fingerprints

    @property
    def key(self) -> str:
        return artifact_key(self.stage, self.version, self.config, self.inputs, self.external)


def manifest_key(manifest: dict[str, Any]) -> str:
    """The key a manifest's own contents give: a manifest edited by hand no longer matches."""
    return artifact_key(
        manifest["stage"],
        manifest["version"],
        manifest["config"],
        manifest["inputs"],
        manifest.get("external"),
    )


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
            "key": prov.key,
            "stage": prov.stage,
            "version": prov.version,
            "config": prov.config,
            "inputs": prov.inputs,
            **({"external": prov.external} if prov.external else {}),
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
        self._install(tmp, prov.key)

    def _install(self, tmp: Path, key: str) -> None:
        """Rename a complete directory (manifest included) into ``artifacts/``: the atomic commit."""
        dest = self.path(key)
        if dest.exists():
            if Store.verify(self, key).ok:
                return  # another process finished the same work first; keep theirs
            shutil.rmtree(dest)  # a corrupt copy: replace it
        try:
            os.rename(tmp, dest)
        except OSError:
            # Another process (e.g. another rank under `accelerate launch`) renamed its copy in
            # between: keep theirs if it verifies, else this is a real error.
            if not Store.verify(self, key).ok:
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
        """Depth-first ancestry of an artifact as (depth, role, key) rows, the artifact first.

        A key already on the current path (a cycle, only possible in an edited manifest) is shown
        once more, marked, and not walked again.
        """
        rows: list[tuple[int, str, str]] = []

        def walk(k: str, role: str, depth: int, path: tuple[str, ...]) -> None:
            if k in path:
                rows.append((depth, role, f"{k} (cycle)"))
                return
            rows.append((depth, role, k))
            if self.exists(k):
                for r, parent in sorted(self.manifest(k).get("inputs", {}).items()):
                    walk(parent, r, depth + 1, (*path, k))

        walk(key, "", 0, ())
        return rows


class _Writer:
    """What a stage gets to fill: a directory and a metrics dict that goes into the manifest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.metrics: dict[str, Any] = {}


def _cache_root(url: str) -> Path:
    """This machine's copy of a remote store: ``$R1_CACHE`` (default ``~/.cache/r1-pipeline``)/<url hash>."""
    base = Path(os.environ.get("R1_CACHE") or Path.home() / ".cache" / "r1-pipeline").expanduser()
    return base / hashlib.sha256(url.encode()).hexdigest()[:16]


class RemoteStore(Store):
    """Artifacts in an object store (any fsspec URL), read and written through a local cache.

    Stages only ever see local paths: a stage writes into the cache as with a local store, and
    the finished artifact is then uploaded; an input that is only remote is downloaded (and its
    sha256 checked) before a stage reads it. Work directories stay local, so a stage resumes on
    the machine where it was interrupted.

    The commit protocol, for stores without rename: files go to
    ``artifacts/<key>/<manifest sha256[:16]>/``, then the manifest, in one PUT, to
    ``artifacts/<key>/manifest.json``. A reader sees either no manifest (no artifact) or a manifest
    whose folder is complete. Two workers finishing the same key both upload whole folders; the
    manifest written last names the one everyone reads, and a worker that finds a committed
    artifact before its own upload adopts it instead.
    """

    def __init__(self, url: str, cache: str | Path | None = None) -> None:
        from fsspec.core import url_to_fs

        self.url = url.rstrip("/")
        try:
            self.fs, self.remote_root = url_to_fs(self.url)
        except (ImportError, ValueError) as e:
            raise ValueError(f"artifact store {url!r}: {e}") from e
        super().__init__(cache if cache is not None else _cache_root(self.url))
        self.location = self.url
        self.shared_work = False

    # -- remote layout --------------------------------------------------------------------------
    def _remote(self, key: str, *parts: str) -> str:
        return "/".join((self.remote_root.rstrip("/"), "artifacts", key, *parts))

    def _remote_manifest(self, key: str) -> bytes | None:
        """The committed manifest's bytes, or None when the key has no committed artifact."""
        self.fs.invalidate_cache(self._remote(key))  # see other workers' commits
        try:
            return self.fs.cat_file(self._remote(key, MANIFEST))
        except FileNotFoundError:
            return None

    def _blob(self, key: str, manifest: bytes) -> str:
        return self._remote(key, hashlib.sha256(manifest).hexdigest()[:16])

    def _check_remote(self, key: str, manifest: bytes) -> Verification:
        """Sizes of the committed folder against its manifest (hashes are checked on download)."""
        try:
            parsed = json.loads(manifest)
            listed = parsed["files"]
            if manifest_key(parsed) != key:
                return Verification(False, "manifest does not match its key (config or inputs edited)")
        except (ValueError, KeyError) as e:
            return Verification(False, f"unreadable manifest: {e}")
        blob = self._blob(key, manifest)
        found = {
            path[len(blob) + 1 :]: info["size"]
            for path, info in self.fs.find(blob, detail=True).items()
            if path.startswith(blob + "/")
        }
        for rel, meta in listed.items():
            if rel not in found:
                return Verification(False, f"missing file {rel}")
            if found[rel] != meta["size"]:
                return Verification(False, f"size mismatch in {rel}")
        return Verification(True)

    # -- lookup ---------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self._remote_manifest(key) is not None

    def manifest(self, key: str) -> dict[str, Any]:
        data = self._remote_manifest(key)
        if data is None:
            raise FileNotFoundError(f"no artifact {key!r} in {self.url}")
        return json.loads(data)

    def verify(self, key: str, deep: bool | None = None) -> Verification:
        """The committed artifact checked by listing (``deep``: downloaded and re-hashed here).

        A copy in the cache that never reached the store (the upload was interrupted) is uploaded
        now rather than rebuilt.
        """
        manifest = self._remote_manifest(key)
        if manifest is None:
            if not Store.verify(self, key).ok:
                return Verification(False, "missing")
            self._upload(key)
            manifest = self._remote_manifest(key)
            assert manifest is not None
        check = self._check_remote(key, manifest)
        if not check.ok or not deep:
            return check
        try:
            self._fetch(key, manifest)
        except ValueError as e:
            return Verification(False, str(e))
        return Store.verify(self, key, deep=True)

    def materialize(self, ref: ArtifactRef) -> ArtifactRef:
        """Download a committed artifact into the cache unless the cache already holds that commit."""
        manifest = self._remote_manifest(ref.key)
        if manifest is None:
            return ref  # not in this store: an artifact from a local store, readable as it is
        self._fetch(ref.key, manifest)
        return self.ref(ref.key)

    def folders(self) -> list[str]:
        """Every key with a folder in the object store, committed or not."""
        self.fs.invalidate_cache()
        base = "/".join((self.remote_root.rstrip("/"), "artifacts"))
        try:
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(base, detail=False))
        except FileNotFoundError:
            return []

    def exists_root(self) -> bool:
        return True  # an object store's prefix exists as soon as something is written under it

    def list(self) -> list[dict[str, Any]]:
        """Manifests of all committed artifacts, oldest first."""
        self.fs.invalidate_cache()
        paths = self.fs.glob(self._remote("*", MANIFEST))
        out = []
        for data in (self.fs.cat(paths) if paths else {}).values():
            try:
                out.append(json.loads(data))
            except ValueError:
                continue
        return sorted(out, key=lambda m: m.get("created", ""))

    # -- moving artifacts -------------------------------------------------------------------------
    @contextmanager
    def writing(self, prov: Provenance) -> Iterator[_Writer]:
        """Build and commit in the cache as a local store does, then upload the artifact."""
        with super().writing(prov) as writer:
            yield writer
        self._upload(prov.key)

    def _upload(self, key: str) -> None:
        """Publish the cached artifact: its folder first, the manifest last (the commit)."""
        local = self.path(key)
        manifest = (local / MANIFEST).read_bytes()
        committed = self._remote_manifest(key)
        if committed is not None and self._check_remote(key, committed).ok:
            self._fetch(key, committed)  # another worker committed first: use theirs everywhere
            return
        blob = self._blob(key, manifest)
        files = json.loads(manifest)["files"]
        try:
            for parent in sorted({str(Path(rel).parent) for rel in files}):
                self.fs.makedirs(blob if parent == "." else f"{blob}/{parent}", exist_ok=True)
            for rel in files:
                self.fs.put_file(str(local / rel), f"{blob}/{rel}")
            self.fs.pipe_file(self._remote(key, MANIFEST), manifest)
        except BaseException:
            try:
                self.fs.rm(blob, recursive=True)  # no half folder left behind
            except Exception:  # noqa: BLE001 - keep the original error
                log.warning("could not remove the partial upload %s", blob)
            raise

    def _fetch(self, key: str, manifest: bytes) -> None:
        """Make the cache hold exactly this commit, checking every downloaded file's sha256."""
        dest = self.path(key)
        mpath = dest / MANIFEST
        if mpath.is_file() and mpath.read_bytes() == manifest and Store.verify(self, key).ok:
            return
        files = json.loads(manifest)["files"]
        blob = self._blob(key, manifest)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        tmp = self.tmp / f"{key}.{uuid.uuid4().hex[:8]}"
        try:
            for rel, meta in files.items():
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(f"{blob}/{rel}", str(target))
                if sha256_file(target) != meta["sha256"]:
                    raise ValueError(f"artifact {key} in {self.url}: sha256 mismatch in {rel}")
            (tmp / MANIFEST).write_bytes(manifest)
            if dest.exists():  # a copy of another commit, or a corrupt one: set it aside first
                stale = self.tmp / f"{key}.{uuid.uuid4().hex[:8]}"
                os.rename(dest, stale)
                shutil.rmtree(stale, ignore_errors=True)
            self._install(tmp, key)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
