"""The content-addressed artifact store, in three parts.

- :mod:`r1.store.keys`: what an artifact is made of (:class:`Provenance`), its key, its manifest
  and lineage, and the reference stages pass around (:class:`ArtifactRef`);
- :mod:`r1.store.local`: the store on a local or mounted filesystem (commit = atomic rename);
- :mod:`r1.store.remote`: the store in an object store, through a local store as its cache
  (commit = the manifest's PUT, published after the local commit).

:func:`open_store` picks one from a path or URL.
"""

from __future__ import annotations

from pathlib import Path

from r1.store.keys import (
    MANIFEST,
    PROJECT_ROOT,
    ArtifactRef,
    Provenance,
    Verification,
    artifact_key,
    canonical_json,
    code_revision,
    library_versions,
    lineage,
    manifest_key,
    sha256_file,
)
from r1.store.local import Store, default_root, is_remote, store_identity, store_path
from r1.store.remote import RemoteStore


def open_store(root: str | Path | None = None) -> Store | RemoteStore:
    """The store at ``root`` (default :func:`default_root`): local for paths, remote for URLs."""
    root = default_root() if root is None else root
    return RemoteStore(str(root)) if is_remote(root) else Store(root)


__all__ = [
    "MANIFEST",
    "PROJECT_ROOT",
    "ArtifactRef",
    "Provenance",
    "RemoteStore",
    "Store",
    "Verification",
    "artifact_key",
    "canonical_json",
    "code_revision",
    "default_root",
    "is_remote",
    "library_versions",
    "lineage",
    "manifest_key",
    "open_store",
    "sha256_file",
    "store_identity",
    "store_path",
]
