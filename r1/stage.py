"""The stage contract: what a stage declares and what it receives.

A stage is a plain function over a typed config and its input artifacts; it never imports
Prefect, so it runs and tests without it. It declares its config type and its input roles, so a
wiring mistake (a missing input, one it does not read, the wrong config) fails when the stage is
planned, before anything runs, as Kedro's nodes do. Every stage module imports this one and
nothing above it; the runner, the launcher and a launched rank all build a stage call from it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, TypeAdapter

from r1.store import ArtifactRef


class StageInputError(ValueError):
    """A stage was wired with inputs or a config it does not declare; the message says which."""


@dataclass
class StageContext:
    """What a stage function receives."""

    config: Any  # the stage's typed config section
    inputs: dict[str, ArtifactRef]
    out_dir: Path  # the artifact being written (temporary until the stage returns)
    work_dir: Path  # survives a crash: checkpoints and shards to resume from
    metrics: dict[str, Any] = field(default_factory=dict)  # lands in the manifest
    label: str = ""  # the stage's name in the flow (e.g. "r1_zero" for a GRPO stage)


def _members(config_type: Any) -> tuple[type, ...]:
    """The classes a config type admits: itself, or the members of a (tagged) union."""
    if isinstance(config_type, type):
        return (config_type,)
    out: tuple[type, ...] = ()
    for arg in get_args(config_type):
        out += _members(arg)
    return out


@dataclass(frozen=True)
class Stage:
    """A kind of stage: name and version (both in the key), its function, what it reads, how it resumes.

    ``inputs`` are the roles it requires and ``optional_inputs`` those it may take; a stage whose
    roles are named by its config (the report's) gives ``roles_of(config)`` instead, returning
    (required, optional).
    """

    name: str
    version: str
    fn: Callable[[StageContext], None]
    config: Any  # the config class, or a union of classes (``DataConfig``)
    inputs: tuple[str, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    roles_of: Callable[[Any], tuple[tuple[str, ...], tuple[str, ...]]] | None = None
    resume_step: Callable[[Path], int | None] | None = None  # work dir -> step it would resume from
    resume_unit: str = "step"  # what resume_step counts: trainer steps, sampling shards
    keep_work: bool = False  # keep the work dir after success (e.g. for inspection)

    @cached_property
    def _adapter(self) -> TypeAdapter:
        return TypeAdapter(self.config)

    def parse_config(self, data: dict[str, Any]) -> Any:
        """The stage's config from JSON data (a launched rank rebuilds its config this way)."""
        return self._adapter.validate_python(data)

    def check(self, config: BaseModel, inputs: dict[str, ArtifactRef]) -> None:
        """Raise :class:`StageInputError` unless ``config`` and ``inputs`` are what the stage declares."""
        if not isinstance(config, _members(self.config)):
            kinds = " | ".join(c.__name__ for c in _members(self.config))
            raise StageInputError(f"stage {self.name!r} reads a {kinds} config, not {type(config).__name__}")
        required, optional = self.roles_of(config) if self.roles_of else (self.inputs, self.optional_inputs)
        missing = [r for r in required if r not in inputs]
        unexpected = [r for r in inputs if r not in required and r not in optional]
        if missing or unexpected:
            problems = [
                f"missing {missing}" if missing else "",
                f"unexpected {unexpected}" if unexpected else "",
            ]
            raise StageInputError(
                f"stage {self.name!r}: inputs {sorted(inputs)} do not match what it reads "
                f"(required {list(required)}, optional {list(optional)}): "
                + ", ".join(p for p in problems if p)
            )


def load_stage(module: str, name: str) -> Stage:
    """The :class:`Stage` called ``name`` that module ``module`` defines (for launched ranks)."""
    mod = importlib.import_module(module)
    for value in vars(mod).values():
        if isinstance(value, Stage) and value.name == name:
            return value
    raise LookupError(f"no Stage named {name!r} in {module}")
