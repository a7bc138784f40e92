"""Standard benchmarks: GSM8K / MATH-500 / your file as evaluation sets; the unbiased pass@k estimator."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from datasets import load_from_disk

from r1.metrics import pass_at_k


def _brute_force(n: int, c: int, k: int) -> float:
    """pass@k by its definition: the share of k-subsets of the n samples holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_the_unbiased_estimator_is_its_definition():
    # the estimator of Chen et al. (2021), "Evaluating Large Language Models Trained on Code",
    # eq. 1, against enumeration of every k-subset
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_brute_force(n, c, k), abs=1e-12), (n, c, k)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    assert pass_at_k(200, 0, 100) == 0.0 and pass_at_k(200, 150, 100) == 1.0  # no overflow at large n
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_gsm8k_and_a_custom_file_become_benchmark_splits_keyed_by_content(gsm8k_dir, tmp_path):
    from r1.runner import run_stage
    from r1.store import Store
    from stages.benchmark import STAGE, BenchmarkConfig

    store = Store(tmp_path / "store")
    gsm = run_stage(store, STAGE, BenchmarkConfig(preset="gsm8k", path=str(gsm8k_dir), limit=20), {}, "b")
    test = gsm.dataset()["test"]
    assert len(test) == 20 and test[0]["answer"] == "18"  # Janet's ducks: "#### 18"
    assert test[0]["prompt"][-1]["content"].startswith("Janet")

    f = tmp_path / "mine.jsonl"
    f.write_text(json.dumps({"q": "What is 3 + 4?", "a": "7"}) + "\n")
    cfg = BenchmarkConfig(preset="custom", path=str(f), question_key="q", answer_key="a")
    first = run_stage(store, STAGE, cfg, {}, "mine")
    f.write_text(json.dumps({"q": "What is 3 + 5?", "a": "8"}) + "\n")  # an edit: a new artifact
    second = run_stage(store, STAGE, cfg, {}, "mine")
    assert first.key != second.key and second.dataset()["test"][0]["answer"] == "8"

    with pytest.raises(ValueError, match="custom benchmark needs"):
        BenchmarkConfig(preset="custom", path=str(f))
    assert BenchmarkConfig(preset="math500").question_key == "problem"


def test_a_model_is_scored_on_a_benchmark_with_pass_at_j_and_maj(
    tiny_world, tiny_recipe, gsm8k_dir, tmp_path
):
    from flows.r1_zero import benchmark_eval
    from r1.runner import run_stage
    from stages import benchmark, evaluate

    store, _, base_model = tiny_world
    bench = benchmark.BenchmarkConfig(path=str(gsm8k_dir), limit=6, k=4, max_new_tokens=16)
    problems = run_stage(store, benchmark.STAGE, bench, {}, "benchmark:gsm8k")
    cfg = benchmark_eval(tiny_recipe.eval.model_copy(update={"pass_at": [1, 2]}), bench)
    assert cfg.k == 4 and cfg.generation.max_new_tokens == 16 and cfg.split == "test"
    ev = run_stage(store, evaluate.STAGE, cfg, {"model": base_model, "data": problems}, "eval:base@gsm8k")
    m = ev.manifest()["metrics"]
    assert m["n_problems"] == 6 and m["k"] == 4
    assert {"pass@2", "maj@k"} <= set(m) and "pass@2" in m["se"]

    rows = load_from_disk(str(store.path(ev.key) / "generations")).to_list()
    assert {"prompt", "answer"} <= set(rows[0])
    per_problem = [pass_at_k(4, sum(r["sample_correct"]), 2) for r in rows]
    assert m["pass@2"] == pytest.approx(sum(per_problem) / len(per_problem))


def test_recipes_take_named_benchmarks_and_refuse_bad_names():
    from flows.recipes import load
    from r1.config import ConfigError
    from tests.conftest import TINY_R1_ZERO

    r = load("r1-zero", TINY_R1_ZERO, ["benchmarks={gsm8k: {limit: 5}, math500: {preset: math500, k: 8}}"])
    assert r.benchmarks["gsm8k"].answer_format == "gsm8k" and r.benchmarks["math500"].k == 8
    with pytest.raises(ConfigError, match="benchmark name"):
        load("r1-zero", TINY_R1_ZERO, ["benchmarks={'../x': {limit: 5}}"])
    with pytest.raises(ConfigError, match="pass@j needs"):
        load("r1-zero", TINY_R1_ZERO, ["eval.pass_at=[1, 9]"])
