"""Offline generation backends: one interface, transformers now, vLLM on GPUs.

Evaluation, rejection sampling and distillation all need "n completions for each of these
prompts"; they call :func:`make_backend` and never touch ``generate`` directly, so moving to vLLM
is a config change (``backend: vllm``), not a code fork.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

Prompt = str | list[dict[str, Any]]


class SamplingConfig(BaseModel):
    """How to sample: temperature 0 means greedy decoding."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(64, gt=0)


@dataclass(frozen=True)
class Generated:
    """One completion: its text (special tokens removed), token count, and whether it ended (EOS)."""

    text: str
    num_tokens: int
    finished: bool


class GenerationBackend(Protocol):
    """``generate(prompts, n, sampling, seed)`` returns ``n`` completions per prompt, in order."""

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]: ...


def render_prompt(tokenizer, prompt: Prompt) -> str:
    """A chat-message prompt through the tokenizer's chat template; a string prompt as is."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)


def batch_seed(seed: int, first_prompt: str, index: int) -> int:
    """A seed per batch derived from content, so a batch samples the same whatever ran before it."""
    digest = hashlib.sha256(f"{seed}|{index}|{first_prompt}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


class TransformersBackend:
    """Batched ``model.generate`` with left padding and a KV cache (CPU default, any device works)."""

    def __init__(self, model, tokenizer, batch_size: int = 256) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.batch_size = batch_size  # sequences (prompts x n) per generate call

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]:
        import torch

        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        per_call = max(1, self.batch_size // n)
        out: list[list[Generated]] = []
        eos = self.tokenizer.eos_token_id
        for start in range(0, len(texts), per_call):
            chunk = texts[start : start + per_call]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(self.model.device) for k, v in enc.items()}
            torch.manual_seed(batch_seed(seed, chunk[0], start))
            greedy = sampling.temperature == 0
            kwargs = (
                {} if greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
            )
            with torch.inference_mode():
                seqs = self.model.generate(
                    **enc,
                    do_sample=not greedy,
                    num_return_sequences=n,
                    max_new_tokens=sampling.max_new_tokens,
                    eos_token_id=eos,
                    pad_token_id=self.tokenizer.pad_token_id,
                    **kwargs,
                )
            new = seqs[:, enc["input_ids"].shape[1] :].tolist()
            for i in range(len(chunk)):
                group = []
                for ids in new[i * n : (i + 1) * n]:
                    finished = eos in ids
                    ids = ids[: ids.index(eos) + 1] if finished else ids
                    text = self.tokenizer.decode(ids, skip_special_tokens=True)
                    group.append(Generated(text, len(ids), finished))
                out.append(group)
        return out


class VLLMBackend:
    """vLLM offline generation for GPU recipes (not installable on CPU machines; not run here)."""

    def __init__(self, model_path: str | Path, tokenizer, **llm_kwargs: Any) -> None:
        from vllm import LLM

        self.tokenizer = tokenizer
        self.llm = LLM(model=str(model_path), **llm_kwargs)

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=seed,
        )
        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        results = self.llm.generate(texts, params)
        return [
            [Generated(o.text, len(o.token_ids), o.finish_reason == "stop") for o in r.outputs]
            for r in results
        ]


def make_backend(
    kind: Literal["transformers", "vllm"], model_path: str | Path, batch_size: int = 256, **kwargs: Any
) -> GenerationBackend:
    """The configured backend over the checkpoint at ``model_path``."""
    from r1.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(model_path)
    if kind == "vllm":
        return VLLMBackend(model_path, tokenizer, **kwargs)
    return TransformersBackend(load_model(model_path), tokenizer, batch_size=batch_size)
