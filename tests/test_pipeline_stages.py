"""Stages of the four-stage pipeline on tiny models: sampling resume, curation, RM, phased RL."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, load_from_disk

from r1.rewards import accuracy_reward, preference_reward
from r1.runner import plan, run_stage
from r1.stage import Stage
from stages import curate, reward_model, sample
from stages.curate import CurateConfig
from stages.grpo import GRPOStageConfig, phased_prompts
from stages.reward_model import PreferenceConfig, RewardModelConfig
from stages.sample import SampleConfig

SAMPLE_CFG = SampleConfig(limit=12, n=2, generation={"max_new_tokens": 16}, shard_size=4)


def test_sampling_resumes_at_the_first_unfinished_shard_with_identical_rows(
    tiny_world, tmp_path, monkeypatch
):
    _, task_data, base_model = tiny_world
    from r1.store import Store

    inputs = {"model": base_model, "data": task_data}
    reference = load_from_disk(run_stage(Store(tmp_path / "a"), sample.STAGE, SAMPLE_CFG, inputs, "s").path)
    assert len(reference) == 12 * 2
    assert {"reward_accuracy", "reward_format", "reward_language_consistency", "source"} <= set(
        reference.column_names
    )

    store = Store(tmp_path / "b")
    import r1.generation as gen

    real = gen.TransformersBackend.generate
    calls = {"n": 0}

    def dies_on_second_shard(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed")
        return real(self, *a, **kw)

    monkeypatch.setattr(gen.TransformersBackend, "generate", dies_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        run_stage(store, sample.STAGE, SAMPLE_CFG, inputs, "s")
    p = plan(store, sample.STAGE, SAMPLE_CFG, inputs, "s")
    assert p.status == "resuming" and p.resume_step == 1 and "resuming from shard 1" in p.line()
    monkeypatch.setattr(gen.TransformersBackend, "generate", real)
    resumed = load_from_disk(run_stage(store, sample.STAGE, SAMPLE_CFG, inputs, "s").path)
    assert resumed.to_list() == reference.to_list()


def _fake_samples(rows: list[dict]):
    def write(ctx):
        Dataset.from_list(rows).save_to_disk(str(ctx.out_dir))

    return Stage("fake_samples", "1", write, CurateConfig)


def _row(i, completion, answer="5", language="en", prompt="Compute 2+3.", tokens=10, finished=True, j=0):
    from r1.rewards import accuracy_reward

    return {
        "prompt": [{"role": "user", "content": prompt}],
        "answer": answer,
        "language": language,
        "completion": completion,
        "prompt_index": i,
        "sample_index": j,
        "num_tokens": tokens,
        "finished": finished,
        "source": "model-x",
        "reward_accuracy": accuracy_reward([completion], [answer])[0],
    }


def test_curation_counts_add_up_and_every_kept_row_verifies(tiny_world, store):
    _, task_data, _ = tiny_world
    from datasets import load_from_disk as lfd

    test_prompt = lfd(task_data.path)["test"][0]["prompt"][0]["content"]
    good = "<think>2+3=5. so the answer is 5.</think><answer>5</answer>"
    rows = [
        _row(0, good),
        _row(0, good, j=1),  # duplicate of the first
        _row(0, "<think>2+3=5. so the answer is 5.</think><answer>5</answer> ", j=2),  # same after strip
        _row(1, "<think>2+3=6. so the answer is 6.</think><answer>6</answer>"),  # wrong
        _row(2, "2+3=5. so the answer is 5."),  # no tags
        _row(3, "<think>2+3=5。所以答案是 5。</think><answer>5</answer>"),  # zh CoT for an en prompt
        _row(4, good, tokens=500),  # over-long
        _row(5, good, prompt=test_prompt),  # contaminated: an evaluation prompt
        _row(6, good),
        _row(6, "<think>2+3=5, then 5+0=5. so the answer is 5.</think><answer>5</answer>", j=1, tokens=14),
    ]
    samples = run_stage(store, _fake_samples(rows), CurateConfig(), {}, "samples")
    cfg = CurateConfig(max_per_prompt=1, decontaminate_ngram=4, max_tokens=80, curated=3, non_reasoning=2)
    out = run_stage(store, curate.STAGE, cfg, {"samples": samples, "data": task_data}, "cold")
    stats = json.loads(out.file("stats.json").read_text())
    assert stats["generated"] == len(rows)
    assert stats["generated"] == stats["kept"] + sum(stats["dropped"].values())
    assert stats["dropped"] == {
        "contaminated": 1,
        "format": 1,
        "wrong": 1,
        "mixed_language": 1,
        "overlong": 1,
        "duplicate": 2,
        "over_k": 1,
    }
    assert stats["added"] == {"curated": 3, "non_reasoning": 2}
    ds = load_from_disk(out.path)
    assert len(ds) == stats["kept"] + 5
    kept = sorted((r for r in ds if r["source"] == "model-x"), key=lambda r: r["prompt_index"])
    assert [r["prompt_index"] for r in kept] == [0, 6] and kept[1]["num_tokens"] == 10  # best = shortest
    reasoning = [r for r in ds if r["kind"] == "reasoning"]
    answers = [r["prompt"][0]["content"] for r in reasoning]
    assert test_prompt not in answers
    card = out.file("README.md").read_text()
    assert "generated: 10, kept: 2" in card and "| tokens | rows |" in card and "over_k 1" in card
    # every curated and kept reasoning row is correct when re-checked
    golds = {r["prompt"][0]["content"]: r["answer"] for r in load_from_disk(task_data.path)["train"]}
    golds["Compute 2+3."] = "5"
    assert all(
        accuracy_reward([r["completion"]], [golds[r["prompt"][0]["content"]]]) == [1.0] for r in reasoning
    )


def test_phased_prompts_bring_general_prompts_in_late():
    reasoning = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": f"r{i}"}], "answer": str(i), "language": "en"}
            for i in range(5)
        ]
    )
    general = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": f"g{i}"}], "answer": "x", "language": "zh"}
            for i in range(3)
        ]
    )
    cfg = GRPOStageConfig(
        max_steps=8, prompts_per_step=4, general_split="general", general_from=0.75, general_share=0.5
    )
    ds = phased_prompts(reasoning, general, cfg)
    assert len(ds) == 32
    kinds = [ds[i * 4 : (i + 1) * 4]["kind"] for i in range(8)]
    assert all(k == ["reasoning"] * 4 for k in kinds[:6])
    assert all(sorted(k) == ["general", "general", "reasoning", "reasoning"] for k in kinds[6:])
    assert all(a is None for a, k in zip(ds["answer"], ds["kind"], strict=True) if k == "general")


def test_reward_model_trains_and_scores_summaries(tiny_world, store):
    _, task_data, base_model = tiny_world
    pairs = run_stage(
        store, reward_model.PREFERENCES, PreferenceConfig(n_test=16), {"data": task_data}, "prefs"
    )
    dd = load_from_disk(pairs.path)
    assert len(dd["test"]) == 16
    assert not {p[0]["content"] for p in dd["test"]["prompt"]} & {
        p[0]["content"] for p in dd["train"]["prompt"]
    }
    cfg = RewardModelConfig(max_steps=30, batch_size=16, learning_rate=3e-3, save_steps=10)
    rm = run_stage(store, reward_model.STAGE, cfg, {"model": base_model, "pairs": pairs}, "rm")
    m = json.loads(rm.file("metrics.json").read_text())
    store._verified.clear()
    assert store.verify(pairs.key).ok  # TRL's tokenization left no cache files in the input artifact
    assert 0.0 <= m["pairwise_accuracy"] <= 1.0
    log = store.manifest(rm.key)["metrics"]
    assert log["steps"] == 30
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(rm.path)
    prompts = [[{"role": "user", "content": "Write 5 in words."}]] * 2
    out = preference_reward(
        ["<think>2+3=5</think><answer>5</answer>", "<think></think><answer>five</answer>"],
        prompts=prompts,
        reward_model_path=rm.path,
        kind=["reasoning", "general"],
    )
    assert out[0] is None and 0.0 < out[1] < 1.0
