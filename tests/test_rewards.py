"""Rewards: TRL's calling convention, math-verify equivalence, bounded time, registry."""

from __future__ import annotations

import time

import pytest

from r1.rewards import (
    REGISTRY,
    RewardError,
    RewardSpec,
    accuracy_reward,
    build_rewards,
    format_reward,
    language_consistency_reward,
    register,
)


def test_accuracy_uses_last_answer_then_boxed_and_math_equivalence():
    completions = [
        "<think>x</think><answer>1,000</answer>",
        "<answer>\\frac12</answer>",
        "so \\boxed{\\frac{1}{2}} it is",
        "<answer>3</answer> no wait <answer>4</answer>",
        "<think>no answer at all</think>",
        "<answer>56 </answer>",
    ]
    gold = ["1000", "0.5", "0.5", "4", "1", "56"]
    assert accuracy_reward(completions, answer=gold) == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    assert accuracy_reward(["<answer>12</answer>"], answer=["13"]) == [0.0]


def test_accuracy_accepts_chat_message_completions():
    msgs = [[{"role": "assistant", "content": "<think>a</think><answer>7</answer>"}]]
    assert accuracy_reward(msgs, answer=["7"]) == [1.0]


def test_hostile_answer_is_bounded_in_time():
    hostile = "<answer>" + "\\sqrt{" * 20000 + "2" + "}" * 20000 + "</answer>"
    t = time.monotonic()
    out = accuracy_reward([hostile, "<answer>2</answer>"], answer=["2", "2"], timeout_s=1.0)
    assert time.monotonic() - t < 40  # first call also starts the worker
    assert out[1] == 1.0 and out[0] in (0.0, 1.0)
    # the worker was restarted if it had to be killed: later checks still work
    assert accuracy_reward(["<answer>\\frac{6}{3}</answer>"], answer=["2"]) == [1.0]


def test_format_reward_requires_think_then_answer():
    cases = {
        "<think>a</think><answer>1</answer>": 1.0,
        "  <think>a</think>\n<answer>1</answer>\n": 1.0,
        "<answer>1</answer><think>a</think>": 0.0,
        "<think>a</think>": 0.0,
        "<think>a</think><answer>1</answer> trailing": 0.0,
        "<think>a<think>b</think><answer>1</answer>": 0.0,
        "plain text": 0.0,
    }
    assert format_reward(list(cases)) == list(cases.values())


def test_format_reward_handles_prefilled_think():
    c = ["reasoning</think><answer>1</answer>"]
    assert format_reward(c) == [0.0]
    assert format_reward(c, prompts=["User: hi\nAssistant: <think>"]) == [1.0]
    assert format_reward(c, think_prefilled=True) == [1.0]


def test_language_consistency_counts_cot_words():
    en = "<think>23+48=71, then 71-15=56. so the answer is 56.</think><answer>56</answer>"
    mixed = "<think>23+48=71，然后 71-15=56. so the answer is 56.</think><answer>56</answer>"
    no_words = "<think>1+2=3</think><answer>3</answer>"
    out = language_consistency_reward([en, mixed, mixed, no_words], language=["en", "en", "zh", "zh"])
    assert out[0] == 1.0 and out[3] == 1.0
    assert out[1] == pytest.approx(4 / 6) and out[2] == pytest.approx(2 / 6)  # so/the/answer/is vs 然/后


def test_registry_binds_kwargs_names_and_weights():
    funcs, weights = build_rewards(
        [
            RewardSpec(name="accuracy", weight=1.0),
            RewardSpec(name="format", weight=0.1, kwargs={"think_prefilled": True}),
        ]
    )
    assert [f.__name__ for f in funcs] == ["accuracy", "format"] and weights == [1.0, 0.1]
    assert funcs[1](["x</think><answer>1</answer>"]) == [1.0]
    with pytest.raises(ValueError, match="unknown reward"):
        RewardSpec(name="nope")
    with pytest.raises(ValueError, match="twice"):
        build_rewards([RewardSpec(name="format"), RewardSpec(name="format")])


def test_a_reward_that_throws_is_named():
    @register("broken_for_test")
    def broken(completions, **kw):
        raise ZeroDivisionError("bad")

    try:
        (fn,), _ = build_rewards([RewardSpec(name="broken_for_test")])
        with pytest.raises(RewardError, match="broken_for_test"):
            fn(["x"])
    finally:
        REGISTRY.pop("broken_for_test")


def test_language_consistency_uses_lingua_for_latin_languages():
    cot = "<think>so the answer is five, mais la réponse est cinq</think><answer>5</answer>"
    fr, en = language_consistency_reward([cot, cot], language=["fr", "en"], latin_languages=["en", "fr"])
    assert 0.3 < fr < 0.7 and 0.3 < en < 0.7
    pure = "<think>la réponse est cinq parce que deux plus trois font cinq</think><answer>5</answer>"
    assert language_consistency_reward([pure], language=["fr"], latin_languages=["en", "fr"]) == [1.0]


def test_malformed_completions_and_rows_score_instead_of_crashing():
    parts = [
        {"role": "assistant", "content": [{"type": "text", "text": "<think>a</think><answer>7</answer>"}]}
    ]
    none_content = [{"role": "assistant", "content": None}]
    completions = [None, parts, none_content, 42]
    assert accuracy_reward(completions, answer=["7"] * 4) == [0.0, 1.0, 0.0, 0.0]
    assert format_reward(completions) == [0.0, 1.0, 0.0, 0.0]
    out = language_consistency_reward(
        ["<think>so the answer</think>", "<think>so</think>", "", None], language=[None, "xx", "en", "en"]
    )
    assert out == [None, 0.0, 0.0, 0.0]  # no language: not applicable; unknown code: 0; empty: 0


def test_an_empty_completion_gets_no_language_reward():
    assert language_consistency_reward(["", "   "], language=["en", "zh"]) == [0.0, 0.0]
    assert language_consistency_reward(["<think>1+2=3</think><answer>3</answer>"], language=["en"]) == [1.0]


def _growth(fn, make) -> float:
    """Time at 100k characters over time at 50k (best of 3 each): about 2 when linear."""
    import time

    def best(text: str) -> float:
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            fn(text)
            runs.append(time.perf_counter() - t)
        return min(runs)

    small, large = best(make(50_000)), best(make(100_000))
    return large / max(small, 1e-4)


def _closing_tags(n: int) -> str:
    """Every </think> followed by an <answer> that never closes: a backtracking regex retries each."""
    return ("<think>" + "</think><answer>" * (n // 16))[:n]


def _long_tail(n: int) -> str:
    return "<think>a</think><answer>1</answer>" + " " * n + "x"


def _mixed_languages(n: int) -> str:
    text = "so the answer is five, mais la réponse est cinq "
    return "<think>" + (text * (n // len(text) + 1))[:n] + "</think>"


def _french(text: str) -> list:
    return language_consistency_reward([text], language=["fr"], latin_languages=["en", "fr"])


def test_format_and_language_rewards_are_linear():
    """100k characters took 3 s (format) and 14-30 s (language, extra Latin languages)."""
    assert _growth(lambda t: format_reward([t]), _closing_tags) < 3
    assert _growth(lambda t: format_reward([t]), _long_tail) < 3
    _french(_mixed_languages(1000))  # load lingua's models first
    assert _growth(_french, _mixed_languages) < 3


def test_non_finite_scores_stop_the_step_or_count_as_zero():
    @register("nan_for_test")
    def nan(completions, **kw):
        return [float("nan"), 1.0, float("inf")][: len(completions)]

    try:
        (fn,), _ = build_rewards([RewardSpec(name="nan_for_test")])
        with pytest.raises(RewardError, match="nan_for_test.*nan"):
            fn(["a", "b", "c"])
        (fn,), _ = build_rewards([RewardSpec(name="nan_for_test", on_nonfinite="zero")])
        assert fn(["a", "b", "c"]) == [0.0, 1.0, 0.0] and fn.stats["nonfinite"] == 2
        with pytest.raises(RewardError, match="returned 3 scores for 4"):
            fn(["a", "b", "c", "d"])
    finally:
        REGISTRY.pop("nan_for_test")


def test_reward_names_and_arguments_are_checked_when_the_spec_is_made():
    with pytest.raises(ValueError, match="did you mean 'accuracy'"):
        RewardSpec(name="acuracy")
    with pytest.raises(ValueError, match="did you mean 'think_prefilled'"):
        RewardSpec(name="format", kwargs={"think_prefiled": True})
    with pytest.raises(ValueError, match="unknown language codes"):
        RewardSpec(name="language_consistency", kwargs={"latin_languages": ["en", "xx"]})
    with pytest.raises(ValueError, match="cannot be imported"):
        RewardSpec(name="tests.helpers:nope")
    assert RewardSpec(name="tests.helpers:brevity_reward").name == "tests.helpers:brevity_reward"
