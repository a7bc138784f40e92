"""Generation throughput of the transformers backend against the model's forward-pass bound.

    python bench/generation_throughput.py [--model DIR] [--prompts 256] [--n 4]

Generates n samples for each prompt of the held-out split with the backend the pipeline uses
(the fast engine, ``r1/decode.py``, for Llama-family models) and counts generated tokens per
second, then the same batches through ``model.generate`` (the ratio is what the engine buys). The bound is measured in
the same run: one batched forward pass (teacher forcing, no cache) over exactly the generated
sequences, i.e. the same tokens. The ratio forward-bound / generation says how far autoregressive
decoding is from the cost of simply scoring those tokens. Default model: the teacher of the
default distillation recipe (the final R1 model), built first if missing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flows  # noqa: E402,F401


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="checkpoint folder (default: the default recipe's final R1 model)")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=512)
    args = ap.parse_args()

    import torch
    from datasets import load_from_disk

    from flows.common import Stages, apply_runtime, store_for
    from flows.r1_full import r1_pipeline
    from flows.recipes import load
    from r1.generation import SamplingConfig, TransformersBackend, render_prompt
    from r1.models import load_model, load_tokenizer

    recipe = load("r1-full")
    apply_runtime(recipe.runtime)
    from r1.runner import run_stage
    from stages import data

    store = store_for(recipe.store)
    task_data = run_stage(store, data.STAGE, recipe.data, {}, "data")
    model_dir = args.model or r1_pipeline(Stages(store, recipe))["final_grpo"].path
    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    prompts = list(load_from_disk(task_data.path)["test"]["prompt"][: args.prompts])
    backend = TransformersBackend(model, tok, batch_size=args.batch_size)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens)
    backend.generate(prompts[:8], args.n, sampling, seed=1)  # warm-up
    t = time.monotonic()
    groups = backend.generate(prompts, args.n, sampling, seed=0)
    t_gen = time.monotonic() - t
    generated = sum(g.num_tokens for group in groups for g in group)
    engine, backend.sampler = backend.sampler, None  # the same batches through model.generate
    t = time.monotonic()
    plain = backend.generate(prompts, args.n, sampling, seed=0)
    t_plain = time.monotonic() - t
    backend.sampler = engine
    generated_plain = sum(g.num_tokens for group in plain for g in group)

    # The same tokens in one teacher-forced pass per generate-sized batch (prompt + completion).
    texts = [render_prompt(tok, p) + g.text for p, group in zip(prompts, groups, strict=True) for g in group]
    tok.padding_side = "right"
    t = time.monotonic()
    with torch.inference_mode():
        for i in range(0, len(texts), args.batch_size):
            enc = tok(
                texts[i : i + args.batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            )
            model(**enc)
    t_fwd = time.monotonic() - t
    print(
        f"model: {model_dir} ({sum(p.numel() for p in model.parameters()):,} parameters, {torch.get_num_threads()} threads)"
    )
    print(
        f"generation: {len(texts)} sequences, {generated} new tokens in {t_gen:.2f} s = {generated / t_gen:,.0f} tokens/s"
        f" ({'fast engine' if engine is not None else 'model.generate'})"
    )
    print(
        f"model.generate: {generated_plain} new tokens in {t_plain:.2f} s = {generated_plain / t_plain:,.0f} tokens/s;"
        f" ratio engine / generate tokens/s = {(generated / t_gen) / (generated_plain / t_plain):.2f}"
    )
    print(
        f"forward bound: same sequences, one pass per batch in {t_fwd:.2f} s = {generated / t_fwd:,.0f} tokens/s"
    )
    print(f"ratio generation / forward-bound throughput = {t_fwd / t_gen:.3f}")


if __name__ == "__main__":
    main()
