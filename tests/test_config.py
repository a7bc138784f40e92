"""Recipes: validation names the bad key, overrides and inheritance work, nothing runs on error."""

from __future__ import annotations

import subprocess
import sys
import time

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


@pytest.mark.parametrize(
    "override,named",
    [
        (
            "grpo.rewards.0.name=acuracy",
            "grpo.rewards.0.name: unknown reward 'acuracy' (did you mean 'accuracy'?)",
        ),
        ("grpo.rewards.1.kwargs={think_prefiled: true}", "did you mean 'think_prefilled'?"),
        ("grpo.trl_args={num_generatons: 4}", "grpo.trl_args: trl.GRPOConfig has no field 'num_generatons'"),
        ("base.pretrain.trl_args={warmup_stepz: 4}", "did you mean 'warmup_steps'?"),
        (
            "base.model.hiden_size=64",
            "base.model.hiden_size: unknown key (did you mean 'base.model.hidden_size'?)",
        ),
        ("base.model.num_attention_heads=3", "not divisible by num_attention_heads 3"),
        ("base.pretrain.max_steps=0", "max_steps must be positive"),
        ("base.pretrain.max_steps=-5", "max_steps must be positive"),
        ("grpo.split=trian", "grpo.split reads split 'trian'"),
        ("eval.split=validation", "eval.split reads split 'validation'"),
        ("name=../../victim.txt", "must start with a letter or digit"),
        ("name=/etc/passwd", "must start with a letter or digit"),
        ("name=a/b", "names the report folder"),
        (
            "eval.temperature=0.6",
            "eval.temperature: unknown key (did you mean 'eval.generation.temperature'?)",
        ),
        ("eval.generation.temperature=0", "the k samples are sampled"),
    ],
)
def test_recipe_mistakes_fail_at_load_naming_the_key(override, named):
    with pytest.raises(ConfigError) as e:
        load("r1-zero", None, [override])
    assert named in str(e.value)


def test_problem_data_with_the_micro_world_base_is_refused(tmp_path):
    (tmp_path / "r.yaml").write_text(
        "inherit: " + str(ROOT / "configs/r1_zero.yaml") + "\ndata: {kind: problems, path: x}\n"
    )
    with pytest.raises(ConfigError, match="base.kind micro pretrains on the micro-world"):
        load("r1-zero", tmp_path / "r.yaml")


def test_an_empty_or_non_utf8_recipe_is_an_error(tmp_path):
    (tmp_path / "empty.yaml").write_text("# nothing here\n")
    with pytest.raises(ConfigError, match="empty"):
        load("r1-zero", tmp_path / "empty.yaml")
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load("r1-zero", tmp_path / "latin1.yaml")


def test_every_shipped_recipe_loads():
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        if "accelerate" in path.parts:
            continue
        flow = read_yaml(path).get("flow", "r1-zero")
        load(flow, path)


@pytest.mark.parametrize(
    "override,named",
    [
        ("grpo.rewards.0.name=acuracy", "unknown reward 'acuracy'"),
        ("grpo.rewards.1.kwargs={think_prefiled: true}", "think_prefiled"),
    ],
)
def test_a_reward_typo_fails_in_seconds_writing_nothing(tmp_path, override, named):
    store = tmp_path / "store"
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "r1-zero", f"store={store}", override],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and named in proc.stderr, proc.stderr
    assert time.monotonic() - t < 30 and not store.exists()


def test_a_deployment_refuses_reward_modules_outside_its_allow_list(monkeypatch):
    from r1.rewards import allowed_reward_modules

    override = ["grpo.rewards.0.name=tests.helpers:brevity_reward"]
    monkeypatch.delenv("R1_ALLOW_REWARD_MODULES", raising=False)
    with pytest.raises(ConfigError, match="does not allow"):
        load("r1-zero", None, override, allow_reward_modules=allowed_reward_modules())
    monkeypatch.setenv("R1_ALLOW_REWARD_MODULES", "tests")
    assert load("r1-zero", None, override, allow_reward_modules=allowed_reward_modules())
    monkeypatch.setenv("R1_ALLOW_REWARD_MODULES", "*")
    assert allowed_reward_modules() is None
    assert load("r1-zero", None, override)  # the CLI: a user's own recipe may import anything
