"""Thinking-mode fusion: the switches, the template, the budget, the data, the rewards, by_mode."""

from __future__ import annotations

import pytest

from r1.generation import SamplingConfig, ThinkingBudget, TransformersBackend
from r1.models import MICRO_FUSION_TEMPLATE, load_model, load_tokenizer, speak_both_modes
from r1.modes import EMPTY_THINK, obeys, requested_mode, switch_of, whole_answer, with_mode
from r1.rewards import format_reward, language_consistency_reward, thinking_mode_reward
from stages.evaluate import mode_metrics
from stages.fusion import FusionDataConfig, fusion_rows

Q = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "What is 3 + 4 ?"}]


def test_the_last_switch_wins_across_turns():
    assert requested_mode(Q) == "think" and switch_of(Q) is None
    assert requested_mode(with_mode(Q, "no_think")) == "no_think"
    both = with_mode(with_mode(Q, "no_think"), "think")
    assert requested_mode(both) == "think"
    turns = [
        *with_mode(Q, "think"),
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "/no_think"},
    ]
    assert requested_mode(turns) == "no_think"
    assert requested_mode("plain text /no_think") == "no_think"


@pytest.fixture(scope="module")
def fused(tiny_world):
    _, _, base = tiny_world
    model, tok = load_model(base.path), load_tokenizer(base.path)
    assert speak_both_modes(model, tok)
    return model, tok


def test_the_template_honours_enable_thinking_and_the_switches(fused):
    _, tok = fused
    assert tok.chat_template == MICRO_FUSION_TEMPLATE

    def render(messages, **kw):
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)

    assert render(Q).endswith("Assistant:")  # no switch: thinking
    assert render(with_mode(Q, "think")).endswith("Assistant:")
    assert render(with_mode(Q, "no_think")).endswith("Assistant:" + EMPTY_THINK)
    assert render(with_mode(with_mode(Q, "no_think"), "think")).endswith("Assistant:")  # later wins
    assert render(with_mode(Q, "think"), enable_thinking=False).endswith(EMPTY_THINK)  # the flag wins
    assert render(Q, enable_thinking=True).endswith("Assistant:")
    # the switches are whole tokens now, and the generation prompt is a prefix of the training text
    ids = tok("3 /no_think", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids and tok.convert_ids_to_tokens(ids)[-1] == "/no_think"
    for tag in ("<think>", "</think>", "<answer>", "</answer>"):  # the tags stay whole tokens
        assert tok.convert_ids_to_tokens(tok(tag, add_special_tokens=False)["input_ids"]) == [tag]
    answer = [{"role": "assistant", "content": EMPTY_THINK + "<answer>7</answer>"}]
    full = tok.apply_chat_template(with_mode(Q, "no_think") + answer, tokenize=False)
    assert full.startswith(render(with_mode(Q, "no_think")))


def test_new_switch_rows_are_the_mean_embedding(fused, tiny_world):
    model, tok = fused
    emb = model.get_input_embeddings().weight
    new = tok.convert_tokens_to_ids("/think")
    assert emb.shape[0] == len(tok)
    assert emb[new].tolist() == pytest.approx(emb[:new].mean(0).tolist(), abs=1e-5)


class _Scripted:
    """A backend that writes one word until its allowance ends, or answers once the chain is closed."""

    def __init__(self, tok) -> None:
        self.tokenizer = tok
        self.word = tok.convert_tokens_to_ids("1")
        self.close = tok.convert_tokens_to_ids("</think>")
        self.answer = tok("<answer>7</answer>", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        self.calls: list[int] = []

    def generate_ids(self, prompt_ids, n, sampling, seed, keys=None):
        self.calls.append(sampling.max_new_tokens)
        return [
            [list(self.answer) if p[-1] == self.close else [self.word] * sampling.max_new_tokens] * n
            for p in prompt_ids
        ]


def test_the_budget_closes_the_chain_after_n_tokens_and_the_model_answers(fused):
    _, tok = fused
    inner = _Scripted(tok)
    out = ThinkingBudget(inner, 8).generate([Q], 2, SamplingConfig(max_new_tokens=20), 0)
    assert inner.calls == [8, 12]  # the chain's 8 tokens, then the rest of the allowance
    g = out[0][0]
    assert g.text == "1" * 8 + "</think><answer>7</answer>" and g.finished
    assert g.num_tokens == 8 + 1 + 4  # chain + closing tag + answer (3) and EOS
    short = ThinkingBudget(inner, 30).generate([Q], 1, SamplingConfig(max_new_tokens=20), 0)
    assert short[0][0].text == "1" * 20  # a budget beyond the allowance changes nothing


def test_the_budget_on_a_real_model(fused):
    model, tok = fused
    close = tok.convert_tokens_to_ids("</think>")
    backend = ThinkingBudget(TransformersBackend(model, tok), 5)
    texts = [
        tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in (Q, with_mode(Q, "think"))
    ]
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    out = backend.generate_ids(ids, 4, SamplingConfig(temperature=1.0, max_new_tokens=12), 0)
    for group in out:
        for c in group:
            # the chain is closed within the budget (by the model or by the budget) unless it ended
            assert close in c[:6] or tok.eos_token_id in c[:5]
            assert len(c) <= 12 + 1


def test_fusion_rows_teach_both_modes_from_the_curated_set():
    trace = "<think>3 + 4 = 7</think><answer>7</answer>"
    rows = [{"prompt": Q, "completion": [{"role": "assistant", "content": trace}], "kind": "reasoning"}] * 50
    general = {
        "prompt": Q,
        "completion": [{"role": "assistant", "content": EMPTY_THINK + "<answer>x</answer>"}],
        "kind": "general",
    }
    out = fusion_rows(rows + [general] * 10, FusionDataConfig(no_think_share=0.5, switch_share=0.8))
    think = [r for r in out if r["mode"] == "think"]
    no_think = [r for r in out if r["mode"] == "no_think"]
    assert len(think) == 50 and 10 + 15 < len(no_think) < 10 + 35
    direct = [r for r in no_think if r["kind"] == "reasoning"]
    assert all(requested_mode(r["prompt"]) == "no_think" for r in direct)  # never unmarked
    assert all(r["completion"][0]["content"] == EMPTY_THINK + "<answer>7</answer>" for r in direct)
    assert all(requested_mode(r["prompt"]) == "think" for r in think)
    assert 0 < sum(not r["switched"] for r in think) < 25  # some unmarked: thinking is the default


def test_rewards_read_the_prefilled_empty_think():
    no = with_mode(Q, "no_think")
    direct, chain = "<answer>7</answer>", "<think>3 + 4 = 7</think><answer>7</answer>"
    assert whole_answer(no, direct) == EMPTY_THINK + direct
    assert format_reward([direct, chain], prompts=[no, no]) == [1.0, 1.0]
    assert format_reward([direct], prompts=[Q]) == [0.0]  # no switch: nothing was pre-filled
    assert thinking_mode_reward(
        [direct, chain, chain, direct], prompts=[no, no, with_mode(Q, "think"), Q]
    ) == [
        1.0,
        0.0,
        1.0,
        None,
    ]
    assert language_consistency_reward([direct], language=["en"], prompts=[no]) == [1.0]


def test_obeys_checks_the_whole_answer():
    assert obeys("think", "<think>a</think><answer>1</answer>")
    assert not obeys("think", EMPTY_THINK + "<answer>1</answer>")
    assert not obeys("think", "<think>a")  # never closed
    assert obeys("no_think", EMPTY_THINK + "<answer>1</answer>")
    assert not obeys("no_think", EMPTY_THINK + "<think>late</think><answer>1</answer>")
    assert not obeys("no_think", "<answer>1</answer>")


def test_mode_metrics_count_adherence_over_greedy_and_samples():
    def rec(greedy, samples, correct):
        return {
            "greedy": greedy,
            "greedy_correct": correct,
            "greedy_format": True,
            "samples": samples,
            "sample_correct": [correct] * len(samples),
            "sample_format": [True] * len(samples),
            "sample_tokens": [len(s) for s in samples],
            "sample_single_language": [True] * len(samples),
            "sample_self_check": [False] * len(samples),
            "maj_correct": correct,
        }

    d = EMPTY_THINK + "<answer>1</answer>"
    t = "<think>x</think><answer>1</answer>"
    m = mode_metrics([rec(d, [d, t, d], True), rec(d, [d, d, d], False)], "no_think")
    assert m["mode_adherence"] == pytest.approx((3 / 4 + 1) / 2)
    assert m["accuracy"] == 0.5 and set(m) >= {"pass@1", "mean_length", "se"}
