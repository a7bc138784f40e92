"""Agent RL with a tool: the calculator, the tool chat format, the rollout loop, the rewards, the mask."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from data import microworld as mw
from r1.generation import SamplingConfig, ToolLoop, tool_suffix_ids
from r1.models import build_word_tokenizer, load_model, load_tokenizer
from r1.rewards import accuracy_reward, format_reward, tool_format_reward, tool_use_reward
from r1.tools import calculator, episode_stats
from tests.conftest import ROOT

CALL = '<tool_call>{"name":"calculator","arguments":{"expression":"47+8"}}</tool_call>'
Q = [{"role": "user", "content": "Compute 47+8-3."}]


def _call(expression: str) -> dict:
    return {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}


def test_the_calculator_evaluates_chains_and_refuses_anything_else():
    assert calculator("47+8-15") == "40" and calculator("-3 + 4") == "1" and calculator("7") == "7"
    for bad in ("2*3", "import os", "1+", "", "1" * 20):
        with pytest.raises(ValueError):
            calculator(bad)
    from transformers.utils import get_json_schema

    schema = get_json_schema(calculator)  # what the chat template and TRL read
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]


@pytest.fixture(scope="module")
def tok():
    return build_word_tokenizer(
        mw.ENGLISH_WORDS + mw.TOOL_WORDS, mw.CHINESE_CHARS + mw.SYMBOLS + mw.TOOL_SYMBOLS, tools=True
    )


def test_the_tool_template_is_what_trl_needs(tok):
    from trl.chat_template_utils import (
        is_chat_template_prefix_preserving,
        parse_response,
        supports_tool_calling,
    )

    assert is_chat_template_prefix_preserving(tok) and supports_tool_calling(tok)
    prompt = tok.apply_chat_template(Q, tools=[calculator], add_generation_prompt=True, tokenize=False)
    assert prompt == "Tools:calculator\nUser:Compute 47+8-3.\nAssistant:"
    assert "Tools" not in tok.apply_chat_template(Q, add_generation_prompt=True, tokenize=False)
    prefix = tok(prompt, add_special_tokens=False)["input_ids"]
    ids = tok("<think>47+8=" + CALL + "<eos>", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids and "<tool_call>" in tok.convert_ids_to_tokens(ids)
    msg = parse_response(tok, ids, prefix=prefix, tools=[calculator])
    assert msg["content"] == "<think>47+8=" and msg["tool_calls"] == [_call("47+8")]
    broken = tok('<think>47+8=<tool_call>{"name":"calculator"</tool_call><eos>', add_special_tokens=False)
    assert "tool_calls" not in parse_response(tok, broken["input_ids"], prefix=prefix, tools=[calculator])
    suffix = tool_suffix_ids(tok, [{"role": "tool", "name": "calculator", "content": "55"}])
    assert tok.decode(suffix) == "\nTool:55\nAssistant:"
    # the rendered call is exactly what the model writes: the corpus teaches the format it is parsed in
    turn = [*Q, {"role": "assistant", "content": "<think>47+8=", "tool_calls": [_call("47+8")]}]
    assert CALL + "<eos>" in tok.apply_chat_template(turn, tokenize=False)


def test_episode_stats_and_the_tool_rewards():
    used = [
        {"role": "assistant", "content": "<think>47+8=", "tool_calls": [_call("47+8")]},
        {"role": "tool", "name": "calculator", "content": "55"},
        {"role": "assistant", "content": "55, then 55-3=52.</think><answer>52</answer>"},
    ]
    ignored = copy.deepcopy(used)
    ignored[2]["content"] = "45, then 45-3=42.</think><answer>42</answer>"
    failed = copy.deepcopy(used)
    failed[1]["content"] = str({"error": "calculator takes integers joined by + and -"})
    malformed = [{"role": "assistant", "content": '<think>47+8=<tool_call>{"name":"calc'}]
    plain = [{"role": "assistant", "content": "<think>47+8=55</think><answer>55</answer>"}]
    assert episode_stats(used) == {"attempts": 1, "well_formed": 1, "used": 1}
    assert episode_stats(ignored) == {"attempts": 1, "well_formed": 1, "used": 0}
    assert episode_stats(failed)["well_formed"] == 0 and episode_stats(malformed)["attempts"] == 1
    episodes = [used, ignored, failed, malformed, plain]
    assert tool_format_reward(episodes) == [1.0, 1.0, 0.0, 0.0, None]
    assert tool_use_reward(episodes) == [1.0, 0.0, None, None, None]
    # the answer rewards read the assistant turns only, as one text
    assert accuracy_reward([used, ignored], answer=["52", "52"]) == [1.0, 0.0]
    assert format_reward([used]) == [1.0]


def test_tool_traces_keep_the_plain_corpus_and_call_where_the_corpus_slips():
    from data.worlds import _corpus_rows

    cfg = mw.WorldConfig(corpus=mw.CorpusConfig(size=600))
    tools = cfg.model_copy(
        update={"tools": mw.ToolsConfig(enabled=True, corpus_share=0.5, call_carry=1.0, use=1.0)}
    )
    plain, with_tools = _corpus_rows(cfg, set()), _corpus_rows(tools, set())
    assert "messages" not in plain and with_tools["prompt"] == plain["prompt"]
    offered = [i for i, m in enumerate(with_tools["messages"]) if m]
    assert 200 < len(offered) < 400
    for i in set(range(600)) - set(offered):  # untouched rows are the plain corpus's, byte for byte
        assert with_tools["completion"][i] == plain["completion"][i]
    calls = [episode_stats(json.loads(with_tools["messages"][i])) for i in offered]
    assert sum(c["attempts"] for c in calls) > 100
    assert all(c["used"] == c["attempts"] for c in calls)  # use: 1.0 goes on from every result
    correct = accuracy_reward(with_tools["completion"], with_tools["answer"])
    base_correct = accuracy_reward(plain["completion"], plain["answer"])
    assert sum(correct[i] for i in offered) > sum(base_correct[i] for i in offered)  # the tool fixes carries


class _Scripted:
    """An inner backend: on the first turn a call (or ``first``), after a tool turn the answer."""

    def __init__(self, tok, first: str) -> None:
        self.tokenizer = tok
        self.first = tok(first, add_special_tokens=False)["input_ids"]
        self.answer = tok("55, then 55-3=52.</think><answer>52</answer><eos>", add_special_tokens=False)[
            "input_ids"
        ]
        self.tool = tok.convert_tokens_to_ids("Tool")
        self.calls: list[int] = []

    def generate_ids(self, prompt_ids, n, sampling, seed, keys=None):
        self.calls.append(len(prompt_ids))
        return [
            [list(self.answer if self.tool in p[5:] else self.first)[: sampling.max_new_tokens]] * n
            for p in prompt_ids
        ]


def test_the_tool_loop_calls_answers_and_counts_only_the_models_tokens(tok):
    inner = _Scripted(tok, "<think>47+8=" + CALL + "<eos>")
    (g,) = ToolLoop(inner, [calculator], max_calls=2).generate([Q], 1, SamplingConfig(max_new_tokens=120), 0)[
        0
    ]
    assert [m["role"] for m in g.messages] == ["assistant", "tool", "assistant"]
    assert g.messages[1]["content"] == "55" and g.finished
    assert g.text == "<think>47+8=55, then 55-3=52.</think><answer>52</answer>"
    assert g.num_tokens == len(inner.first) + len(inner.answer)  # the tool turn is not the model's
    assert episode_stats(g.messages) == {"attempts": 1, "well_formed": 1, "used": 1}
    # no room for the result and an answer: the episode ends at its call, as TRL's loop does
    (short,) = ToolLoop(inner, [calculator], 2).generate([Q], 1, SamplingConfig(max_new_tokens=33), 0)[0]
    assert [m["role"] for m in short.messages] == ["assistant"] and not short.finished
    # a malformed call is text: nothing runs, the format reward sees the attempt
    bad = _Scripted(tok, '<think>47+8=<tool_call>{"name":"calculator"</tool_call><eos>')
    (b,) = ToolLoop(bad, [calculator], 2).generate([Q], 1, SamplingConfig(max_new_tokens=120), 0)[0]
    assert len(b.messages) == 1 and tool_format_reward([b.messages]) == [0.0]


@pytest.fixture(scope="module")
def tools_trainer(tmp_path_factory):
    """A GRPO trainer with the calculator over a tiny tool-world base (built here)."""
    from flows.recipes import load
    from r1.runner import run_stage
    from r1.store import Store
    from stages import base, data, grpo

    recipe = load("r1-tools", ROOT / "configs/tiny/r1_tools.yaml")
    store = Store(tmp_path_factory.mktemp("tools"))
    task_data = run_stage(store, data.STAGE, recipe.data, {}, "data")
    base_model = run_stage(store, base.STAGE, recipe.base, {"data": task_data}, "base")
    cfg = recipe.grpo.model_copy(update={"max_steps": 1})
    tokenizer = load_tokenizer(base_model.path)
    train = task_data.dataset()["train"]
    return grpo.make_trainer(load_model(base_model.path), tokenizer, train, cfg, tmp_path_factory.mktemp("w"))


def test_trl_rollouts_run_the_tool_and_mask_its_result(tools_trainer, monkeypatch):
    trainer = tools_trainer
    tok = trainer.processing_class
    call = tok("<think>47+8=" + CALL + "<eos>", add_special_tokens=False)["input_ids"]
    answer = tok("55</think><answer>55</answer><eos>", add_special_tokens=False)["input_ids"]
    turns = []

    def scripted(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        turns.append(len(prompt_ids))
        return [list(call if len(turns) == 1 else answer) for _ in prompt_ids], None

    monkeypatch.setattr(trainer, "_generate_single_turn", scripted)
    n = trainer.args.per_device_train_batch_size
    out = trainer._generate_and_score_completions([dict(r) for r in trainer.train_dataset.select(range(n))])
    suffix = tool_suffix_ids(tok, [{"role": "tool", "name": "calculator", "content": "55"}])
    assert turns == [n, n]  # a first turn for every row, then the continuation after the result
    assert out["completion_ids"].tolist() == [call + suffix + answer] * n
    assert out["tool_mask"].tolist() == [[1] * len(call) + [0] * len(suffix) + [1] * len(answer)] * n


def test_tool_result_tokens_carry_no_gradient_and_generated_ones_do(tools_trainer):
    """TRL's loss on one batch whose completions end in a tool result (the rollout ran out of room
    right after it): rewriting the result's tokens leaves every gradient as it was, rewriting a
    generated token does not."""
    trainer = tools_trainer
    model = trainer.model
    torch.manual_seed(0)
    g, width, n_tool = 4, 12, 4
    prompt = torch.randint(10, 200, (g, 6))
    completion = torch.randint(10, 200, (g, width))
    tool_mask = torch.ones(g, width, dtype=torch.long)
    tool_mask[:, -n_tool:] = 0
    batch = {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion,
        "completion_mask": torch.ones_like(completion),
        "tool_mask": tool_mask,
        "advantages": torch.tensor([1.0, -1.0, 0.5, -0.5]),
        "ref_per_token_logps": torch.full((g, width), -5.0),  # a fixed reference: the KL term counts too
        "num_items_in_batch": torch.tensor(int(tool_mask.sum())),
    }

    def grads(completion_ids: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        trainer.compute_loss(model, {**batch, "completion_ids": completion_ids}).backward()
        return torch.cat([p.grad.flatten().clone() for p in model.parameters() if p.grad is not None])

    base = grads(completion)
    assert base.abs().sum() > 0
    other_result = completion.clone()
    other_result[:, -n_tool:] = torch.randint(10, 200, (g, n_tool))
    torch.testing.assert_close(grads(other_result), base, atol=0, rtol=0)
    other_token = completion.clone()
    other_token[:, -n_tool - 1] = (other_token[:, -n_tool - 1] + 1) % 200 + 10
    assert not torch.allclose(grads(other_token), base)
    unmasked = {**batch, "tool_mask": torch.ones_like(tool_mask)}  # without the mask it would count
    model.zero_grad()
    trainer.compute_loss(model, {**unmasked, "completion_ids": other_result}).backward()
    changed = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad()
    trainer.compute_loss(model, unmasked).backward()
    assert not torch.allclose(
        changed, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    )
