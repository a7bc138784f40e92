"""What came after R1, on TRL's trainer: dynamic sampling, reward factories, Kimi's length reward
and curriculum, Qwen3-style prompt selection."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from flows.recipes import load
from r1.config import ConfigError
from r1.grpo_trainer import CurriculumSampler, PassRates
from r1.models import load_model, load_tokenizer
from r1.rewards import RewardSpec, build_rewards, kimi_length_reward
from r1.runner import plan, run_stage
from stages import grpo, selection
from tests.conftest import TINY_R1_ZERO

FLAT = RewardSpec(name="tests.helpers:zh_flat_reward")  # Chinese groups: all rewards equal


def _cfg(tiny_recipe, **update):
    dynamic = grpo.DynamicSampling(enabled=True, max_rounds=10)
    return tiny_recipe.grpo.model_copy(update={"rewards": [FLAT], "dynamic_sampling": dynamic, **update})


def test_dynamic_sampling_drops_exactly_the_flat_groups_and_refills(tiny_world, tiny_recipe, tmp_path):
    _, task_data, base_model = tiny_world
    cfg = _cfg(tiny_recipe, prompts_per_step=4)
    train = task_data.dataset()["train"]
    trainer = grpo.make_trainer(
        load_model(base_model.path), load_tokenizer(base_model.path), train, cfg, tmp_path
    )
    g = cfg.num_generations
    rows = [dict(train[i]) for i in range(8) for _ in range(g)][: cfg.prompts_per_step * g]  # 4 prompts
    flat = sum(rows[i * g]["language"] == "zh" for i in range(cfg.prompts_per_step))
    assert 0 < flat < cfg.prompts_per_step  # the fixture mixes both languages
    trainer.model.train()
    batch = trainer._generate_and_score_completions(rows)
    assert batch["advantages"].numel() == len(rows) == batch["completion_ids"].size(0)
    groups = batch["advantages"].view(-1, g)
    assert (groups != 0).any(dim=1).all()  # every group kept has a learning signal
    metrics = trainer._metrics["train"]
    assert metrics["dynamic_sampling/dropped_fraction"] == [flat / cfg.prompts_per_step]
    assert metrics["dynamic_sampling/rounds"][0] >= 1
    assert int(batch["num_items_in_batch"]) == int(batch["completion_mask"].sum())


def test_a_run_with_dynamic_sampling_resumes_on_the_same_schedule(tiny_world, tiny_recipe, monkeypatch):
    store, task_data, base_model = tiny_world
    from r1 import rewards

    cfg = _cfg(tiny_recipe, seed=321)
    inputs = {"model": base_model, "data": task_data}
    clean = run_stage(store, grpo.STAGE, cfg.model_copy(update={"seed": 322}), inputs, "clean")  # warm caches
    clean = run_stage(store, grpo.STAGE, cfg, inputs, "clean")
    reference = load_file(clean.file("model.safetensors"))
    log = [json.loads(x) for x in clean.file("train_log.jsonl").read_text().splitlines()]
    assert all("dynamic_sampling/dropped_fraction" in r for r in log if "reward" in r)
    # the same run again on a fresh key, killed by a failing reward after its checkpoint at step 2
    cfg2 = cfg.model_copy(update={"trl_args": {"adam_epsilon": 1e-8}})  # same arithmetic, another key
    calls = {"n": 0}
    real = rewards.lookup_reward(FLAT.name)

    def failing(completions, **kw):
        calls["n"] += 1
        if calls["n"] == 9:  # well past the checkpoint at step 2 (refills call it more than once a step)
            raise RuntimeError("injected failure")
        return real(completions, **kw)

    monkeypatch.setattr("tests.helpers.zh_flat_reward", failing)
    with pytest.raises(rewards.RewardError, match="injected failure"):
        run_stage(store, grpo.STAGE, cfg2, inputs, "killed")
    p = plan(store, grpo.STAGE, cfg2, inputs)
    assert p.status == "resuming" and p.resume_step >= 2
    resumed = run_stage(store, grpo.STAGE, cfg2, inputs, "killed")
    after = load_file(resumed.file("model.safetensors"))
    assert all(torch.equal(reference[k], after[k]) for k in reference)


def test_factory_rewards_take_their_arguments_from_the_recipe():
    def rewards(kwargs: str) -> list[str]:
        return [
            f"grpo.rewards=[{{name: accuracy}}, {{name: format}}, {{name: soft_overlong, kwargs: {kwargs}}}]"
        ]

    recipe = load("r1-zero", TINY_R1_ZERO, rewards("{max_completion_len: 10, soft_punish_cache: 4}"))
    funcs, _ = build_rewards(recipe.grpo.rewards)
    assert funcs[2](completions=["a", "b", "c"], completion_ids=[[1] * 5, [1] * 8, [1] * 12]) == [
        0.0,
        -0.5,
        -1.0,
    ]
    with pytest.raises(ConfigError, match="missing a required argument: 'soft_punish_cache'"):
        load("r1-zero", TINY_R1_ZERO, rewards("{max_completion_len: 10}"))
    with pytest.raises(ConfigError, match="did you mean 'soft_punish_cache'"):
        load("r1-zero", TINY_R1_ZERO, rewards("{max_completion_len: 10, soft_punish_cach: 4}"))


def test_kimi_length_reward_on_hand_computed_groups():
    right, wrong = "<answer>5</answer>", "<answer>4</answer>"
    out = kimi_length_reward(
        [right, right, wrong, wrong, right, right],
        answer=["5"] * 5 + [None],
        prompts=["p", "p", "p", "p", "q", "q"],
        completion_ids=[[0] * 10, [0] * 30, [0] * 20, [0] * 50, [0] * 7, [0] * 7],
    )
    # group p: lengths 10..50, lambda = 0.5 - (len - 10) / 40 -> 0.5, 0.0, 0.25, -0.5
    assert out[:4] == [0.5, 0.0, 0.0, -0.5]  # a wrong answer gets min(0, lambda)
    assert out[4] == 0.0 and out[5] is None  # equal lengths: 0; no reference: not scored

    class State:
        global_step = 3

    assert kimi_length_reward([right], answer=["5"], trainer_state=State(), warmup_steps=10) == [0.0]


def test_the_curriculum_moves_from_easy_to_hard_and_keeps_remeasuring():
    rates = PassRates(4)
    for i, r in enumerate((0.75, 0.25, 1.0, 0.0)):
        rates.update(i, r)
    sampler = CurriculumSampler(
        rates, batch=2, group=3, repeat=1, total=10, seed=0, start=0.75, end=0.25, width=0.1, floor=0.05
    )
    early, late = sampler.weights(0), sampler.weights(10)
    assert early.argmax() == 0 and late.argmax() == 1  # easy first, hard but solvable last
    assert early[2] > 0 and early[3] > 0  # solved and unsolved prompts are still re-measured
    rates.rate.append(math.nan)
    assert sampler.weights(5)[-1] == 1.0  # never measured: tried first
    it = iter(sampler)
    layout = [next(it) for _ in range(6)]  # one batch: 2 prompts, each 3 times in a row
    assert layout[0] == layout[1] == layout[2] and layout[3] == layout[4] == layout[5] != layout[0]
    rates.update(0, 0.25)
    assert rates.rate[0] == pytest.approx(0.5)  # an average that moves with the model


def test_selection_keeps_the_band_and_drops_what_needs_no_thinking(tiny_world, monkeypatch, store):
    """A stub model whose pass rates are known: prompt i is solved in i % 5 of its 4 samples, and
    answered without thinking when i % 3 == 0."""
    from r1.generation import Generated, GenerationSettings, render_prompt

    _, task_data, base_model = tiny_world
    train = task_data.dataset()["train"]
    tok = load_tokenizer(base_model.path)
    index = {render_prompt(tok, r["prompt"]): i for i, r in enumerate(train)}

    class Stub:
        tokenizer = tok

        def generate(self, prompts, n, sampling, seed):
            out = []
            for p in prompts:
                if isinstance(p, str):  # the no-CoT probe: the rendered prompt + "<think></think><answer>"
                    i = index[p.removesuffix(selection.NO_COT_PREFIX)]
                    text = (train[i]["answer"] if i % 3 == 0 else "no") + "</answer>"
                    out.append([Generated(text, 3, True)])
                    continue
                i = index[render_prompt(tok, p)]
                gold = train[i]["answer"]
                out.append(
                    [
                        Generated(f"<think>x</think><answer>{gold if j < i % 5 else 'no'}</answer>", 5, True)
                        for j in range(n)
                    ]
                )
            return out

    monkeypatch.setattr(GenerationSettings, "backend_for", lambda self, path: Stub())
    cfg = selection.SelectionConfig(k=4, band=(0.05, 0.95), limit=40, shard_size=16)
    ref = run_stage(store, selection.STAGE, cfg, {"model": base_model, "data": task_data}, "selected")
    stats = json.loads(ref.file("stats.json").read_text())
    rates = [min(i % 5, 4) / 4 for i in range(40)]  # 0, .25, .5, .75, 1
    never = sum(r == 0 for r in rates)
    always = sum(r == 1 for r in rates)
    no_cot = sum(0 < r < 1 and i % 3 == 0 for i, r in enumerate(rates))
    assert stats["pool"] == 40 and stats["dropped"]["never_solved"] == never
    assert stats["dropped"]["always_solved"] == always and stats["dropped"]["no_cot"] == no_cot
    assert stats["kept"] == 40 - never - always - no_cot == stats["pool"] - sum(stats["dropped"].values())
    kept = ref.dataset()["train"]
    assert all(0 < r < 1 for r in kept["pass_rate"]) and not any(kept["no_cot_correct"])
    assert "test" in ref.dataset() and ref.file("README.md").is_file()
    top = selection.choose([dict(r) for r in kept], cfg.model_copy(update={"keep": 5}))[0]
    assert len(top) == 5 and all(r["pass_rate"] == 0.5 for r in top)  # most informative: largest p (1 - p)


def test_the_held_out_curve_is_measured_without_changing_what_trains(tiny_world, tiny_recipe):
    store, task_data, base_model = tiny_world
    inputs = {"model": base_model, "data": task_data}
    cfg = tiny_recipe.grpo.model_copy(update={"seed": 77})
    watched_cfg = cfg.model_copy(update={"heldout_eval": grpo.HeldoutEval(every=2, limit=4, k=2)})
    plain = run_stage(store, grpo.STAGE, cfg, inputs, "plain")
    watched = run_stage(store, grpo.STAGE, watched_cfg, inputs, "watched")
    assert plain.key != watched.key
    log = [json.loads(x) for x in watched.file("train_log.jsonl").read_text().splitlines()]
    points = [(r["heldout/step"], r["heldout/pass@1"]) for r in log if "heldout/pass@1" in r]
    assert [s for s, _ in points] == list(range(0, cfg.max_steps + 1, 2))
    assert all(0 <= v <= 1 for _, v in points)
    a, b = load_file(plain.file("model.safetensors")), load_file(watched.file("model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)  # the measurement draws from its own random state
