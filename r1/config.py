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


def task_split_uses(section: BaseModel, prefix: str = "") -> list[tuple[str, str]]:
    """Every (dotted key, split name) of the task data that ``section`` and its sub-sections read.

    A section that reads splits of the task data says which by defining ``task_splits()`` (field
    name -> split); a recipe checks them against the splits its data stage writes, at load time.
    """
    uses: list[tuple[str, str]] = []
    own = getattr(section, "task_splits", None)
    if callable(own):
        uses += [(f"{prefix}{field}", split) for field, split in own().items()]
    for name in type(section).model_fields:
        value = getattr(section, name)
        if isinstance(value, BaseModel):
            uses += task_split_uses(value, f"{prefix}{name}.")
    return uses


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


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``; a section that changes its ``kind`` replaces the inherited one."""
    out = dict(base)
    for k, v in over.items():
        old = out.get(k)
        mergeable = isinstance(v, dict) and isinstance(old, dict)
        if mergeable and "kind" in v and v["kind"] != old.get("kind", v["kind"]):
            mergeable = False  # e.g. base: {kind: pretrained} over a micro base's model settings
        out[k] = deep_merge(old, v) if mergeable else v
    return out


def read_utf8(path: Path, error: type[Exception]) -> str:
    """A file's text, or ``error`` naming the file and the first byte that is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A recipe file as a dict, with its ``inherit`` chain resolved (relative paths, no cycles)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe file not found: {path}")
    resolved = path.resolve()
    if resolved in _seen:
        raise ConfigError(f"recipe inherits itself: {' -> '.join(map(str, (*_seen, resolved)))}")
    try:
        data = yaml.safe_load(read_utf8(path, ConfigError))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if data is None:
        raise ConfigError(f"{path}: the recipe is empty (a recipe names its flow and sections)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe must be a mapping of sections, got {type(data).__name__}")
    parent = data.pop("inherit", None)
    if parent is None:
        return data
    return deep_merge(read_yaml(path.parent / parent, (*_seen, resolved)), data)


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


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModels inside an annotation like ``X``, ``X | None``, ``list[X]`` or ``A | B``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        out += [m for m in _models_in(arg) if m not in out]
    return out


def _walk(cls: type[BaseModel], loc: tuple) -> tuple[list[str], type[BaseModel] | None]:
    """The key path a user wrote for pydantic's ``loc``, and the section it ends in.

    Pydantic puts a tagged union's tag into the location (``base.micro.model``); the recipe has
    no such key, so the tag selects the union member and is left out of the path.
    """
    current: type[BaseModel] | None = cls
    shown: list[str] = []
    members: dict[Any, type[BaseModel]] = {}
    for part in loc:
        if isinstance(part, int):
            shown.append(str(part))
            continue
        if part in members:
            current, members = members[part], {}
            continue
        members = {}
        shown.append(str(part))
        fields = getattr(current, "model_fields", None) or {}
        if part not in fields:
            current = None
            continue
        found = _models_in(fields[part].annotation)
        current = found[0] if len(found) == 1 else None
        if len(found) > 1:
            tag = fields[part].discriminator or "kind"
            members = {m.model_fields[tag].default: m for m in found if tag in m.model_fields}
    return shown, current


def format_validation_error(cls: type[BaseModel], err: ValidationError, source: str) -> str:
    """One line per problem, each naming the dotted key; unknown keys get a did-you-mean."""
    lines = [f"invalid recipe ({source}):"]
    for e in err.errors():
        loc = tuple(e["loc"])
        shown, _ = _walk(cls, loc)
        dotted = ".".join(shown) or "<root>"
        if e["type"] == "extra_forbidden":
            parent, section = _walk(cls, loc[:-1])
            fields = getattr(section, "model_fields", {}) or {}
            close = difflib.get_close_matches(str(loc[-1]), list(fields), n=1)
            # a key that moved into a sub-section (eval.temperature -> eval.generation.temperature)
            moved = [
                n for n, f in fields.items() for m in _models_in(f.annotation) if loc[-1] in m.model_fields
            ]
            hint = [*parent, close[0]] if close else [*parent, moved[0], str(loc[-1])] if moved else None
            hint = f" (did you mean {'.'.join(hint)!r}?)" if hint else ""
            lines.append(f"  {dotted}: unknown key{hint}")
        elif e["type"] == "value_error":
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"  {dotted}: {msg}" if shown else f"  {msg}")
        else:
            lines.append(f"  {dotted}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def load_recipe(
    cls: type[T],
    path: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    context: dict[str, Any] | None = None,
) -> T:
    """Read, merge, override and validate a recipe; raise :class:`ConfigError` on any problem.

    ``context`` reaches every validator (e.g. a deployment's allow-list of reward modules).
    """
    data = read_yaml(path)
    for o in overrides:
        data = apply_override(data, o)
    try:
        return cls.model_validate(data, context=context)
    except ValidationError as e:
        raise ConfigError(format_validation_error(cls, e, str(path))) from None
