"""Each stage on tiny models: trainers change parameters, evaluation measures, stages resume."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from r1.runner import plan, run_stage
from r1.training import last_checkpoint
from stages import evaluate, grpo, report
from stages.evaluate import EvalConfig


def _weights(ref):
    return load_file(ref.file("model.safetensors"))


def test_task_data_and_base(tiny_world):
    store, task_data, base_model = tiny_world
    from datasets import load_from_disk

    dd = load_from_disk(task_data.path)
    assert set(dd) == {"train", "test", "corpus", "general"}
    assert {"prompt", "answer", "language"} <= set(dd["train"].column_names)
    m = store.manifest(base_model.key)
    assert m["metrics"]["steps"] == 20 and m["metrics"]["parameters"] > 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model.path)
    assert tok.decode(tok("<think>1+2=3</think>")["input_ids"]) == "<think>1+2=3</think>"
    assert tok.chat_template and tok.eos_token == "<eos>"
    AutoModelForCausalLM.from_pretrained(base_model.path)


def test_grpo_stage_changes_parameters_and_logs_rewards(tiny_world, tiny_recipe, monkeypatch):
    store, task_data, base_model = tiny_world
    from r1 import rewards

    # An untrained tiny model gets 0 accuracy and 0 format everywhere: no advantage, no update.
    # A reward that always varies (shorter is better) makes the test about GRPO, not about luck.
    monkeypatch.setitem(
        rewards.REGISTRY,
        "brevity",
        lambda completions, **kw: [-len(rewards.completion_text(c)) / 50 for c in completions],
    )
    cfg = tiny_recipe.grpo.model_copy(
        update={"rewards": [*tiny_recipe.grpo.rewards, rewards.RewardSpec(name="brevity")]}
    )
    ref = run_stage(store, grpo.STAGE, cfg, {"model": base_model, "data": task_data}, "r1_zero")
    before, after = _weights(base_model), _weights(ref)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "GRPO left every parameter unchanged"
    rows = [json.loads(x) for x in ref.file("train_log.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward" in r]
    assert len(steps) == cfg.max_steps
    for key in (
        "rewards/accuracy/mean",
        "rewards/format/mean",
        "rewards/brevity/mean",
        "completions/mean_length",
    ):
        assert key in steps[0]
    assert not store.work_dir(ref.key).exists()  # work dir cleaned after success
    store._verified.clear()
    assert store.verify(task_data.key).ok  # reading the data wrote no cache files into it


def test_grpo_resumes_from_its_checkpoint_after_a_failure(tiny_world, tiny_recipe, monkeypatch):
    store, task_data, base_model = tiny_world
    cfg = tiny_recipe.grpo.model_copy(update={"seed": 123})
    from r1 import rewards

    calls = {"n": 0}
    real = rewards.REGISTRY["format"]

    def failing_format(completions, **kw):
        calls["n"] += 1
        if calls["n"] == 4:  # after the checkpoint at step 2
            raise RuntimeError("injected failure")
        return real(completions, **kw)

    monkeypatch.setitem(rewards.REGISTRY, "format", failing_format)
    inputs = {"model": base_model, "data": task_data}
    with pytest.raises(rewards.RewardError, match="injected failure"):
        run_stage(store, grpo.STAGE, cfg, inputs, "r1_zero")
    p = plan(store, grpo.STAGE, cfg, inputs)
    assert p.status == "resuming" and p.resume_step == 2
    assert last_checkpoint(store.work_dir(p.key)).name == "checkpoint-2"
    ref = run_stage(store, grpo.STAGE, cfg, inputs, "r1_zero")
    assert store.verify(ref.key).ok
    assert store.manifest(ref.key)["metrics"]["steps"] == cfg.max_steps
    assert calls["n"] == 4 + (cfg.max_steps - 2)  # 3 steps + the failing call, then steps 3..6 after resuming


def test_evaluate_measures_and_report_tabulates(tiny_world, tmp_path):
    store, task_data, base_model = tiny_world
    cfg = EvalConfig(k=2, generation={"max_new_tokens": 16}, limit=8)
    ref = run_stage(store, evaluate.STAGE, cfg, {"model": base_model, "data": task_data}, "eval:base")
    m = json.loads(ref.file("metrics.json").read_text())
    for k in ("accuracy", "pass@1", "pass@k", "maj@k", "format_rate", "mean_length", "lang_consistency"):
        assert 0 <= m[k] <= (cfg.generation.max_new_tokens if k == "mean_length" else 1)
    assert m["n_problems"] == 8 and m["k"] == 2 and m["pass@k"] >= m["pass@1"]
    rcfg = report.ReportConfig(evaluations=["base"])
    rep = run_stage(store, report.STAGE, rcfg, report.report_inputs({"base": ref}), "report")
    data = json.loads(rep.file("report.json").read_text())
    assert data["stages"]["base"]["accuracy"] == m["accuracy"]
    assert "| base |" in rep.file("report.md").read_text()


def test_standard_errors_and_seed_spread_against_hand_computed_values():
    from r1.metrics import standard_error
    from stages.report import spread_of

    assert standard_error([1, 0, 1, 1]) == pytest.approx((0.75 * 0.25 / 4) ** 0.5)  # binomial
    assert standard_error([0.5, 0.5]) == 0
    s = spread_of([0.5, 0.6, 0.7])
    assert s["n"] == 3 and s["sd"] == pytest.approx(0.1)
    assert s["ci95"] == pytest.approx([0.6 - 4.303 * 0.1 / 3**0.5, 0.6 + 4.303 * 0.1 / 3**0.5])
    assert spread_of([0.4]) == {"sd": None, "ci95": None, "n": 1}
