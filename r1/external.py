"""Content addresses of what a stage reads from outside the store.

An artifact's key covers its config, and a config may name a file or folder outside the store (a
problems file, general prompts, preference pairs, a local checkpoint). Hashing only the *name*
would serve a user's edited file from the cache forever, so fields marked :func:`external` are
also fingerprinted: a local file by its sha256, a local folder by the sha256 of every file in it.
A name that is not a local path (a hub id) is addressed by name only; pin a revision in the id to
make it reproducible.

Hashes are remembered by (path, size, mtime, inode) in ``$R1_CACHE/fingerprints.json``, so an
unchanged multi-GB checkpoint is hashed once per machine, and any edit is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from r1.models import resolve_model_path

_LOCK = threading.Lock()
_MEMO: dict[str, str] | None = None
_DIRTY = False


def external(**kwargs: Any) -> dict[str, Any]:
    """``json_schema_extra`` for a field naming a file or folder a stage reads (content-addressed)."""
    extra = dict(kwargs.pop("json_schema_extra", {}) or {})
    return {"json_schema_extra": {**extra, "external": True}, **kwargs}


def external_fields(model: BaseModel, prefix: str = "") -> dict[str, str]:
    """Dotted name -> value of every set :func:`external` field in ``model`` and its sub-sections."""
    out: dict[str, str] = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("external") and value:
            out[f"{prefix}{name}"] = str(value)
        elif isinstance(value, BaseModel):
            out.update(external_fields(value, f"{prefix}{name}."))
    return out


def _cache_file() -> Path:
    base = Path(os.environ.get("R1_CACHE") or Path.home() / ".cache" / "r1-pipeline").expanduser()
    return base / "fingerprints.json"


def _memo() -> dict[str, str]:
    global _MEMO
    if _MEMO is None:
        try:
            _MEMO = json.loads(_cache_file().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            _MEMO = {}
    return _MEMO


def _save_memo() -> None:
    global _DIRTY
    if not _DIRTY:
        return
    _DIRTY = False
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_memo()), encoding="utf-8")
        tmp.replace(path)
    except OSError:  # a read-only home only costs re-hashing
        pass


def _file_sha256(path: Path) -> str:
    global _DIRTY
    st = path.stat()
    stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
    memo = _memo()
    if stamp not in memo:
        _DIRTY = True
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
        memo[stamp] = h.hexdigest()
    return memo[stamp]


def local_path(value: str) -> Path | None:
    """The local file or folder a config value names (``package:`` resolved), else None (a hub id)."""
    try:
        p = Path(resolve_model_path(value)).expanduser()
    except FileNotFoundError:
        return None
    return p if p.exists() else None


def fingerprint(value: str) -> dict[str, Any]:
    """What a key records for an outside input: its sha256 and size when local, else its name."""
    p = local_path(value)
    if p is None:
        return {"name": value, "sha256": None}
    with _LOCK:
        if p.is_file():
            out = {"path": str(p.resolve()), "size": p.stat().st_size, "sha256": _file_sha256(p)}
        else:
            # Bytecode caches appear when a package is imported; they are not what a stage reads.
            files = sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
            h = hashlib.sha256()
            for f in files:
                h.update(f"{f.relative_to(p).as_posix()}\0{_file_sha256(f)}\n".encode())
            out = {
                "path": str(p.resolve()),
                "files": len(files),
                "size": sum(f.stat().st_size for f in files),
                "sha256": h.hexdigest(),
            }
        _save_memo()
    return out


def fingerprints(model: BaseModel) -> dict[str, dict[str, Any]]:
    """Fingerprints of every outside input ``model`` names, by dotted field name."""
    return {name: fingerprint(value) for name, value in external_fields(model).items()}
