"""The answer verifier on real math: whole answers, no hedging, bounded time.

Every case named in the trust issue is here: wrong LaTeX answers that a first-number parse scored
1.0, right ones it scored 0, several boxed answers, scientific notation, thousands groups, boxes
inside the chain of thought, hedged answers. ``test_math_verify_port.py`` holds Math-Verify's own
cases.
"""

from __future__ import annotations

import time

import pytest

from r1.answers import Deadline, answers_match, as_number, extract_answer
from r1.rewards import accuracy_reward


def score(completion: str, gold: str) -> float:
    return accuracy_reward([completion], answer=[gold])[0]


@pytest.mark.parametrize(
    "gold,completion",
    [
        (r"3\sqrt{13}", r"so \boxed{3}"),
        (r"2\pi", "<answer>2</answer>"),
        ("(3, 2)", "<answer>2</answer>"),
        (r"1 \pm \sqrt{19}", "<answer>1</answer>"),
        (r"6 \text{ and } 8", "<answer>8</answer>"),
        ("-2,1", "<answer>-2.1</answer>"),
        ("-2.1", "<answer>-2,1</answer>"),
        ("111", "<answer>0,111</answer>"),  # a leading zero starts no thousands group
        ("42", "<answer>41 or 42</answer>"),  # a hedge between candidates
        ("42", "<answer>41, 42</answer>"),
        ("42", r"<answer>41 \text{ or } 42</answer>"),
        ("42", r"\boxed{41} or \boxed{42}"),
        ("42", "<answer>42 或 41</answer>"),
    ],
)
def test_wrong_answers_score_zero(gold, completion):
    assert score(completion, gold) == 0.0


@pytest.mark.parametrize(
    "gold,completion",
    [
        (r"3\sqrt{13}", r"<answer>\sqrt{117}</answer>"),
        (r"14{,}916", "<answer>14916</answer>"),
        ("14916", r"<answer>14{,}916</answer>"),
        (r"1.5 \times 10^3", "<answer>1500</answer>"),
        ("1500", "<answer>1.5e3</answer>"),
        ("1500", "<answer>1.5E+3</answer>"),
        (r"1.5 \times 10^3", "<answer>1.5e3</answer>"),
        ("1000", "<answer>1,000</answer>"),
        ("0.111", "<answer>0,111</answer>"),
        ("[1, 2)", "<answer>[1,2)</answer>"),
        (r"(-\infty, 3]", r"<answer>(-\infty,3]</answer>"),
        (r"1 \pm \sqrt{19}", r"<answer>1+\sqrt{19}, 1-\sqrt{19}</answer>"),
        (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"<answer>\begin{pmatrix}1&2\\3&4\end{pmatrix}</answer>"),
        (r"\{(2,2),(6,2)\}", r"so \boxed{(2,2)} and \boxed{(6,2)}"),
        (r"6 \text{ and } 8", "<answer>6 and 8</answer>"),
        (r"\frac{1}{2}", "<answer>0.5</answer>"),
        ("-2,1", "<answer>1, -2</answer>"),
        ("x = 5", "<answer>5</answer>"),
        (r"(11,7)or(7,11)", r"<answer>(7,11) or (11,7)</answer>"),  # the reference itself is a disjunction
    ],
)
def test_equivalent_answers_score_one(gold, completion):
    assert score(completion, gold) == 1.0


def test_the_answer_comes_after_the_chain_of_thought():
    # Decided: a box written while thinking is scratch work; only text after </think> answers.
    assert extract_answer(r"<think>maybe \boxed{5}</think>") is None
    assert score(r"<think>maybe \boxed{5}</think>", "5") == 0.0
    assert score(r"<think>maybe \boxed{4}</think> so \boxed{5}", "5") == 1.0
    assert score(r"<think>\boxed{5}</think><answer>5</answer>", "5") == 1.0
    # A chain that never closes has no answer, whatever it contains.
    assert extract_answer("<think>work <answer>5</answer>") is None
    # Completions after a template that pre-fills <think> start inside it.
    assert extract_answer("work</think><answer>5</answer>") == "5"
    # No tags at all (a MATH-style solution): the last box.
    assert extract_answer(r"so \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert extract_answer("<answer>3</answer> no wait <answer>4</answer>") == "4"


def test_plain_numbers_never_leave_the_process():
    assert as_number("1,000") == 1000 and as_number("1 000") == 1000
    assert as_number("0,111") == as_number("0.111")  # a leading zero starts no thousands group
    assert as_number("-2,1") is None and as_number("12,5") is None  # comma-separated values, not numbers
    assert as_number("2,74") == as_number("2.74")  # a decimal comma before exactly two digits
    assert as_number("1.5e3") == 1500 and as_number(".4") == as_number("0.4")
    t = time.monotonic()
    assert all(answers_match(str(i), f"{i:,}") for i in range(0, 200_000, 97))
    assert time.monotonic() - t < 5


def test_extraction_is_linear_in_the_completion():
    """200k characters of repeated tags once took 53 s to extract."""

    def seconds(n: int) -> float:
        text = "<answer>" * n + r"\boxed{" * n
        t = time.perf_counter()
        for _ in range(3):
            extract_answer(text)
        return time.perf_counter() - t

    small, large = seconds(12_500), seconds(25_000)
    assert large < 3 * max(small, 1e-3)


HOSTILE = r"9^{9^{9^{9}}}"  # sympy tries to evaluate it


def test_a_hostile_answer_costs_its_limit_and_the_next_check_works():
    t = time.monotonic()
    assert accuracy_reward([f"<answer>{HOSTILE}</answer>"], answer=["2"], timeout_s=1.0) == [0.0]
    assert time.monotonic() - t < 40  # a cold start also imports sympy
    assert accuracy_reward([r"<answer>\frac{6}{3}</answer>"], answer=["2"]) == [1.0]


def test_restarts_get_no_new_allowance_and_a_batch_has_a_deadline():
    """Three hostile completions in one batch once took 75 s: each restart got the first start's
    extra 30 s. Now each check gets its limit and the batch its deadline, restarts included."""
    accuracy_reward([r"<answer>\frac{6}{3}</answer>"], answer=["2"])  # warm worker
    hostile = [f"<answer>{HOSTILE}</answer>"] * 3
    t = time.monotonic()
    out = accuracy_reward(hostile, answer=["2"] * 3, timeout_s=1.0, batch_timeout_s=None)
    assert out == [0.0] * 3 and time.monotonic() - t < 3 * 1.0 + 10
    t = time.monotonic()
    batch = [*hostile, r"<answer>\frac{6}{3}</answer>"]
    out = accuracy_reward(batch, answer=["2"] * 4, timeout_s=1.0, batch_timeout_s=1.5)
    assert time.monotonic() - t < 1.5 + 2  # the deadline, not 3 limits
    assert out[:3] == [0.0] * 3
    deadline = Deadline(0.0)
    assert not answers_match("2", r"\frac{6}{3}", deadline=deadline) and deadline.unchecked == 1
    assert answers_match("2", "2.0", deadline=Deadline(0.0))  # plain numbers need no worker
