"""TRL's GRPOTrainer with the two costs of a small-model CPU step taken out; every knob unchanged.

A micro-world GRPO step spent its time in two places that do no useful arithmetic:

* **rollouts**: ``model.generate`` at hidden size 128 is per-step overhead, and finished rows are
  computed to the longest completion. :class:`r1.decode.FastSampler` samples from the same
  distribution with a preallocated cache and a shrinking batch.
* **padding**: every log-prob pass (the reference model's, the policy's with its backward) runs
  on the batch padded to its longest prompt plus its longest completion, about twice the real
  tokens. :meth:`GRPOTrainer._get_per_token_logps_and_entropies` runs it on rows sorted by length
  in a few chunks, each trimmed to its own longest row. Causal attention with RoPE does not see the
  trim (positions shift by a constant per chunk), so log-probs and gradients are the plain path's
  to float tolerance (``tests/test_grpo_trainer.py``).

Everything else is TRL's: losses, clipping, KL, scaling, importance sampling, vLLM rollouts,
tools. Where a fast path does not apply (vLLM, continuous batching, multimodal inputs, sampling
options the sampler does not implement, an architecture it does not know) the parent's method
runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from trl import GRPOTrainer as _TRLGRPOTrainer

from r1.decode import FastSampler, supports

_DEFAULT_SAMPLING = {"min_p": None, "repetition_penalty": 1.0}
CHUNK_OVERHEAD_TOKENS = 512  # what one extra forward call costs, in padded tokens (measured: bench/)


def length_chunks(
    lengths: torch.Tensor, max_rows: int, overhead: int = CHUNK_OVERHEAD_TOKENS
) -> list[torch.Tensor]:
    """Row indices in chunks of similar length: the split that minimises padded tokens + call cost.

    ``lengths`` are the rows' real lengths; a chunk costs its row count times its longest row, plus
    ``overhead`` per call. Rows are sorted by length and cut into 1, 2, 4, ... equal chunks (no
    chunk above ``max_rows``); the cheapest count wins.
    """
    order = torch.argsort(lengths, stable=True)
    n = len(order)
    best, best_cost = None, None
    k = max(1, -(-n // max_rows))
    while k <= n:
        chunks = list(order.chunk(k))
        cost = sum(len(c) * int(lengths[c].max()) for c in chunks) + overhead * len(chunks)
        if best_cost is None or cost < best_cost:
            best, best_cost = chunks, cost
        if k * 2 > n:
            break
        k *= 2
    return best


class GRPOTrainer(_TRLGRPOTrainer):
    """``trl.GRPOTrainer`` with the fast rollout engine and length-chunked log-prob passes."""

    def _fast_rollouts(self, images, multimodal_fields) -> bool:
        if self.use_vllm or self.use_transformers_continuous_batching or images or multimodal_fields:
            return False
        if any(getattr(self, k, d) != d for k, d in _DEFAULT_SAMPLING.items()):
            return False
        extra = set(self.generation_kwargs) - {
            "max_new_tokens",
            "do_sample",
            "pad_token_id",
            "bos_token_id",
            "eos_token_id",
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "repetition_penalty",
            "cache_implementation",
        }
        return not extra and supports(self.accelerator.unwrap_model(self.model))

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        if not self._fast_rollouts(images, multimodal_fields):
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        from trl.extras.profiling import profiling_context
        from trl.models import unwrap_model_for_generation

        with (
            profiling_context(self, "fast.generate"),
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            completion_ids = FastSampler(unwrapped_model).generate(
                prompt_ids,
                max_new_tokens=self.max_completion_length,
                eos_token_ids=self.eos_token_ids,
                pad_token_id=self._tokenizer.pad_token_id,
                temperature=self.temperature,
                top_k=self.top_k or 0,
                top_p=self.top_p if self.top_p is not None else 1.0,
            )
        return completion_ids, None

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        if compute_aux_loss or any(v is not None for v in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        width = input_ids.size(1)
        prompt_width = width - logits_to_keep
        mask = attention_mask.bool()
        first = torch.where(
            mask.any(1), mask.float().argmax(1), torch.full_like(mask[:, 0], width, dtype=torch.long)
        )
        last = width - mask.flip(1).float().argmax(1)  # one past each row's last real token
        chunks = length_chunks(last - first, batch_size or input_ids.size(0))
        parts = []
        for rows in chunks:
            left = int(first[rows].min())
            right = max(int(last[rows].max()), prompt_width + 1)
            keep = right - prompt_width  # the completion columns this chunk still has
            parts.append(
                super()._get_per_token_logps_and_entropies(
                    model,
                    input_ids[rows, left:right],
                    attention_mask[rows, left:right],
                    keep,
                    None,
                    compute_entropy,
                )[:2]
            )
        # Pad every chunk back to the full completion width and restore the rows' order.
        inverse = torch.argsort(torch.cat(chunks))
        logps = torch.cat([F.pad(lp, (0, logits_to_keep - lp.size(1))) for lp, _ in parts])[inverse]
        entropies = None
        if compute_entropy:
            entropies = torch.cat([F.pad(e, (0, logits_to_keep - e.size(1))) for _, e in parts])[inverse]
        return logps, entropies, None
