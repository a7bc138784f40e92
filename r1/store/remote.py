"""The artifact store in an object store (any fsspec URL), read and written through a local cache.

A remote store *has* a local store, its cache (``$R1_CACHE``, default
``~/.cache/r1-pipeline/<url hash>``): stages only ever see local paths, write into the cache as
into any local store, and read inputs the store downloaded there (every file's sha256 checked).
Work directories stay in the cache, so a stage resumes on the machine where it was interrupted.

Publishing is an explicit step, after a stage's artifact is committed in the cache. Object stores
have no rename, so the commit is the manifest: the files go to
``artifacts/<key>/<manifest sha256[:16]>/``, then the manifest, in one PUT, to
``artifacts/<key>/manifest.json``. A reader sees either no manifest (no artifact) or a manifest
whose folder is complete. Two workers finishing the same key both upload whole folders; the
manifest written last names the one everyone reads, and a worker that finds a committed artifact
before its own upload adopts it instead. Checking (``verify``) never writes to the store: an
artifact that reached the cache but not the store is *unpublished*, and the runner publishes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from r1.store.keys import MANIFEST, ArtifactRef, Provenance, Verification, lineage, manifest_key, sha256_file
from r1.store.local import Store, _Writer

log = logging.getLogger(__name__)


def _cache_root(url: str) -> Path:
    """This machine's copy of a remote store: ``$R1_CACHE`` (default ``~/.cache/r1-pipeline``)/<url hash>."""
    base = Path(os.environ.get("R1_CACHE") or Path.home() / ".cache" / "r1-pipeline").expanduser()
    return base / hashlib.sha256(url.encode()).hexdigest()[:16]


class RemoteStore:
    """Artifacts in an object store, through a local :class:`~r1.store.local.Store` cache."""

    shared_work = False  # resume state is per machine (in its cache)

    def __init__(self, url: str, cache: str | Path | None = None) -> None:
        from fsspec.core import url_to_fs

        self.url = url.rstrip("/")
        try:
            self.fs, self.remote_root = url_to_fs(self.url)
        except (ImportError, ValueError) as e:
            raise ValueError(f"artifact store {url!r}: {e}") from e
        self.cache = Store(cache if cache is not None else _cache_root(self.url))
        self.location = self.url  # what messages and Prefect's cache key name the store by

    # -- what lives in the cache ------------------------------------------------------------------
    @property
    def root(self) -> Path:
        return self.cache.root

    def path(self, key: str) -> Path:
        return self.cache.path(key)

    def ref(self, key: str) -> ArtifactRef:
        return self.cache.ref(key)

    def work_dir(self, key: str) -> Path:
        return self.cache.work_dir(key)

    def lock(self, key: str, on_wait=None) -> AbstractContextManager[None]:
        """This machine's lock of ``key`` (two workers on one key are settled by the commit protocol)."""
        return self.cache.lock(key, on_wait)

    def writing(self, prov: Provenance) -> AbstractContextManager[_Writer]:
        """Build and commit in the cache; :meth:`publish` then uploads it."""
        return self.cache.writing(prov)

    # -- remote layout ----------------------------------------------------------------------------
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

    # -- lookup -----------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self._remote_manifest(key) is not None

    def exists_root(self) -> bool:
        return True  # an object store's prefix exists as soon as something is written under it

    def manifest(self, key: str) -> dict[str, Any]:
        data = self._remote_manifest(key)
        if data is None:
            raise FileNotFoundError(f"no artifact {key!r} in {self.url}")
        return json.loads(data)

    def verify(self, key: str, deep: bool | None = None) -> Verification:
        """The committed artifact checked by listing (``deep``: downloaded and re-hashed here).

        Nothing is written to the store: an artifact only in the cache is not there yet
        (:meth:`unpublished`).
        """
        manifest = self._remote_manifest(key)
        if manifest is None:
            return Verification(False, "missing")
        check = self._check_remote(key, manifest)
        if not check.ok or not deep:
            return check
        try:
            self._fetch(key, manifest)
        except ValueError as e:
            return Verification(False, str(e))
        return self.cache.verify(key, deep=True)

    def unpublished(self, key: str) -> bool:
        """A complete artifact in the cache that never reached the store (an interrupted upload)."""
        return self._remote_manifest(key) is None and self.cache.verify(key).ok

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

    def lineage(self, key: str) -> list[tuple[int, str, str]]:
        return lineage(key, self.exists, self.manifest)

    # -- moving artifacts -------------------------------------------------------------------------
    def publish(self, key: str) -> None:
        """Upload the cached artifact: its folder first, the manifest last (the commit)."""
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
        cache = self.cache
        dest = cache.path(key)
        mpath = dest / MANIFEST
        if mpath.is_file() and mpath.read_bytes() == manifest and cache.verify(key).ok:
            return
        files = json.loads(manifest)["files"]
        blob = self._blob(key, manifest)
        cache.tmp.mkdir(parents=True, exist_ok=True)
        cache.artifacts.mkdir(parents=True, exist_ok=True)
        tmp = cache.tmp / f"{key}.{uuid.uuid4().hex[:8]}"
        try:
            for rel, meta in files.items():
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(f"{blob}/{rel}", str(target))
                if sha256_file(target) != meta["sha256"]:
                    raise ValueError(f"artifact {key} in {self.url}: sha256 mismatch in {rel}")
            (tmp / MANIFEST).write_bytes(manifest)
            if dest.exists():  # a copy of another commit, or a corrupt one: set it aside first
                stale = cache.tmp / f"{key}.{uuid.uuid4().hex[:8]}"
                os.rename(dest, stale)
                shutil.rmtree(stale, ignore_errors=True)
            cache.install(tmp, key)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
