"""A small, fast sampler for Llama-family causal LMs: the rollout engine of CPU recipes.

``model.generate`` spends most of a micro-world GRPO step: at a hidden size of 128 its cost is not
arithmetic but per-step overhead (about 40 kernel calls per layer, a cache that grows by
concatenation, masks rebuilt each step) and rows that finished long ago still computed to the
longest completion. This sampler does the same sampling with less of both:

* the prompt is prefilled by the model itself (so the cache holds exactly what Hugging Face's
  attention computed), then copied into one preallocated key/value buffer per layer;
* each decode step is a handful of fused calls per layer: one matmul for q, k and v, one for the
  gate and up projections, attention against the buffer with the prompt's padding masked;
* finished rows leave the batch (the buffers are compacted when a quarter of the rows are done).

It draws from exactly the distribution ``generate`` draws from (temperature, top-k, top-p, then
softmax and a multinomial draw), with a different stream of random numbers.
``tests/test_decode.py`` checks every step's logits against a full forward pass of the same
tokens. Models it does not know (other architectures, RoPE variants that depend on the length,
sliding windows, logit soft-capping) are refused by :func:`supports`; callers then use
``generate``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

_ARCHITECTURES = ("llama", "qwen2", "mistral")


def supports(model) -> bool:
    """Whether :class:`FastSampler` reproduces this model's forward pass."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in _ARCHITECTURES:
        return False
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if (rope.get("rope_type") or rope.get("type") or "default") not in ("default", "linear", "llama3"):
        return False
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return False
    return not getattr(cfg, "final_logit_softcapping", None) and hasattr(model, "model")


def _sample(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, generator) -> torch.Tensor:
    """One token per row, as ``generate`` samples: temperature, top-k, top-p, softmax, multinomial."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative <= (1 - top_p)
        drop[:, -1] = False  # keep at least one token
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)


class FastSampler:
    """Samples completions from ``model`` (weights read at each call, so a training model is fine)."""

    def __init__(self, model) -> None:
        if not supports(model):
            raise ValueError(f"FastSampler does not support {type(model).__name__}")
        self.model = model
        self.cfg = model.config
        self.n_heads = self.cfg.num_attention_heads
        self.n_kv = getattr(self.cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(self.cfg, "head_dim", None) or self.cfg.hidden_size // self.n_heads

    def _weights(self) -> list[tuple]:
        """Per layer: fused q/k/v weight and bias, o weight, fused gate/up weight, down weight, norms."""
        out = []
        for layer in self.model.model.layers:
            a, m = layer.self_attn, layer.mlp
            qkv_w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            biases = [p.bias for p in (a.q_proj, a.k_proj, a.v_proj)]
            qkv_b = torch.cat(biases) if all(b is not None for b in biases) else None
            gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight])
            out.append(
                (
                    qkv_w,
                    qkv_b,
                    a.o_proj.weight,
                    a.o_proj.bias,
                    gate_up,
                    m.down_proj.weight,
                    layer.input_layernorm,
                    layer.post_attention_layernorm,
                )
            )
        return out

    @torch.inference_mode()
    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        return_logits: bool = False,
    ):
        """Completion token ids per prompt, each ending at its first EOS (kept) or at the budget.

        ``return_logits`` also returns each row's per-step logits (for tests of the forward pass).
        """
        model = self.model
        device = model.device
        n = len(prompt_ids)
        width = max(len(p) for p in prompt_ids)
        ids = torch.full((n, width), pad_token_id, dtype=torch.long, device=device)
        mask = torch.zeros((n, width), dtype=torch.long, device=device)
        for i, p in enumerate(prompt_ids):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        position = (mask.cumsum(1) - 1).clamp(min=0)
        was_training = model.training
        model.eval()
        try:
            out = model(
                input_ids=ids, attention_mask=mask, position_ids=position, use_cache=True, logits_to_keep=1
            )
        finally:
            model.train(was_training)
        total = width + max_new_tokens
        keys, values = [], []
        for layer in _cache_layers(out.past_key_values):
            k, v = layer
            kb = k.new_zeros((n, self.n_kv, total, self.head_dim))
            vb = v.new_zeros((n, self.n_kv, total, self.head_dim))
            kb[:, :, :width], vb[:, :, :width] = k, v
            keys.append(kb)
            values.append(vb)
        # additive mask over the buffer: the prompt's left padding never attends
        bias = torch.zeros((n, 1, 1, total), dtype=keys[0].dtype, device=device)
        bias[:, 0, 0, :width] = torch.where(mask.bool(), 0.0, float("-inf"))
        weights = self._weights()
        eos = torch.tensor(list(eos_token_ids), device=device)
        rows = torch.arange(n, device=device)  # which prompt each live row is
        index = None  # which buffer row each live row is (None: the same, the buffers are compact)
        last_pos = position[:, -1]
        completions: list[list[int]] = [[] for _ in range(n)]
        step_logits: list[list[torch.Tensor]] = [[] for _ in range(n)]
        logits = out.logits[:, -1, :]
        for t in range(max_new_tokens):
            if return_logits:
                for r, lg in zip(rows.tolist(), logits.float(), strict=True):
                    step_logits[r].append(lg)
            token = _sample(logits, temperature, top_k, top_p, generator)
            for r, tok in zip(rows.tolist(), token.tolist(), strict=True):
                completions[r].append(tok)
            done = torch.isin(token, eos)
            if t == max_new_tokens - 1 or bool(done.all()):
                break
            if done.any():
                live = (~done).nonzero().squeeze(1)
                rows, token, last_pos, bias = rows[live], token[live], last_pos[live], bias[live]
                index = live if index is None else index[live]
                if len(live) <= 0.75 * keys[0].size(0):  # compact once a quarter of the rows are done
                    keys, values, index = [k[index] for k in keys], [v[index] for v in values], None
            last_pos = last_pos + 1
            logits = self._step(token, last_pos, width + t, keys, values, bias, weights, index)
        completions = [c[: _first_eos(c, eos_token_ids) + 1] for c in completions]
        return (completions, step_logits) if return_logits else completions

    def _step(self, token, position, slot, keys, values, bias, weights, index) -> torch.Tensor:
        """One decode step for the live rows: write their k/v at ``slot``, return next-token logits."""
        model = self.model
        h = model.model.embed_tokens(token)[:, None, :]  # [b, 1, d]
        cos, sin = model.model.rotary_emb(h, position[:, None])
        cos, sin = cos[:, None], sin[:, None]  # [b, 1, 1, hd]
        b, hd = h.size(0), self.head_dim
        group = self.n_heads // self.n_kv
        for (qkv_w, qkv_b, o_w, o_b, gu_w, down_w, norm_in, norm_post), kb, vb in zip(
            weights, keys, values, strict=True
        ):
            x = norm_in(h)
            qkv = F.linear(x, qkv_w, qkv_b)
            q, k, v = qkv.split([self.n_heads * hd, self.n_kv * hd, self.n_kv * hd], dim=-1)
            q = _rope(q.view(b, 1, self.n_heads, hd).transpose(1, 2), cos, sin)
            k = _rope(k.view(b, 1, self.n_kv, hd).transpose(1, 2), cos, sin)
            v = v.view(b, 1, self.n_kv, hd).transpose(1, 2)
            if index is None:
                kb[:, :, slot : slot + 1], vb[:, :, slot : slot + 1] = k, v
                kk, vv = kb[:, :, : slot + 1], vb[:, :, : slot + 1]
            else:
                kb[index, :, slot : slot + 1], vb[index, :, slot : slot + 1] = k, v
                kk, vv = kb[index, :, : slot + 1], vb[index, :, : slot + 1]
            scores = q.view(b, self.n_kv, group, hd) @ kk.transpose(-1, -2)  # [b, kv, group, T]
            scores = scores * (hd**-0.5) + bias[:, :, :, : slot + 1]
            attn = scores.softmax(-1) @ vv  # [b, kv, group, hd]
            h = h + F.linear(attn.reshape(b, 1, self.n_heads * hd), o_w, o_b)
            x = norm_post(h)
            gate, up = F.linear(x, gu_w).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, down_w)
        h = model.model.norm(h)
        return model.lm_head(h)[:, -1, :]


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _cache_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a transformers cache (``DynamicCache`` in 5.x)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return [(cache.key_cache[i], cache.value_cache[i]) for i in range(len(cache.key_cache))]


def _first_eos(ids: list[int], eos: Sequence[int]) -> int:
    for i, t in enumerate(ids):
        if t in eos:
            return i
    return len(ids) - 1
