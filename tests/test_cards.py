"""Model cards from lineage, `r1 export`, `r1 compare`, progress lines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def evaluated(tiny_world, tiny_recipe):
    """The tiny base with one evaluation of it in the same store."""
    from r1.runner import run_stage
    from stages import evaluate

    store, task_data, base_model = tiny_world
    cfg = tiny_recipe.eval.model_copy(update={"limit": 4, "k": 2})
    ev = run_stage(store, evaluate.STAGE, cfg, {"model": base_model, "data": task_data}, "eval:base")
    return store, base_model, ev


def test_every_model_artifact_carries_a_card_built_from_its_lineage(tiny_world):
    store, task_data, base_model = tiny_world
    card = (store.path(base_model.key) / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\nlibrary_name: transformers")
    assert f"# {base_model.key}" in card and "stage `base`" in card
    assert f"| data | `{task_data.key}` | task_data |" in card  # its parent, by role and stage
    assert "## Recipe section" in card and "hidden_size: 32" in card  # the tiny recipe's base
    assert "## Training metrics" in card and "transformers " in card
    assert store.verify(base_model.key, deep=True).ok  # the card is one of the hashed files
    assert json.loads((store.path(base_model.key) / "config.json").read_text())["use_cache"] is True
    assert not (store.path(task_data.key) / "README.md").exists()  # data is not a model


def test_export_writes_a_clean_loadable_folder_whose_card_lists_the_evaluations(evaluated, tmp_path):
    from transformers import AutoModelForCausalLM

    from r1.cards import export

    store, base_model, ev = evaluated
    out = export(store, base_model.key, tmp_path / "export")
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "README.md"} <= names
    assert not names & {"manifest.json", "train_log.jsonl"}
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"`{ev.key}`" in card and "## Lineage" in card and "k=2" in card
    assert json.loads((out / "config.json").read_text())["use_cache"] is True
    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() > 0
    with pytest.raises(FileExistsError):
        export(store, base_model.key, out)  # never into a folder with files
    with pytest.raises(ValueError, match="not a model"):
        export(store, ev.key, tmp_path / "eval")
    assert not (tmp_path / "eval").exists() and not list(tmp_path.glob(".*tmp"))


def test_the_cli_exports_and_compares(evaluated, tmp_path):
    store, base_model, _ = evaluated

    def r1(*args: str):
        return subprocess.run(
            [sys.executable, "-m", "flows.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )

    out = r1("export", base_model.key, str(tmp_path / "m"), "--store", str(store.root))
    assert out.returncode == 0 and "model card" in out.stdout, out.stderr
    missing = r1("export", "base-0000", str(tmp_path / "n"), "--store", str(store.root))
    assert missing.returncode == 1 and "no artifact" in missing.stderr

    one = {"title": "a", "stages": {"base": {"pass@1": 0.4, "k": 4, "se": {"pass@1": 0.02}}}}
    seeds = {
        "title": "b",
        "seeds": [0, 1],
        "stages": {"base": {"pass@1": 0.5}},
        "spread": {"base": {"pass@1": {"sd": 0.03}}},
    }
    for name, r in (("one", one), ("seeds", seeds)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps(r))
    cmp = r1("compare", str(tmp_path / "one"), str(tmp_path / "seeds" / "report.json"))
    assert cmp.returncode == 0, cmp.stderr
    assert "| one / base | | 0.400 ± 0.020" in cmp.stdout.replace("|  |", "| |")
    assert "| seeds / base | | 0.500 ± 0.030" in cmp.stdout.replace("|  |", "| |")
    assert "k = 4" in cmp.stdout and "sd over seeds 0,1" in cmp.stdout
    assert r1("compare", str(tmp_path / "nothing")).returncode == 1


def test_progress_lines_carry_elapsed_time_and_an_eta(monkeypatch, capsys):
    from r1 import progress

    clock = iter([0.0, 10.0, 10.0, 30.0, 30.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock, 30.0))
    monkeypatch.setenv("R1_PROGRESS", "normal")
    meter = progress.Meter(40, done=10, name="r1_zero")  # resumed at 10: only its own rate counts
    meter.update(20, "loss 1.0")
    meter.update(40)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["[r1_zero] step 20/40  loss 1.0  10s, ETA 20s", "[r1_zero] step 40/40  30s"]
    monkeypatch.setenv("R1_PROGRESS", "quiet")
    progress.Meter(5, name="x").update(5)
    assert capsys.readouterr().out == ""
    assert progress.duration(3725) == "1h02m" and progress.duration(65) == "1m05s"


def test_the_report_picks_marked_samples_in_both_languages_and_prefect_gets_the_image_inline(tmp_path):
    from flows.common import _inline_images
    from stages.report import pick_samples, samples_markdown

    def rec(prompt, samples, correct, checks, single):
        return {
            "prompt": [{"role": "user", "content": prompt}],
            "answer": "7",
            "samples": samples,
            "sample_correct": correct,
            "sample_self_check": checks,
            "sample_single_language": single,
        }

    records = [
        rec("What is 3 + 4 ?", ["a", "b"], [True, False], [False, True], [True, True]),
        rec("计算 3 加 4", ["c", "d"], [False, True], [False, False], [True, False]),
    ]
    picked = pick_samples(records, per_stage=4)
    assert [p["completion"] for p in picked] == ["a", "c", "b", "d"]
    assert picked[2]["self_check"] and picked[3]["language_switch"] and not picked[0]["language_switch"]
    md = "\n".join(samples_markdown({"base": picked}))
    assert "**base** (correct; gold 7): What is 3 + 4 ?" in md and "(wrong, self-check; gold 7)" in md
    assert pick_samples(records, per_stage=4) == picked  # deterministic

    (tmp_path / "grpo_curves.png").write_bytes(b"\x89PNG fake")
    out = _inline_images(tmp_path, "x\n![GRPO curves](grpo_curves.png)\n![gone](missing.png)")
    assert "](data:image/png;base64," in out and "![gone](missing.png)" in out


def test_known_noise_is_filtered_and_real_warnings_are_not():
    import logging

    from r1.noise import _DropBenign

    f = _DropBenign()

    def shown(msg: str) -> bool:
        return f.filter(logging.LogRecord("transformers", logging.WARNING, __file__, 1, msg, None, None))

    head = "LlamaForSequenceClassification LOAD REPORT from: x\nKey | Status |\n---\n"
    assert not shown(head + "score.weight | MISSING | \n\nNotes:\n- MISSING: newly initialized")
    assert shown(head + "score.weight | MISSING | \nmodel.norm.weight | MISSING | \n")
    assert not shown("There were missing keys in the checkpoint model loaded: ['lm_head.weight'].")
    assert shown("There were missing keys in the checkpoint model loaded: ['model.norm.weight'].")
    assert not shown(
        "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it."
    )


def test_plan_says_what_a_run_would_do_on_a_half_cached_store_and_builds_nothing(tiny_recipe, tmp_path):
    from r1.runner import run_stage
    from r1.store import Store
    from stages import data
    from tests.conftest import TINY_R1_ZERO

    store = Store(tmp_path)
    built = run_stage(store, data.STAGE, tiny_recipe.data, {}, "data")
    cmd = [
        sys.executable,
        "-m",
        "flows.cli",
        "plan",
        "r1-zero",
        "--recipe",
        str(TINY_R1_ZERO),
        "--store",
        str(tmp_path),
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"[data] cached ({built.key})"
    assert [line.split()[0] for line in lines[1:-1]] == [
        "[base]",
        "[eval:base]",
        "[r1_zero]",
        "[eval:r1_zero]",
        "[report]",
    ]
    assert all(" running (" in line for line in lines[1:-1]) and lines[-1] == "plan: 1 cached, 5 running"
    assert [m["key"] for m in store.list()] == [built.key]  # nothing was built
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())


def test_the_cli_takes_store_everywhere_prefixes_for_keys_and_shows_its_version(tiny_world, tmp_path):
    store, task_data, base_model = tiny_world

    def r1(*args: str):
        return subprocess.run(
            [sys.executable, "-m", "flows.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )

    cfg = r1("config", "r1-zero", "--store", str(tmp_path), "grpo.learning_rate=1e-4")  # the help's example
    assert (
        cfg.returncode == 0
        and cfg.stdout.startswith(f"# store: {tmp_path}")
        and "learning_rate: 0.0001" in cfg.stdout
    )
    lineage = r1("lineage", base_model.key[:9], "--store", str(store.root))
    assert lineage.returncode == 0 and lineage.stdout.splitlines()[0] == base_model.key
    assert r1("verify", base_model.key[:9], "--store", str(store.root)).returncode == 0
    listing = r1("artifacts", "--store", str(store.root)).stdout
    assert any(
        line.startswith(base_model.key) and "steps " in line and (" MB" in line or " KB" in line)
        for line in listing.splitlines()
    )
    assert r1("--version").stdout.startswith("r1-pipeline ")
