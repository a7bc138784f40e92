"""Base-model stage: the starting checkpoint of every branch.

``kind: micro`` builds a word tokenizer and a small Llama model and pretrains it on the
micro-world corpus (loss on every token, like pretraining), so the base is partly competent: its
habit is the corpus's systematic error, while the correct skill is in its distribution.
``kind: pretrained`` imports a Hugging Face checkpoint (local path, or hub id when online) into
the store, so every later stage reads a content-addressed copy.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field

from data.worlds import world_for
from r1.config import Section
from r1.external import external
from r1.models import (
    ModelConfig,
    build_llama,
    build_word_tokenizer,
    import_pretrained,
    save_checkpoint,
)
from r1.stage import Stage, StageContext
from r1.supervised import SFT_PROGRESS, TrainConfig, sft_trainer
from r1.tools import TOOLS
from r1.training import resume_step, run_trainer


class PretrainConfig(TrainConfig):
    """Pretraining defaults (a class, not a default instance, so a partial section keeps them)."""

    max_steps: int = 800
    batch_size: int = Field(32, gt=0, description="packed rows of block_size tokens")
    learning_rate: float = Field(1e-3, gt=0)
    warmup_ratio: float = Field(0.03, ge=0, lt=1)


class MicroBase(Section):
    kind: Literal["micro"] = "micro"
    model: ModelConfig = Field(default_factory=ModelConfig)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    block_size: int = Field(128, gt=8, description="tokens per packed pretraining row")
    seed: int = 0


class PretrainedBase(Section):
    """Model import: an existing checkpoint becomes the base artifact (no training)."""

    kind: Literal["pretrained"] = "pretrained"
    path: str = Field(
        description="local Hugging Face folder, a hub id when online, or package:<pip package with weights>",
        **external(),
    )
    gguf_file: str | None = Field(None, description="a GGUF file inside `path`, dequantized to safetensors")
    eos_token: str | None = Field(
        None, description="end-of-turn token generation stops at, when the checkpoint names another"
    )
    dtype: str = "auto"


BaseConfig = Annotated[MicroBase | PretrainedBase, Field(discriminator="kind")]


def _corpus_text(dataset, tokenizer) -> list[str]:
    """Corpus rows rendered through the chat template, the way the model will be prompted.

    A tool trace (a ``messages`` conversation) is rendered with the world's tools offered, so the
    base sees the tool line, the calls and the results exactly as rollouts will show them.
    """
    tool_traces = dataset["messages"] if "messages" in dataset.column_names else [""] * len(dataset)
    out = []
    for p, c, m in zip(dataset["prompt"], dataset["completion"], tool_traces, strict=True):
        if m:
            out.append(
                tokenizer.apply_chat_template(json.loads(m), tools=list(TOOLS.values()), tokenize=False)
            )
        else:
            messages = [{"role": "user", "content": p}, {"role": "assistant", "content": c}]
            out.append(tokenizer.apply_chat_template(messages, tokenize=False))
    return out


def pack_blocks(texts: list[str], tokenizer, block_size: int, seed: int) -> list[list[int]]:
    """Shuffle, tokenize, concatenate and cut into full blocks, as LM pretraining does.

    No padding is computed at all, and plain causal attention runs over block boundaries between
    documents (each ends in EOS). Two cheaper-looking options lose here: length-grouped batches
    stall learning (batches of one length are too correlated), and TRL's own packing passes
    per-document position ids that take a ~10x slower attention path on CPU.
    """
    import random

    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    ids = tokenizer([texts[i] for i in order], add_special_tokens=False)["input_ids"]
    stream = [t for row in ids for t in row]
    return [stream[i : i + block_size] for i in range(0, len(stream) - block_size + 1, block_size)]


def build_base(ctx: StageContext) -> None:
    cfg = ctx.config
    if cfg.kind == "pretrained":
        model, tokenizer = import_pretrained(cfg.path, cfg.gguf_file, cfg.dtype, cfg.eos_token)
        save_checkpoint(model, tokenizer, ctx.out_dir)
        ctx.metrics.update(
            {"source": cfg.path, "gguf_file": cfg.gguf_file, "parameters": model.num_parameters()}
        )
        return
    from datasets import Dataset

    lexicon = world_for(ctx.inputs["data"]).lexicon(ctx.inputs["data"].manifest()["config"])
    corpus = ctx.inputs["data"].dataset()["corpus"]
    tokenizer = build_word_tokenizer(lexicon.words, lexicon.chars, tools=lexicon.tools)
    model = build_llama(cfg.model, tokenizer, cfg.seed)
    blocks = pack_blocks(_corpus_text(corpus, tokenizer), tokenizer, cfg.block_size, cfg.seed)
    text = Dataset.from_dict({"input_ids": blocks})
    trainer = sft_trainer(model, tokenizer, text, cfg.pretrain, ctx.work_dir, completion_only_loss=False)
    history = run_trainer(ctx, trainer, tokenizer, SFT_PROGRESS, max(cfg.pretrain.logging_steps, 100))
    losses = [h["loss"] for h in history if "loss" in h]
    ctx.metrics.update(
        {
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "vocab_size": len(tokenizer),
            "steps": trainer.state.global_step,
            "final_loss": losses[-1] if losses else None,
        }
    )


STAGE = Stage(
    name="base", version="2", fn=build_base, config=BaseConfig, inputs=("data",), resume_step=resume_step
)
