"""The fast rollout engine: every step's logits are the model's own, and it samples as generate does."""

from __future__ import annotations

import pytest
import torch

from r1.decode import FastSampler, supports
from r1.models import load_model, load_tokenizer


@pytest.fixture(scope="module")
def tiny(tiny_world):
    _, task_data, base_model = tiny_world
    model, tok = load_model(base_model.path), load_tokenizer(base_model.path)
    prompts = task_data.dataset()["train"]["prompt"][:6]
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    return model, tok, ids


def test_every_step_scores_as_a_full_forward_pass(tiny):
    """Prefill, the buffered cache, RoPE positions under left padding, rows leaving the batch."""
    model, tok, ids = tiny
    assert supports(model)
    torch.manual_seed(0)
    prompts = [ids[i % len(ids)][: 8 + i] for i in range(12)]  # different prompt lengths: padding
    completions, logits = FastSampler(model).generate(
        prompts, 24, [tok.eos_token_id], tok.pad_token_id, return_logits=True
    )
    assert len({len(c) for c in completions}) > 1  # rows finished at different steps
    for p, c, lg in zip(prompts, completions, logits, strict=True):
        assert 0 < len(c) <= 24 and (c[-1] == tok.eos_token_id or len(c) == 24)
        assert tok.eos_token_id not in c[:-1]
        with torch.no_grad():
            full = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : len(p) + len(c) - 1]
        torch.testing.assert_close(torch.stack(lg), full, atol=2e-4, rtol=1e-4)


def test_greedy_decoding_matches_generate_token_for_token(tiny):
    model, tok, ids = tiny
    fast = FastSampler(model).generate(ids, 20, [tok.eos_token_id], tok.pad_token_id, temperature=0)
    for p, c in zip(ids, fast, strict=True):
        with torch.no_grad():
            out = model.generate(
                input_ids=torch.tensor([p]), do_sample=False, max_new_tokens=20, eos_token_id=tok.eos_token_id
            )
        assert out[0, len(p) :].tolist() == c


def test_samples_follow_the_models_distribution(tiny):
    """The first token of 4,000 samples against softmax(logits / T), for T = 1 and top-p."""
    model, tok, ids = tiny
    prompt = ids[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    torch.manual_seed(1)
    for temperature, top_p in ((1.0, 1.0), (0.7, 0.9)):
        first = FastSampler(model).generate(
            [prompt] * 4000, 1, [tok.eos_token_id], tok.pad_token_id, temperature=temperature, top_p=top_p
        )
        counts = torch.bincount(torch.tensor([c[0] for c in first]), minlength=logits.numel()).float()
        probs = (logits / temperature).softmax(-1)
        if top_p < 1:
            order = probs.argsort(descending=True)
            keep = probs[order].cumsum(0) - probs[order] < top_p
            mask = torch.zeros_like(probs, dtype=torch.bool)
            mask[order[keep]] = True
            probs = torch.where(mask, probs, 0) / probs[mask].sum()
            assert counts[~mask].sum() == 0  # nothing outside the nucleus
        assert (counts / 4000 - probs).abs().max() < 0.03
