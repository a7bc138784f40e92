"""Typed recipes: YAML files validated into pydantic models, with dotted command-line overrides.

A recipe is one YAML file per branch and scale. It may ``inherit`` another file (deep-merged,
path relative to the inheriting file), and a user overrides any field from the command line
(``grpo.learning_rate=1e-4``; values parse as YAML). Every section forbids unknown keys, so a typo
is an error that names the key and suggests the closest known one, before anything runs.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

T = TypeVar("T", bound=BaseModel)


class ConfigError(ValueError):
    """A recipe that cannot be loaded: missing file, unknown key, wrong type. The message says which."""


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def unhashed(**kwargs: Any) -> dict[str, Any]:
    """``json_schema_extra`` marking a field that does not change a stage's result (e.g. save_steps)."""
    return {"json_schema_extra": {"hash": False}, **kwargs}


def new_option(**kwargs: Any) -> dict[str, Any]:
    """``json_schema_extra`` for an option added after artifacts exist: hashed only when set.

    At its default the option means the old behaviour, so existing artifact keys stay valid.
    """
    return {"json_schema_extra": {"hash": "unless_default"}, **kwargs}


def hashable(model: BaseModel) -> dict[str, Any]:
    """The model as JSON-able data without fields marked :func:`unhashed`: what a cache key covers."""
    out: dict[str, Any] = {}
    for name, field in type(model).model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("hash") is False:
            continue
        value = getattr(model, name)
        if extra.get("hash") == "unless_default" and value == field.get_default(call_default_factory=True):
            continue
        out[name] = _hashable_value(value)
    return out


def _hashable_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return hashable(value)
    if isinstance(value, list | tuple):
        return [_hashable_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _hashable_value(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def _deep_merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``; a section that changes its ``kind`` replaces the inherited one."""
    out = dict(base)
    for k, v in over.items():
        old = out.get(k)
        mergeable = isinstance(v, dict) and isinstance(old, dict)
        if mergeable and "kind" in v and v["kind"] != old.get("kind", v["kind"]):
            mergeable = False  # e.g. base: {kind: pretrained} over a micro base's model settings
        out[k] = _deep_merge(old, v) if mergeable else v
    return out


def read_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A recipe file as a dict, with its ``inherit`` chain resolved (relative paths, no cycles)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe file not found: {path}")
    resolved = path.resolve()
    if resolved in _seen:
        raise ConfigError(f"recipe inherits itself: {' -> '.join(map(str, (*_seen, resolved)))}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe must be a mapping of sections, got {type(data).__name__}")
    parent = data.pop("inherit", None)
    if parent is None:
        return data
    return _deep_merge(read_yaml(path.parent / parent, (*_seen, resolved)), data)


def apply_override(data: dict, override: str) -> dict:
    """Set ``a.b.c=value`` in nested ``data`` (list items by index: ``rewards.0.weight=2``)."""
    if "=" not in override:
        raise ConfigError(
            f"override {override!r} is not of the form key=value (e.g. grpo.learning_rate=1e-4)"
        )
    dotted, raw = override.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {dotted}: cannot parse value {raw!r}: {e}") from e
    keys = dotted.strip().split(".")
    node: Any = data
    for depth, k in enumerate(keys[:-1]):
        where = ".".join(keys[: depth + 1])
        if isinstance(node, list):
            node = _list_item(node, k, where)
            continue
        if k not in node or node[k] is None:
            node[k] = {}
        node = node[k]
        if not isinstance(node, dict | list):
            raise ConfigError(f"override {dotted}: {where} is a value, not a section")
    last = keys[-1]
    if isinstance(node, list):
        idx = _index(last, dotted)
        if idx >= len(node):
            raise ConfigError(f"override {dotted}: index {idx} out of range (the list has {len(node)} items)")
        node[idx] = value
    else:
        node[last] = value
    return data


def _index(k: str, where: str) -> int:
    if not k.isdigit():
        raise ConfigError(f"{where}: a list is indexed by a number, got {k!r}")
    return int(k)


def _list_item(node: list, k: str, where: str) -> Any:
    idx = _index(k, where)
    if idx >= len(node):
        raise ConfigError(f"{where}: index {idx} out of range (the list has {len(node)} items)")
    return node[idx]


def _fields_at(cls: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the section at ``loc`` inside ``cls`` (for did-you-mean suggestions)."""
    current: Any = cls
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        current = _model_in(annotation)
        if current is None:
            return []
    return list(getattr(current, "model_fields", {}) or [])


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside an annotation like ``X``, ``X | None`` or ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def format_validation_error(cls: type[BaseModel], err: ValidationError, source: str) -> str:
    """One line per problem, each naming the dotted key; unknown keys get a did-you-mean."""
    lines = [f"invalid recipe ({source}):"]
    for e in err.errors():
        loc = tuple(e["loc"])
        dotted = ".".join(str(p) for p in loc) or "<root>"
        if e["type"] == "extra_forbidden":
            known = _fields_at(cls, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f" (did you mean {'.'.join([*map(str, loc[:-1]), close[0]])!r}?)" if close else ""
            lines.append(f"  {dotted}: unknown key{hint}")
        else:
            lines.append(f"  {dotted}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def load_recipe(cls: type[T], path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> T:
    """Read, merge, override and validate a recipe; raise :class:`ConfigError` on any problem."""
    data = read_yaml(path)
    for o in overrides:
        data = apply_override(data, o)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(cls, e, str(path))) from None
