"""The micro-world: seeded, held-out split excluded, imperfections as configured."""

from __future__ import annotations

import random

from data.microworld import (
    CorpusConfig,
    WorldConfig,
    generate_problems,
    generate_test_problems,
    has_carry,
    render_trace,
)
from r1.answers import extract_answer
from r1.rewards import is_well_formatted


def test_clean_traces_are_correct_and_formatted():
    cfg = WorldConfig()
    rng = random.Random(0)
    for p in generate_problems(rng, cfg, 200, set()):
        t = render_trace(p, rng)
        assert is_well_formatted(t) and extract_answer(t) == str(p.answer)
        assert "wait" not in t and "等等" not in t


def test_same_seed_same_problems_and_traces():
    cfg = WorldConfig()
    a = [
        (p, render_trace(p, random.Random(1), cfg.corpus))
        for p in generate_problems(random.Random(5), cfg, 50, set())
    ]
    b = [
        (p, render_trace(p, random.Random(1), cfg.corpus))
        for p in generate_problems(random.Random(5), cfg, 50, set())
    ]
    assert a == b


def test_held_out_problems_are_excluded():
    cfg = WorldConfig(n_test=50)
    test = {p.expression for p in generate_test_problems(cfg)}
    assert len(test) == 50
    train = generate_problems(random.Random(0), cfg, 2000, test)
    assert not test & {p.expression for p in train}


def test_carry_bug_is_systematic_and_checks_follow_risky_steps():
    cfg = WorldConfig(
        operands=[2],
        corpus=CorpusConfig(carry_bug=1.0, step_noise=0.0, self_check=0.0, untagged=0.0, language_switch=0.0),
    )
    rng = random.Random(0)
    for p in generate_problems(rng, cfg, 300, set()):
        t = render_trace(p, rng, cfg.corpus)
        a, b = p.operands
        wrong = p.ops[0] == "+" and has_carry(a, b)
        assert (extract_answer(t) == str(p.answer)) != wrong
    fixing = CorpusConfig(carry_bug=1.0, step_noise=0.0, self_check=1.0, untagged=0.0, language_switch=0.0)
    for p in generate_problems(rng, cfg, 300, set()):
        t = render_trace(p, rng, fixing)
        assert extract_answer(t) == str(p.answer)  # every risky step was checked and fixed
        assert ("wait" in t or "等等" in t) == (p.ops[0] == "+" and has_carry(*p.operands))
