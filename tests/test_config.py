"""Recipes: validation names the bad key, overrides and inheritance work, nothing runs on error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flows.recipes import load
from r1.config import ConfigError, apply_override, hashable, read_yaml
from tests.conftest import ROOT, TINY_R1_ZERO


def test_default_recipe_loads_with_r1_settings_explicit():
    r = load("r1-zero")
    assert r.grpo.loss_type == "dr_grpo" and r.grpo.scale_rewards == "none"
    assert [s.name for s in r.grpo.rewards] == ["accuracy", "format"]


def test_override_sets_nested_value_with_yaml_types():
    r = load("r1-zero", None, ["grpo.learning_rate=1e-4", "grpo.rewards.1.weight=0.5", "eval.limit=10"])
    assert r.grpo.learning_rate == pytest.approx(1e-4)
    assert r.grpo.rewards[1].weight == 0.5
    assert r.eval.limit == 10


def test_unknown_key_is_named_with_suggestion():
    with pytest.raises(ConfigError) as e:
        load("r1-zero", None, ["grpo.learnin_rate=1e-4"])
    assert "learnin_rate" in str(e.value) and "grpo.learning_rate" in str(e.value)


def test_wrong_type_is_named():
    with pytest.raises(ConfigError, match=r"grpo\.max_steps"):
        load("r1-zero", None, ["grpo.max_steps=many"])


def test_unknown_section_and_bad_enum():
    with pytest.raises(ConfigError, match="grop"):
        load("r1-zero", None, ["grop.max_steps=3"])
    with pytest.raises(ConfigError, match="loss_type"):
        load("r1-zero", None, ["grpo.loss_type=ppo"])


def test_missing_recipe_file():
    with pytest.raises(ConfigError, match="not found"):
        load("r1-zero", "configs/nope.yaml")


def test_malformed_override():
    with pytest.raises(ConfigError, match="key=value"):
        apply_override({}, "grpo.learning_rate")
    with pytest.raises(ConfigError, match="out of range"):
        load("r1-zero", None, ["grpo.rewards.7.weight=1"])


def test_inherit_merges_sections(tmp_path):
    data = read_yaml(TINY_R1_ZERO)
    assert data["base"]["model"]["hidden_size"] == 32  # from the tiny file
    assert data["grpo"]["loss_type"] == "dr_grpo"  # inherited
    loop = tmp_path / "a.yaml"
    loop.write_text("inherit: a.yaml\n")
    with pytest.raises(ConfigError, match="inherits itself"):
        read_yaml(loop)


def test_unhashed_fields_do_not_change_the_key():
    a = load("r1-zero").grpo
    b = load("r1-zero", None, ["grpo.save_steps=7", "grpo.print_every=3"]).grpo
    c = load("r1-zero", None, ["grpo.learning_rate=1e-4"]).grpo
    assert hashable(a) == hashable(b)
    assert hashable(a) != hashable(c)


def test_cli_fails_fast_naming_the_key_and_writes_nothing(tmp_path):
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "r1-zero", f"store={store}", "grpo.learnin_rate=1e-4"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "learnin_rate" in proc.stderr
    assert not store.exists()
