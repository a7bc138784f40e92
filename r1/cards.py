"""Model cards from lineage, and export of a model artifact as a clean Hugging Face folder.

Every model artifact (a folder with a ``config.json``) gets a ``README.md`` when it is built:
the stage and its recipe section, its parent artifacts (data, models) with their own stages, the
training metrics, library versions and code revision, so a checkpoint copied out of the store
still says what made it. ``r1 export KEY DIR`` writes the model files without the store's
bookkeeping (manifest, per-step log) and a card that also lists every evaluation of the model
found in the store; ``--push-to-hub REPO`` uploads that folder when the hub is reachable.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

CARD = "README.md"
# files of a model artifact that are the store's, not the model's
_BOOKKEEPING = {"manifest.json", "train_log.jsonl", CARD}
_EVAL_FIGURES = ("accuracy", "pass@1", "pass@k", "maj@k", "format_rate", "mean_length")


def is_model(folder: Path) -> bool:
    """A Hugging Face model folder (what gets a card)."""
    return (Path(folder) / "config.json").is_file()


def _number(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# figures of one attempt, not of the model: a resumed build must write the same card
_VOLATILE = {"artifact", "wall_seconds", "resumed_from", "world_size", "rollout_share"}


def _metrics_lines(metrics: dict[str, Any]) -> list[str]:
    flat = {
        k: v for k, v in sorted(metrics.items()) if isinstance(v, int | float | str) and k not in _VOLATILE
    }
    return [f"| {k} | {_number(v)} |" for k, v in flat.items()]


def _evaluation_rows(evaluations: Iterable[dict[str, Any]]) -> list[str]:
    rows = []
    for m in evaluations:
        metrics, se = m.get("metrics", {}), m.get("metrics", {}).get("se", {})
        cells = []
        for k in _EVAL_FIGURES:
            v = metrics.get(k)
            cell = "-" if v is None else _number(v)
            if k in se and v is not None:
                cell += f" ± {_number(se[k])}"
            cells.append(cell)
        config = m.get("config", {})
        k_samples = metrics.get("k", config.get("k", "?"))
        offered = (config.get("generation") or {}).get("tools")
        where = f"{config.get('split', '?')} of `{m.get('inputs', {}).get('data', '?')}`"
        where += (
            f", tools {offered}" if offered else ""
        ) + f" (n={metrics.get('n_problems', '?')}, k={k_samples})"
        rows.append(f"| `{m['key']}` | {where} | " + " | ".join(cells) + " |")
    return rows


def model_card(
    manifest: dict[str, Any],
    parent: Callable[[str], dict[str, Any] | None],
    lineage: list[tuple[int, str, str]] | None = None,
    evaluations: Iterable[dict[str, Any]] = (),
) -> str:
    """The card of the model whose manifest (or, at build time, manifest-to-be) is ``manifest``.

    ``parent(key)`` returns a parent artifact's manifest (None when the store lacks it);
    ``lineage`` is the full ancestry (``Store.lineage``) when the artifact is already committed.
    """
    key, stage = manifest["key"], manifest["stage"]
    tags = list(
        dict.fromkeys(
            ["r1-pipeline", stage, *(["grpo", "reinforcement-learning"] if stage == "grpo" else [])]
        )
    )
    front = {"library_name": "transformers", "tags": tags, "pipeline_tag": "text-generation"}
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).strip(),
        "---",
        "",
        f"# {key}",
        "",
        f"A checkpoint made by the r1-pipeline stage `{stage}` (version {manifest.get('version', '?')}) "
        + (f"on {manifest['created']} " if manifest.get("created") else "")
        + f"at code revision `{manifest.get('code_revision', 'unknown')}`. "
        "Its key is the hash of everything below the *Recipe section* and the keys of its parents: "
        "the same recipe on the same inputs gives the same key.",
        "",
        "## Parents",
        "",
        "| role | artifact | stage | what it says |",
        "|---|---|---|---|",
    ]
    for role, pkey in sorted(manifest.get("inputs", {}).items()):
        pm = parent(pkey)
        summary = ""
        if pm:
            shown = {
                k: v
                for k, v in pm.get("metrics", {}).items()
                if isinstance(v, int | float) and k not in _VOLATILE
            }
            summary = ", ".join(f"{k} {_number(v)}" for k, v in list(shown.items())[:4])
        lines.append(f"| {role} | `{pkey}` | {pm['stage'] if pm else '(not in this store)'} | {summary} |")
    if manifest.get("external"):
        lines += ["", "Outside files it read (content hashes, part of the key):", ""]
        lines += [
            f"- `{name}`: {json.dumps(fp, sort_keys=True)}"
            for name, fp in sorted(manifest["external"].items())
        ]
    if lineage:
        lines += ["", "## Lineage", "", "```"]
        lines += ["  " * depth + (f"{role}: " if role else "") + k for depth, role, k in lineage]
        lines += ["```"]
    lines += [
        "",
        "## Recipe section",
        "",
        "```yaml",
        yaml.safe_dump(manifest.get("config", {}), sort_keys=True).strip(),
        "```",
    ]
    metric_lines = _metrics_lines(manifest.get("metrics", {}))
    if metric_lines:
        lines += ["", "## Training metrics", "", "| metric | value |", "|---|---|", *metric_lines]
    eval_rows = _evaluation_rows(evaluations)
    if eval_rows:
        header = " | ".join(f"{k} ± se" if k not in ("mean_length",) else k for k in _EVAL_FIGURES)
        lines += [
            "",
            "## Evaluations in the store",
            "",
            "One run each; ± is the standard error over problems. Spread over seeds is wider: compare runs over seeds.",
            "",
            f"| evaluation | on | {header} |",
            "|---|---|" + "---|" * len(_EVAL_FIGURES),
            *eval_rows,
        ]
    libraries = manifest.get("libraries", {})
    if libraries:
        lines += ["", "## Libraries", "", ", ".join(f"{k} {v}" for k, v in sorted(libraries.items()))]
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'model = AutoModelForCausalLM.from_pretrained("<this folder>")',
        'tokenizer = AutoTokenizer.from_pretrained("<this folder>")',
        "```",
        "",
    ]
    return "\n".join(lines)


def evaluations_of(rows: Iterable[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The evaluation manifests (``Store.list()`` rows) whose model input is ``key``."""
    return [m for m in rows if m.get("stage") == "evaluate" and m.get("inputs", {}).get("model") == key]


def export(store, key: str, dest: Path) -> Path:
    """Write artifact ``key`` as a clean Hugging Face folder with its card at ``dest`` (atomic).

    ``dest`` must not exist or be empty: an export never mixes with other files. The folder is
    written beside ``dest`` and renamed into place, so an interrupted export leaves nothing.
    """
    if not store.exists(key):
        raise FileNotFoundError(f"no artifact {key!r} in {store.location}")
    ref = store.materialize(store.ref(key))
    src = Path(ref.path)
    if not is_model(src):
        raise ValueError(f"{key} is not a model artifact (no config.json); export takes a model")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"{dest} exists and is not empty; export into a new folder")
    manifest = store.manifest(key)
    card = model_card(
        manifest,
        parent=lambda k: store.manifest(k) if store.exists(k) else None,
        lineage=store.lineage(key),
        evaluations=evaluations_of(store.list(), key),
    )
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.mkdir(parents=True)
    try:
        for f in sorted(src.rglob("*")):
            if f.is_file() and f.relative_to(src).as_posix() not in _BOOKKEEPING:
                out = tmp / f.relative_to(src)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, out)
        (tmp / CARD).write_text(card, encoding="utf-8")
        config = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
        if config.get("use_cache") is False:  # saved by an older version, while training had it off
            config["use_cache"] = True
            (tmp / "config.json").write_text(
                json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
        if dest.exists():
            dest.rmdir()
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def push(folder: Path, repo: str) -> str:
    """Upload an exported folder to the Hugging Face Hub (needs the network and a token)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise RuntimeError("the hub is off (HF_HUB_OFFLINE=1): unset it to push, or copy the folder yourself")
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo, exist_ok=True)
    info = api.upload_folder(folder_path=str(folder), repo_id=repo, commit_message="r1-pipeline export")
    return str(getattr(info, "commit_url", repo))
