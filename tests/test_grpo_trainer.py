"""The fast GRPO trainer computes what TRL's does: on one fixed batch, the same log-probs, entropies,
loss and gradients (float tolerance); only the rollout engine's random stream differs."""

from __future__ import annotations

import copy

import torch

from r1.grpo_trainer import length_chunks
from r1.models import load_model, load_tokenizer
from r1.rewards import RewardSpec
from stages import grpo


def test_length_chunks_cover_every_row_once_and_cut_padding():
    lengths = torch.tensor([90, 12, 15, 88, 14, 91, 13, 89])
    chunks = length_chunks(lengths, max_rows=8, overhead=10)
    assert sorted(torch.cat(chunks).tolist()) == list(range(8)) and len(chunks) == 2
    assert {tuple(sorted(c.tolist())) for c in chunks} == {(1, 2, 4, 6), (0, 3, 5, 7)}
    assert len(length_chunks(lengths, max_rows=8, overhead=10**6)) == 1  # calls too dear to split
    assert all(len(c) <= 2 for c in length_chunks(lengths, max_rows=2, overhead=0))


def _trainers(tiny_world, tiny_recipe, tmp_path):
    _, task_data, base_model = tiny_world
    brevity = RewardSpec(name="tests.helpers:brevity_reward")  # varies in every group: a learning signal
    cfg = tiny_recipe.grpo.model_copy(update={"max_steps": 1, "beta": 0.04, "rewards": [brevity]})
    tok = load_tokenizer(base_model.path)
    data = task_data.dataset()["train"]
    model = load_model(base_model.path)
    out = {}
    for engine in ("trl", "fast"):
        c = cfg.model_copy(update={"engine": engine})
        out[engine] = grpo.make_trainer(copy.deepcopy(model), tok, data, c, tmp_path / engine)
    return out


def test_a_fixed_batch_gives_the_same_loss_and_gradients(tiny_world, tiny_recipe, tmp_path):
    trainers = _trainers(tiny_world, tiny_recipe, tmp_path)
    plain, fast = trainers["trl"], trainers["fast"]
    torch.manual_seed(0)
    rows = [dict(r) for r in plain.train_dataset.select(range(plain.args.per_device_train_batch_size))]
    batch = plain._generate_and_score_completions(rows)  # one realistic, padded batch of rollouts
    # what the fast trainer scores on the same batch: the reference log-probs it would compute
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    width = batch["completion_ids"].size(1)
    keep = batch["completion_mask"].bool()
    for model, entropy in (
        (plain.ref_model, False),
        (plain.model, True),
    ):  # TRL scores entropy for the policy
        a = plain._get_per_token_logps_and_entropies(model, ids, mask, width, compute_entropy=entropy)
        b = fast._get_per_token_logps_and_entropies(model, ids, mask, width, compute_entropy=entropy)
        torch.testing.assert_close(b[0][keep], a[0][keep], atol=1e-5, rtol=1e-5)
        if entropy:
            torch.testing.assert_close(b[1][keep], a[1][keep], atol=1e-4, rtol=1e-4)
    losses, grads = [], []
    for trainer in (plain, fast):
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, copy.copy(batch))
        loss.backward()
        losses.append(loss.detach())
        grads.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters()]))
    torch.testing.assert_close(losses[1], losses[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)
    assert grads[0].abs().sum() > 0  # the batch has a learning signal


def test_the_fast_engine_rolls_out_through_the_sampler(tiny_world, tiny_recipe, tmp_path, monkeypatch):
    from r1 import decode

    calls = []
    real = decode.FastSampler.generate
    monkeypatch.setattr(
        decode.FastSampler, "generate", lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    )
    fast = _trainers(tiny_world, tiny_recipe, tmp_path)["fast"]
    rows = [dict(r) for r in fast.train_dataset.select(range(fast.args.per_device_train_batch_size))]
    batch = fast._generate_and_score_completions(rows)
    assert calls and batch["completion_ids"].size(0) == len(rows)
