"""Keys and provenance: what an artifact is made of, how that names it, and how it is checked.

An artifact's key is a hash of (stage name, stage version, the config the stage reads, the keys of
its input artifacts, the contents of the outside files it reads), so the same work is never done
twice and bumping a stage's version invalidates it and everything downstream, nothing else. Its
``manifest.json`` records all of that with every file's size and sha256, the metrics, library
versions and code revision; a manifest whose contents no longer give its key was edited.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MANIFEST = "manifest.json"
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
_LIBRARIES = ("torch", "transformers", "trl", "datasets", "accelerate", "prefect", "pyarrow", "math_verify")


class ArtifactRef(BaseModel):
    """A pointer to a finished artifact, passed between stages (and persisted by Prefect)."""

    key: str
    stage: str
    path: str

    def file(self, *parts: str) -> Path:
        return Path(self.path, *parts)

    def manifest(self) -> dict[str, Any]:
        """The artifact's manifest: its config, inputs, metrics and files."""
        return json.loads(self.file(MANIFEST).read_text(encoding="utf-8"))

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

    def manifest_fields(self) -> dict[str, Any]:
        """What a manifest records of the artifact's making (the key and everything it covers)."""
        return {
            "key": self.key,
            "stage": self.stage,
            "version": self.version,
            "config": self.config,
            "inputs": self.inputs,
            **({"external": self.external} if self.external else {}),
            "libraries": library_versions(),
            "code_revision": code_revision(),
        }


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


def lineage(
    key: str, exists: Callable[[str], bool], manifest: Callable[[str], dict[str, Any]]
) -> list[tuple[int, str, str]]:
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
        if exists(k):
            for r, parent in sorted(manifest(k).get("inputs", {}).items()):
                walk(parent, r, depth + 1, (*path, k))

    walk(key, "", 0, ())
    return rows
