"""Scale-out without a GPU: every recipe loads and builds its TRL configs; vLLM settings map right.

What needs a GPU (vLLM generation, TRL's vLLM rollouts, bf16) is marked ``gpu`` and skipped here;
bench/gpu_check.py runs it on a CUDA machine.
"""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from flows.recipes import load
from r1.config import read_yaml
from r1.generation import SamplingConfig, VLLMSettings, make_backend, vllm_sampling_kwargs
from r1.launch import LaunchConfig
from r1.supervised import sft_args
from r1.training import peft_config
from stages import grpo, sft
from stages.reward_model import RewardModelConfig, reward_args
from tests.conftest import ROOT

RECIPE_FILES = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if p.parent.name != "accelerate")
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _trainer_sections(recipe):
    """(name, section) for every trainer section of a recipe."""
    for name in type(recipe).model_fields:
        value = getattr(recipe, name)
        if isinstance(value, sft.SFTStageConfig | grpo.GRPOStageConfig | RewardModelConfig):
            yield name, value


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_every_recipe_loads_and_builds_its_trainer_configs(path, tmp_path):
    recipe = load(read_yaml(path).get("flow", "r1-zero"), path)
    built = 0
    for name, section in _trainer_sections(recipe):
        if isinstance(section, grpo.GRPOStageConfig):
            args = grpo.grpo_args(section, tmp_path / name)
            assert args.num_generations == section.num_generations
            assert args.use_vllm == (section.rollouts != "transformers")
        elif isinstance(section, RewardModelConfig):
            reward_args(section, tmp_path / name)
        else:
            assert (
                sft_args(section, tmp_path / name, section.completion_only_loss).max_steps
                == section.max_steps
            )
        lora = getattr(section, "lora", None)
        if lora is not None:
            assert peft_config(lora).r == lora.r
        launch = getattr(section, "launch", LaunchConfig())
        if launch.config_file:
            assert (ROOT / launch.config_file).is_file(), f"{name}.launch.config_file missing"
        built += 1
    assert built >= 1


def test_accelerate_configs_parse_and_name_a_distributed_type():
    for p in (ROOT / "configs" / "accelerate").glob("*.yaml"):
        cfg = yaml.safe_load(p.read_text())
        assert cfg["distributed_type"] in {"MULTI_GPU", "DEEPSPEED", "MULTI_CPU"}, p
        if cfg["distributed_type"] == "DEEPSPEED" and cfg["deepspeed_config"]["zero_stage"] == 3:
            assert cfg["deepspeed_config"]["zero3_save_16bit_model"], f"{p}: ZeRO-3 would save no safetensors"


def test_vllm_sampling_matches_the_transformers_backend_knobs():
    kw = vllm_sampling_kwargs(SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=33), 4, 11, 2)
    assert kw == {
        "n": 4,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,
        "max_tokens": 33,
        "seed": 11,
        "stop_token_ids": [2],
        "skip_special_tokens": True,
    }
    greedy = vllm_sampling_kwargs(SamplingConfig(temperature=0, top_p=0.5), 1, 0, None)
    assert greedy["temperature"] == 0 and greedy["top_p"] == 1.0 and greedy["stop_token_ids"] is None


def test_grpo_rollouts_map_to_trl_vllm_modes(tmp_path):
    colocate = grpo.grpo_args(
        grpo.GRPOStageConfig(rollouts="vllm_colocate", vllm_tensor_parallel_size=2), tmp_path
    )
    assert colocate.use_vllm and colocate.vllm_mode == "colocate" and colocate.vllm_tensor_parallel_size == 2
    server = grpo.grpo_args(
        grpo.GRPOStageConfig(rollouts="vllm_server", vllm_server_base_url="http://h:8000"), tmp_path
    )
    assert server.vllm_mode == "server" and server.vllm_server_base_url == "http://h:8000"
    assert not grpo.grpo_args(grpo.GRPOStageConfig(), tmp_path).use_vllm


def test_new_options_at_their_defaults_keep_artifact_keys(tmp_path):
    from r1.config import hashable

    plain = hashable(grpo.GRPOStageConfig())
    assert "lora" not in plain and "rollouts" not in plain and "launch" not in plain
    assert "lora" in hashable(grpo.GRPOStageConfig(lora={"r": 8}))


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed: the real backend is tested by the gpu tests")
def test_vllm_backend_without_vllm_says_how_to_get_it(tiny_world):
    _, _, base_model = tiny_world
    with pytest.raises(RuntimeError, match=r"pip install -e '.\[gpu\]'"):
        make_backend("vllm", base_model.path, vllm=VLLMSettings())
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_backend("tgi", base_model.path)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_VLLM, reason="needs vLLM and a CUDA GPU (pip install -e '.[gpu]')")
def test_vllm_greedy_matches_transformers_greedy(tiny_world):
    _, task_data, base_model = tiny_world
    prompts = list(task_data.dataset()["test"]["prompt"][:8])
    greedy = SamplingConfig(temperature=0, max_new_tokens=16)
    hf = make_backend("transformers", base_model.path).generate(prompts, 1, greedy, 0)
    vl = make_backend("vllm", base_model.path, vllm=VLLMSettings(gpu_memory_utilization=0.3)).generate(
        prompts, 1, greedy, 0
    )
    same = sum(a[0].text == b[0].text for a, b in zip(hf, vl, strict=True))
    assert same >= 6, [(a[0].text, b[0].text) for a, b in zip(hf, vl, strict=True)]
