"""Offline generation backends: one interface, transformers now, vLLM on GPUs.

Evaluation, rejection sampling and distillation all need "n completions for each of these
prompts"; they call :func:`make_backend` and never touch ``generate`` directly, so moving to vLLM
is a config change (``backend: vllm``), not a code fork.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from r1 import progress
from r1.config import Section, new_option, unhashed
from r1.cores import adapt
from r1.modes import THINK_CLOSE, prefilled_think

Prompt = str | list[dict[str, Any]]


class SamplingConfig(BaseModel):
    """How to sample: temperature 0 means greedy decoding."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(64, gt=0)


@dataclass(frozen=True)
class Generated:
    """One completion: its text (special tokens removed), token count, and whether it ended (EOS).

    A completion that called tools also has ``messages``: the assistant turns (with their
    ``tool_calls``) and tool turns, what TRL hands the rewards; ``text`` is then the assistant
    text alone and ``num_tokens`` the model's own tokens.
    """

    text: str
    num_tokens: int
    finished: bool
    messages: list[dict] | None = None


class GenerationBackend(Protocol):
    """``generate(prompts, n, sampling, seed)`` returns ``n`` completions per prompt, in order.

    ``generate_ids`` does the same from token ids to token ids (what a two-phase decode such as
    the thinking budget continues from, exactly); ``keys`` name the prompts for seeding.
    """

    tokenizer: Any

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]: ...

    def generate_ids(
        self,
        prompt_ids: Sequence[list[int]],
        n: int,
        sampling: SamplingConfig,
        seed: int,
        keys: Sequence[str] | None = None,
    ) -> list[list[list[int]]]: ...


def render_prompt(tokenizer, prompt: Prompt) -> str:
    """A chat-message prompt through the tokenizer's chat template; a string prompt as is."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)


def batch_seed(seed: int, first_prompt: str, index: int) -> int:
    """A seed per batch derived from content, so a batch samples the same whatever ran before it."""
    digest = hashlib.sha256(f"{seed}|{index}|{first_prompt}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def decoded(tokenizer, groups: list[list[list[int]]]) -> list[list[Generated]]:
    """Completion ids as :class:`Generated` (text without special tokens; finished = ended in EOS)."""
    eos = tokenizer.eos_token_id
    return [
        [Generated(tokenizer.decode(ids, skip_special_tokens=True), len(ids), eos in ids) for ids in group]
        for group in groups
    ]


def seed_keys(prompt_ids: Sequence[list[int]], keys: Sequence[str] | None) -> Sequence[str]:
    """What seeds each row's sampling: the rendered prompt when the caller has it, else its last 32 ids."""
    return keys if keys is not None else [",".join(map(str, r[-32:])) for r in prompt_ids]


def generate_through_ids(
    backend, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
) -> list[list[Generated]]:
    """``generate`` for a backend that samples token ids: render, tokenize, ``generate_ids``, decode.

    The rendered prompt is each row's seed key, so a prompt's samples do not depend on its batch.
    """
    texts = [render_prompt(backend.tokenizer, p) for p in prompts]
    ids = backend.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    return decoded(backend.tokenizer, backend.generate_ids(ids, n, sampling, seed, keys=texts))


class TransformersBackend:
    """Batched ``model.generate`` with left padding and a KV cache (CPU default, any device works)."""

    def __init__(self, model, tokenizer, batch_size: int = 256) -> None:
        from r1.decode import FastSampler, supports

        self.model = model.eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.batch_size = batch_size  # sequences (prompts x n) per generate call
        # Llama-family models sample through the fast engine (same distribution, less overhead).
        self.sampler = FastSampler(self.model) if supports(self.model) else None

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]:
        return generate_through_ids(self, prompts, n, sampling, seed)

    def generate_ids(
        self,
        prompt_ids: Sequence[list[int]],
        n: int,
        sampling: SamplingConfig,
        seed: int,
        keys: Sequence[str] | None = None,
    ) -> list[list[list[int]]]:
        """``n`` completions (ids, up to and including EOS) per prompt, ``batch_size`` rows a call."""
        import torch

        keys = seed_keys(prompt_ids, keys)
        per_call = max(1, self.batch_size // n)
        out: list[list[list[int]]] = []
        meter = progress.Meter(len(prompt_ids), unit=f"generating x{n}", interval=20.0, every=len(prompt_ids))
        for start in range(0, len(prompt_ids), per_call):
            adapt()  # share the cores with whatever else runs
            chunk = list(prompt_ids[start : start + per_call])
            torch.manual_seed(batch_seed(seed, keys[start], start))
            rows = self._sample(chunk, n, sampling)
            out += [rows[i * n : (i + 1) * n] for i in range(len(chunk))]
            if len(prompt_ids) > per_call:  # one call needs no progress line
                meter.update(len(out))
        return out

    def _sample(self, chunk: list[list[int]], n: int, sampling: SamplingConfig) -> list[list[int]]:
        """One call: ``n`` rows per prompt of ``chunk``, in order, each cut after its EOS."""
        import torch

        eos = self.tokenizer.eos_token_id
        if self.sampler is not None:
            return self.sampler.generate(
                [row for row in chunk for _ in range(n)],
                max_new_tokens=sampling.max_new_tokens,
                eos_token_ids=[eos],
                pad_token_id=self.tokenizer.pad_token_id,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
            )
        enc = self.tokenizer.pad({"input_ids": chunk}, return_tensors="pt")
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        greedy = sampling.temperature == 0
        kwargs = {} if greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
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
        rows = seqs[:, enc["input_ids"].shape[1] :].tolist()
        return [ids[: ids.index(eos) + 1] if eos in ids else ids for ids in rows]


class VLLMSettings(Section):
    """vLLM engine settings a recipe may set (GPU only; ``pip install -e '.[gpu]'``)."""

    tensor_parallel_size: int = Field(1, gt=0)
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    dtype: str = "auto"
    max_model_len: int | None = Field(None, gt=0)
    enforce_eager: bool = False


def vllm_sampling_kwargs(sampling: SamplingConfig, n: int, seed: int, eos_token_id: int | None) -> dict:
    """``SamplingParams`` fields that sample as :class:`TransformersBackend` does.

    Same knobs (temperature 0 = greedy, top_p, no top-k, the same token budget), generation
    stops at the tokenizer's end-of-turn token, and the seed is per prompt so a prompt's samples
    do not depend on which other prompts share its batch (sampling shards stay reproducible).
    """
    return {
        "n": n,
        "temperature": sampling.temperature,
        "top_p": 1.0 if sampling.temperature == 0 else sampling.top_p,
        "top_k": -1,
        "max_tokens": sampling.max_new_tokens,
        "seed": seed,
        "stop_token_ids": [eos_token_id] if eos_token_id is not None else None,
        "skip_special_tokens": True,
    }


class VLLMBackend:
    """vLLM offline generation (``LLM.generate``) for GPU recipes; not installable on CPU machines."""

    def __init__(self, model_path: str | Path, tokenizer, settings: VLLMSettings | None = None) -> None:
        try:
            from vllm import LLM
        except ImportError as e:
            raise RuntimeError(
                "backend 'vllm' needs vLLM on a CUDA machine: pip install -e '.[gpu]' "
                "(or use backend: transformers)"
            ) from e
        self.tokenizer = tokenizer
        s = settings or VLLMSettings()
        self.llm = LLM(model=str(model_path), tokenizer=str(model_path), **s.model_dump())

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]:
        from vllm import SamplingParams

        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        eos = self.tokenizer.eos_token_id
        params = [
            SamplingParams(**vllm_sampling_kwargs(sampling, n, batch_seed(seed, t, 0), eos)) for t in texts
        ]
        results = self.llm.generate(texts, params, use_tqdm=False)
        return [
            [Generated(o.text, len(o.token_ids), o.finish_reason == "stop") for o in r.outputs]
            for r in results
        ]

    def generate_ids(
        self,
        prompt_ids: Sequence[list[int]],
        n: int,
        sampling: SamplingConfig,
        seed: int,
        keys: Sequence[str] | None = None,
    ) -> list[list[list[int]]]:
        """Completions as token ids from token-id prompts (vLLM's ``TokensPrompt``)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        keys = seed_keys(prompt_ids, keys)
        eos = self.tokenizer.eos_token_id
        params = [
            SamplingParams(**vllm_sampling_kwargs(sampling, n, batch_seed(seed, k, 0), eos)) for k in keys
        ]
        prompts = [TokensPrompt(prompt_token_ids=list(r)) for r in prompt_ids]
        results = self.llm.generate(prompts, params, use_tqdm=False)
        return [[list(o.token_ids) for o in r.outputs] for r in results]


class ThinkingBudget:
    """Qwen3's thinking budget over any backend: stop the chain after ``budget`` tokens and answer.

    Phase one samples at most ``budget`` tokens. A completion that ended is done; one whose think
    block is still open gets ``</think>`` appended, and every unfinished one continues from its
    own tokens (prompt + what it wrote + the tag) for the rest of the allowance, so the model
    always gets to answer. Token ids throughout: the continuation sees exactly what was sampled.
    ``num_tokens`` counts both phases and the closing tag.
    """

    def __init__(self, inner: GenerationBackend, budget: int) -> None:
        self.inner = inner
        self.budget = budget
        self.tokenizer = inner.tokenizer
        self.close_ids = self.tokenizer(THINK_CLOSE, add_special_tokens=False)["input_ids"]

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]:
        return generate_through_ids(self, prompts, n, sampling, seed)

    def generate_ids(
        self,
        prompt_ids: Sequence[list[int]],
        n: int,
        sampling: SamplingConfig,
        seed: int,
        keys: Sequence[str] | None = None,
    ) -> list[list[list[int]]]:
        if sampling.max_new_tokens <= self.budget:
            return self.inner.generate_ids(prompt_ids, n, sampling, seed, keys)
        chain = sampling.model_copy(update={"max_new_tokens": self.budget})
        first = self.inner.generate_ids(prompt_ids, n, chain, seed, keys)
        eos = self.tokenizer.eos_token_id
        todo = []  # (prompt, sample, completion so far): every one that has not ended
        for i, group in enumerate(first):
            prefill = prefilled_think(self.tokenizer.decode(prompt_ids[i][-8:]))
            for j, c in enumerate(group):
                if eos not in c:
                    closed = THINK_CLOSE in prefill + self.tokenizer.decode(c)
                    todo.append((i, j, c if closed else c + self.close_ids))
        rest = self.inner.generate_ids(
            [list(prompt_ids[i]) + c for i, _, c in todo],
            1,
            sampling.model_copy(update={"max_new_tokens": sampling.max_new_tokens - self.budget}),
            seed + 1,
        )
        out = [[list(c) for c in group] for group in first]
        for (i, j, c), (more,) in zip(todo, rest, strict=True):
            out[i][j] = c + more
        return out


def tool_suffix_ids(tokenizer, tool_messages: list[dict]) -> list[int]:
    """The tokens a tool turn adds after an assistant turn that called it, generation prompt included.

    Rendered the way TRL's rollouts render it (``GRPOTrainer._get_tool_suffix_ids``): a dummy call,
    then the same conversation with the tool messages; the difference, cut after the call's EOS.
    """
    call = {"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    prefix = tokenizer.apply_chat_template(dummy, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(
        dummy + tool_messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    prefix = prefix[: eos[-1] + 1] if eos else prefix
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template does not preserve prefixes: a tool turn cannot be appended")
    return full[len(prefix) :]


def call_tool(by_name: dict[str, Callable], call: dict) -> dict:
    """Run one parsed call; a failure comes back to the model as ``{"error": ...}``, as in TRL."""
    function = call.get("function") or {}
    name = function.get("name", "unknown")
    try:
        if call.get("type", "function") != "function" or name not in by_name:
            raise ValueError(f"Tool {name} not found.")
        result = by_name[name](**(function.get("arguments") or {}))
    except Exception as e:  # noqa: BLE001 - the model sees the error, as TRL's rollouts show it
        result = {"error": str(e)}
    return {"role": "tool", "name": name, "content": str(result)}


@dataclass
class _Episode:
    prompt_ids: list[int]
    completion_ids: list[int]
    model_tokens: int
    messages: list[dict]

    def pending(self) -> list[dict]:
        last = self.messages[-1] if self.messages else {}
        return last.get("tool_calls") or [] if last.get("role") == "assistant" else []


class ToolLoop:
    """Generation with tools, offline: TRL's multi-turn rollout for evaluation and sampling.

    Prompts are rendered with the tools offered. A turn that ends in a well-formed call (the
    tokenizer's response parser finds ``tool_calls``) gets each tool's result as a tool turn and
    continues from its own tokens, for at most ``max_calls`` rounds and ``max_new_tokens`` in all,
    tool tokens included (TRL's ``max_completion_length``); a tool turn that would not fit ends
    the episode at its call, as TRL drops it.
    """

    def __init__(self, inner: GenerationBackend, tools: Sequence[Callable], max_calls: int) -> None:
        self.inner = inner
        self.tools = list(tools)
        self.by_name = {t.__name__: t for t in self.tools}
        self.max_calls = max_calls
        self.tokenizer = inner.tokenizer
        if getattr(self.tokenizer, "response_template", None) is None:
            raise ValueError(
                "tool calls need a tokenizer that parses them (a response_template): the micro-world's "
                "base has one when data.tools.enabled; a real checkpoint needs TRL's add_response_schema"
            )

    def _parse(self, ids: list[int], prefix: list[int]) -> dict:
        from trl.chat_template_utils import parse_response

        return parse_response(self.tokenizer, ids, prefix=prefix, tools=self.tools)

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, seed: int
    ) -> list[list[Generated]]:
        tok = self.tokenizer
        texts = [
            p
            if isinstance(p, str)
            else tok.apply_chat_template(
                list(p), tools=self.tools, add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        ids = tok(texts, add_special_tokens=False)["input_ids"] if texts else []
        first = self.inner.generate_ids(ids, n, sampling, seed, keys=texts)
        episodes = [
            [_Episode(ids[i], list(c), len(c), [self._parse(c, ids[i])]) for c in group]
            for i, group in enumerate(first)
        ]
        flat = [e for group in episodes for e in group]
        for round_ in range(self.max_calls):
            calling = []
            for e in (e for e in flat if e.pending()):
                results = [call_tool(self.by_name, c) for c in e.pending()]
                suffix = tool_suffix_ids(tok, results)
                if len(e.completion_ids) + len(suffix) >= sampling.max_new_tokens:
                    continue  # no room for the result and an answer: the episode ends at its call
                e.messages += results
                e.completion_ids += suffix
                calling.append(e)
            if not calling:
                break
            budget = [sampling.max_new_tokens - len(e.completion_ids) for e in calling]
            more = self.inner.generate_ids(
                [e.prompt_ids + e.completion_ids for e in calling],
                1,
                sampling.model_copy(update={"max_new_tokens": max(budget)}),
                seed + 1 + round_,
            )
            for e, room, (turn,) in zip(calling, budget, more, strict=True):
                turn = turn[:room]
                e.messages.append(self._parse(turn, e.prompt_ids + e.completion_ids))
                e.completion_ids += turn
                e.model_tokens += len(turn)
        eos = tok.eos_token_id
        return [
            [
                Generated(
                    "".join(str(m.get("content") or "") for m in e.messages if m.get("role") == "assistant"),
                    e.model_tokens,
                    bool(e.completion_ids) and e.completion_ids[-1] == eos and not e.pending(),
                    e.messages,
                )
                for e in group
            ]
            for group in episodes
        ]

    def generate_ids(self, prompt_ids, n, sampling, seed, keys=None):
        raise NotImplementedError("tool episodes are messages, not one token stream: use generate")


class GenerationSettings(Section):
    """How a stage generates: sampling knobs, the backend and its batch (one section everywhere).

    Evaluation and sampling both read this section (``eval.generation``, ``*.samples.generation``).
    Temperature 0 is greedy decoding.
    """

    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(96, gt=0)
    backend: Literal["transformers", "vllm"] = "transformers"
    vllm: VLLMSettings = Field(default_factory=VLLMSettings, **unhashed())
    batch_size: int = Field(512, gt=0, description="sequences per generate call")
    thinking_budget: int | None = Field(
        None,
        gt=0,
        description="close the think block after this many tokens and let the model answer (Qwen3)",
        **new_option(),
    )
    tools: list[str] = Field(
        default_factory=list,
        description="tools offered (r1.tools), called in a multi-turn loop",
        **new_option(),
    )
    max_tool_calls: int = Field(3, gt=0, description="tool rounds per completion", **new_option())

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, names: list[str]) -> list[str]:
        from r1.tools import tools_named

        tools_named(names)  # an unknown name fails at load time, with the known ones
        return names

    def sampling(self, **change: Any) -> SamplingConfig:
        """The per-call sampling parameters (``change`` overrides some, e.g. ``temperature=0``)."""
        return SamplingConfig(
            **{
                "temperature": self.temperature,
                "top_p": self.top_p,
                "max_new_tokens": self.max_new_tokens,
                **change,
            }
        )

    def backend_for(self, model_path: str | Path) -> GenerationBackend:
        backend = make_backend(self.backend, model_path, batch_size=self.batch_size, vllm=self.vllm)
        if self.thinking_budget:
            backend = ThinkingBudget(backend, self.thinking_budget)
        if self.tools:
            from r1.tools import tools_named

            backend = ToolLoop(backend, tools_named(self.tools), self.max_tool_calls)
        return backend


def make_backend(
    kind: Literal["transformers", "vllm"],
    model_path: str | Path,
    batch_size: int = 256,
    vllm: VLLMSettings | None = None,
) -> GenerationBackend:
    """The configured backend over the checkpoint at ``model_path``."""
    from r1.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(model_path)
    if kind == "vllm":
        return VLLMBackend(model_path, tokenizer, vllm)
    if kind != "transformers":
        raise ValueError(f"unknown generation backend {kind!r}: transformers or vllm")
    import torch

    model = load_model(model_path)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return TransformersBackend(model, tokenizer, batch_size=batch_size)
