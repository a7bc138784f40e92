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
runs; ``fast=False`` turns both off (TRL's own computation).

It also adds what TRL lacks, each off unless configured:

* **dynamic sampling** (DAPO): groups whose rewards all agree carry no advantage; they are dropped
  and the batch refilled with fresh prompts, for at most ``max_rounds`` extra rollouts per step
  (then zero-advantage groups fill what is left). Refill prompts are drawn from the training set
  by a seed of (run seed, step, round, process), so a resumed run continues the same schedule.
  Logged per step: ``dynamic_sampling/dropped_fraction`` (of the first rollout's groups) and
  ``dynamic_sampling/rounds``.
* a **difficulty curriculum** (Kimi k1.5): :class:`CurriculumSampler` draws prompts by their
  measured pass rate, preferring a target that moves from easy to hard as training proceeds; the
  pass rates are re-measured from every rollout (the ``curriculum_reward``'s scores).
* ``generation/tokens`` in the log: the tokens generated in each step, refills included.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import Sampler
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


class PassRates:
    """Each training prompt's measured pass rate (exponential average over its rollouts)."""

    def __init__(self, n: int, decay: float = 0.5) -> None:
        self.rate = [math.nan] * n  # nan: never measured
        self.decay = decay

    def update(self, index: int, rate: float) -> None:
        old = self.rate[index]
        self.rate[index] = rate if math.isnan(old) else self.decay * old + (1 - self.decay) * rate

    def save(self, path: Path) -> None:
        path.write_text(json.dumps([None if math.isnan(r) else r for r in self.rate]), encoding="utf-8")

    def load(self, path: Path) -> None:
        self.rate = [math.nan if r is None else r for r in json.loads(path.read_text(encoding="utf-8"))]


class CurriculumSampler(Sampler):
    """``RepeatSampler``'s layout (each prompt ``group`` times in a row, each batch ``repeat`` times),
    with the batch's prompts drawn by difficulty instead of shuffled.

    Weight of a prompt: 1 while never measured (every prompt is tried), else ``floor`` plus a
    Gaussian bump around the target pass rate, which moves linearly from ``start`` (easy) to
    ``end`` (hard but solvable) over ``total`` batches. Always-solved and never-solved prompts
    keep the ``floor`` weight, so they are re-measured as the model changes.
    """

    def __init__(
        self,
        rates: PassRates,
        batch: int,
        group: int,
        repeat: int,
        total: int,
        seed: int,
        start: float,
        end: float,
        width: float,
        floor: float,
    ) -> None:
        self.rates, self.batch, self.group, self.repeat, self.total = (
            rates,
            batch,
            group,
            repeat,
            max(1, total),
        )
        self.seed, self.start, self.end, self.width, self.floor = seed, start, end, width, floor

    def weights(self, chunk: int) -> torch.Tensor:
        target = self.start + (self.end - self.start) * min(1.0, chunk / self.total)
        rate = torch.tensor(self.rates.rate)
        bump = torch.exp(-((rate - target) ** 2) / (2 * self.width**2))
        return torch.where(torch.isnan(rate), torch.ones_like(rate), self.floor + bump)

    def __iter__(self):
        chunk = 0
        while True:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + chunk)
            chosen = torch.multinomial(
                self.weights(chunk), self.batch, replacement=False, generator=generator
            )
            for _ in range(self.repeat):
                for index in chosen.tolist():
                    for _ in range(self.group):
                        yield index
            chunk += 1

    def __len__(self) -> int:
        return self.total * self.batch * self.group * self.repeat


class GRPOTrainer(_TRLGRPOTrainer):
    """``trl.GRPOTrainer`` with the fast rollout engine, length-chunked log-prob passes, dynamic
    sampling and a difficulty curriculum (see the module docstring)."""

    def __init__(
        self, *args, fast: bool = True, dynamic_rounds: int | None = None, curriculum=None, **kwargs
    ):
        self.fast = fast
        self.dynamic_rounds = dynamic_rounds  # None: off; else extra rollouts allowed per step
        self.curriculum = curriculum  # r1 Curriculum settings, or None
        self.generated_tokens = 0  # since the last log row (LogExtras reads and resets it)
        self.rollout_seconds = 0.0  # time in rollouts (tool calls included), likewise
        super().__init__(*args, **kwargs)
        if self.curriculum is not None:
            self.pass_rates = PassRates(len(self.train_dataset))

    # -- rollouts -------------------------------------------------------------------------------
    def _generate(self, prompts):
        start = time.monotonic()
        out = super()._generate(prompts)
        self.rollout_seconds += time.monotonic() - start
        tool_mask = out[2]  # the model's own tokens: tool results are not generated
        self.generated_tokens += sum(sum(m) for m in tool_mask) if tool_mask else sum(len(c) for c in out[1])
        return out

    def _fast_rollouts(self, images, multimodal_fields) -> bool:
        if not self.fast:
            return False
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

    # -- dynamic sampling (DAPO) ---------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.dynamic_rounds is None or not self.model.training:
            return out
        g = self.num_generations
        if len(inputs) % g:
            raise ValueError(
                f"dynamic sampling needs whole groups per process: {len(inputs)} rows, groups of {g}"
            )
        keep = [b for b in _split(out, g) if _informative(b)]
        spare = [b for b in _split(out, g) if not _informative(b)]
        wanted = len(inputs) // g
        mode = "train"
        self._metrics[mode]["dynamic_sampling/dropped_fraction"].append(len(spare) / wanted)
        rounds = 0
        while rounds < self.dynamic_rounds and self._any_process(len(keep) < wanted):
            rounds += 1
            more = super()._generate_and_score_completions(self._refill(len(inputs) // g, rounds))
            for b in _split(more, g):
                (keep if _informative(b) else spare).append(b)
        self._metrics[mode]["dynamic_sampling/rounds"].append(rounds)
        groups = (keep + spare)[:wanted]  # informative first; what is missing stays zero-advantage
        return _merge(groups, self)

    def _any_process(self, flag: bool) -> bool:
        """The same decision on every process (each must run as many rollouts as the others)."""
        if self.accelerator.num_processes == 1:
            return flag
        return bool(self.accelerator.gather(torch.tensor([int(flag)], device=self.accelerator.device)).max())

    def _refill(self, n_prompts: int, round_: int) -> list[dict]:
        """Fresh prompts for a refill, each repeated for its group, chosen by (seed, step, round, rank)."""
        rng = random.Random(
            f"{self.args.seed}-{self.state.global_step}-{round_}-{self.accelerator.process_index}"
        )
        rows = [self.train_dataset[rng.randrange(len(self.train_dataset))] for _ in range(n_prompts)]
        return [dict(row) for row in rows for _ in range(self.num_generations)]

    # -- curriculum (Kimi k1.5) -------------------------------------------------------------------
    def _get_train_sampler(self, dataset=None):
        if self.curriculum is None:
            return super()._get_train_sampler(dataset)
        c = self.curriculum
        batch = self.args.generation_batch_size // self.num_generations
        return CurriculumSampler(
            self.pass_rates,
            batch,
            self.num_generations,
            self.num_iterations * self.args.steps_per_generation,
            -(-self.args.max_steps // self.args.steps_per_generation),
            self.args.seed,
            c.start_target,
            c.end_target,
            c.width,
            c.floor,
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.curriculum is not None and self.model.training:
            column = self.reward_func_names.index(self.curriculum.reward)
            index = torch.tensor([x["prompt_index"] for x in inputs], device=rewards.device)
            index = self.accelerator.gather(index) if self.accelerator.num_processes > 1 else index
            scores: dict[int, list[float]] = {}
            for i, r in zip(index.tolist(), rewards[:, column].tolist(), strict=True):
                if not math.isnan(r):
                    scores.setdefault(i, []).append(r)
            for i, rs in scores.items():
                self.pass_rates.update(i, sum(rs) / len(rs))
        return rewards

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.curriculum is not None and self.is_world_process_zero():
            folder = Path(self.args.output_dir, f"checkpoint-{self.state.global_step}")
            self.pass_rates.save(folder / "pass_rates.json")

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        path = Path(resume_from_checkpoint, "pass_rates.json")
        if self.curriculum is not None and path.is_file():
            self.pass_rates.load(path)

    # -- log-prob passes ------------------------------------------------------------------------
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
        if not self.fast or compute_aux_loss or any(v is not None for v in multimodal.values()):
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


# -- held-out accuracy while training ---------------------------------------------------------------


def heldout_callback(trainer: GRPOTrainer, rows: list[dict], every: int, k: int, temperature: float):
    """A ``TrainerCallback`` measuring held-out pass@1 every ``every`` steps (and at step 0).

    ``rows`` are task-data rows (``prompt``, ``answer``). Each measurement samples ``k``
    completions per problem at ``temperature`` from the current policy and logs
    ``heldout/pass@1``, ``heldout/accuracy_greedy`` with the step's log row. Torch's random state is
    saved and restored around it, so measuring changes nothing the run learns.
    """
    from transformers import TrainerCallback

    from r1.generation import SamplingConfig, TransformersBackend
    from r1.metrics import standard_error
    from r1.rewards import accuracy_reward

    prompts = [r["prompt"] for r in rows]
    answers = [str(r["answer"]) for r in rows]

    def measure() -> dict[str, float]:
        from trl.models import unwrap_model_for_generation

        state = torch.random.get_rng_state()
        was_training = trainer.model.training
        try:
            # under ZeRO-3 every rank gathers the full weights for the measurement (a collective)
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
                backend = TransformersBackend(model, trainer.processing_class, batch_size=512)
                budget = trainer.max_completion_length
                greedy = backend.generate(prompts, 1, SamplingConfig(temperature=0, max_new_tokens=budget), 0)
                samples = backend.generate(
                    prompts, k, SamplingConfig(temperature=temperature, max_new_tokens=budget), 1
                )
        finally:
            torch.random.set_rng_state(state)
            trainer.model.train(was_training)
        g = accuracy_reward([x[0].text for x in greedy], answers)
        flat = accuracy_reward(
            [s.text for group in samples for s in group], [a for a in answers for _ in range(k)]
        )
        per_problem = [sum(flat[i * k : (i + 1) * k]) / k for i in range(len(rows))]
        return {
            "heldout/pass@1": sum(per_problem) / len(rows),
            "heldout/pass@1_se": standard_error(per_problem),
            "heldout/accuracy_greedy": sum(g) / len(rows),
        }

    class _Heldout(TrainerCallback):
        pending: dict = {}

        def on_train_begin(self, args, state, control, **kwargs):
            if state.global_step == 0:
                self.pending = {**measure(), "heldout/step": 0}

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                self.pending = {**measure(), "heldout/step": state.global_step}
                control.should_log = True  # so the measurement lands in this step's row

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.pending and state.log_history:
                state.log_history[-1].update(self.pending)
                self.pending = {}

    return _Heldout()


# -- generation batches as groups -----------------------------------------------------------------
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
_RIGHT_PADDED = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
)


def _split(batch: dict, group: int) -> list[dict]:
    """A scored generation batch as its groups (rows ``i*group .. (i+1)*group``)."""
    n = batch["advantages"].size(0)
    unknown = set(batch) - {*_LEFT_PADDED, *_RIGHT_PADDED, "advantages", "num_items_in_batch"}
    if unknown:
        raise ValueError(f"dynamic sampling does not handle {sorted(unknown)} (multimodal or tool batches)")
    out = []
    for start in range(0, n, group):
        rows = slice(start, start + group)
        out.append(
            {
                k: v[rows]
                for k, v in batch.items()
                if k != "num_items_in_batch" and torch.is_tensor(v) and v.dim() > 0
            }
        )
    return out


def _informative(group: dict) -> bool:
    """A group has a learning signal when not every advantage is zero (its rewards differ)."""
    return bool((group["advantages"] != 0).any())


def _merge(groups: list[dict], trainer) -> dict:
    """Groups from several rollouts as one batch: re-padded to a common width, loss normaliser recomputed."""
    out = {}
    for key in groups[0]:
        parts = [g[key] for g in groups]
        if parts[0].dim() == 1:
            out[key] = torch.cat(parts)
            continue
        width = max(p.size(1) for p in parts)
        left = key in _LEFT_PADDED
        pad = trainer._tokenizer.pad_token_id if key.endswith("_ids") else 0
        out[key] = torch.cat(
            [F.pad(p, (width - p.size(1), 0) if left else (0, width - p.size(1)), value=pad) for p in parts]
        )
    mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
    total = mask.sum()
    if trainer.accelerator.num_processes > 1:
        total = trainer.accelerator.gather(total).sum()
    out["num_items_in_batch"] = total
    return out
