"""The data stage on a user's problem files: bad rows fail naming file and row, unusable ones are
dropped and counted in stats.json, and nothing unusable is ever committed."""

from __future__ import annotations

import json

import pytest

from data.problems import MalformedRowError, ProblemsData
from r1.runner import run_stage
from stages import data


def _write(folder, split: str, rows: list[dict]) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"question": f"{prefix} {i}: what is {i}+1?", "answer": str(i + 1)} for i in range(n)]


@pytest.mark.parametrize(
    "train,test,message",
    [
        ([], _rows("q", 3), r"\[train\]: no usable problems in the train split \(read 0"),
        (_rows("p", 3), [], r"\[test\]: no usable problems in the test split"),
        (_rows("q", 3), _rows("q", 3), r"read 3, dropped \{'in_test': 3\}"),  # test overlaps all of train
        (
            [{"question": "a?", "answer": None}],
            _rows("q", 2),
            r"train\]: row 1: .*'answer' is missing or null",
        ),
        ([{"question": "a?"}], _rows("q", 2), r"train\]: row 1: .*'answer' is missing or null"),
        ([{"question": "", "answer": "1"}], _rows("q", 2), r"row 1: .*empty question"),
    ],
)
def test_bad_problem_files_fail_at_the_data_stage(store, tmp_path, train, test, message):
    src = tmp_path / "problems"
    _write(src, "train", train)
    _write(src, "test", test)
    with pytest.raises(MalformedRowError, match=message):
        run_stage(store, data.STAGE, ProblemsData(path=str(src)), {})
    assert not list(store.artifacts.glob("*")) and not list(store.tmp.glob("*"))


def test_duplicates_and_overlong_prompts_are_dropped_and_counted(store, tmp_path):
    src = tmp_path / "problems"
    train = [*_rows("p", 5), *_rows("p", 2), {"question": "x" * 100_000, "answer": "1"}, *_rows("q", 1)]
    _write(src, "train", train)
    _write(src, "test", [*_rows("q", 3), *_rows("q", 1)])
    ref = run_stage(store, data.STAGE, ProblemsData(path=str(src)), {})
    stats = json.loads(ref.file("stats.json").read_text())
    assert stats["train"] == {
        "read": 9,
        "kept": 5,
        "dropped": {"duplicate": 2, "overlong_prompt": 1, "in_test": 1},
    }
    assert stats["test"] == {"read": 4, "kept": 3, "dropped": {"duplicate": 1}}
    splits = ref.dataset()
    assert len(splits["train"]) == 5 and len(splits["test"]) == 3
    assert store.manifest(ref.key)["metrics"]["dropped"]["train.duplicate"] == 2


def test_a_data_file_that_is_not_utf8_is_named(store, tmp_path):
    src = tmp_path / "problems"
    src.mkdir()
    (src / "train.jsonl").write_bytes('{"question": "caf\xe9", "answer": "1"}\n'.encode("latin-1"))
    _write(src, "test", _rows("q", 2))
    with pytest.raises(MalformedRowError, match=r"train.jsonl: not UTF-8"):
        run_stage(store, data.STAGE, ProblemsData(path=str(src)), {})


def test_the_micro_world_counts_its_repeated_prompts(store, tiny_recipe):
    ref = run_stage(store, data.STAGE, tiny_recipe.data, {})
    stats = json.loads(ref.file("stats.json").read_text())
    assert stats["train"]["read"] == stats["train"]["kept"] == tiny_recipe.data.n_train
    assert stats["train"]["repeated_prompts"] >= 0 and stats["test"]["dropped"] == {}
