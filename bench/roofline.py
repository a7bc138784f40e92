"""Each stage of an R1-Zero run against what this machine's cores can do.

    python bench/roofline.py [--store runs] [--report r1-zero] [--threads 2]

Reads a finished run from the store (the report ``reports/<name>`` and everything it descends
from: no training here) and prints, per stage, its wall time, the model FLOPs its work takes, the
achieved GFLOP/s and their share of this machine's fp32 matmul rate, measured here in the same
run (a 1024 x 1024 x 1024 matmul on ``--threads`` threads). FLOPs are counted from the model's
shapes and the tokens processed: 2 N per token for a forward pass (generation, scoring), 6 N for
training, N the weights a token passes through (embeddings excluded, the LM head included), plus
attention (4 x layers x width x context per token). Generation stages also print tokens/s.

Token counts come from the artifacts: pretraining's packed rows, GRPO's per-step log (tokens and
completion lengths: a rollout, a reference pass when beta > 0, and a policy pass with its
backward), evaluations' recorded samples.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from r1.store import Store  # noqa: E402


def matmul_rate(
    threads: int, seconds: float = 2.0, shape: tuple[int, int, int] = (1024, 1024, 1024)
) -> float:
    """This machine's fp32 GFLOP/s on an (m x k) @ (k x n) matmul (default: what the cores can do)."""
    import torch

    torch.set_num_threads(threads)
    m, k, n_ = shape
    a, b = torch.randn(m, k), torch.randn(k, n_)
    for _ in range(3):
        a @ b
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        a @ b
        n += 1
    return 2 * m * k * n_ * n / (time.perf_counter() - t) / 1e9


def model_shape(checkpoint: Path) -> dict:
    """What FLOPs per token depend on, from a checkpoint's config.json."""
    cfg = json.loads((checkpoint / "config.json").read_text())
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or d // heads
    per_layer = d * heads * head_dim * 2 + d * kv * head_dim * 2 + 3 * d * cfg["intermediate_size"]
    return {
        "weights": layers * per_layer + d * cfg["vocab_size"],
        "layers": layers,
        "width": heads * head_dim,
    }


def forward_flops(shape: dict, tokens: float, context: float) -> float:
    """2 N per token through the weights, plus attention over ``context`` earlier tokens."""
    return tokens * (2 * shape["weights"] + 4 * shape["layers"] * shape["width"] * context)


def lineage_by_stage(store: Store, key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for _, _, k in store.lineage(key):
        k = k.removesuffix(" (cycle)")
        if store.exists(k):
            m = store.manifest(k)
            if all(m["key"] != x["key"] for x in out.get(m["stage"], [])):
                out.setdefault(m["stage"], []).append(m)
    return out


def read_log(store: Store, key: str) -> list[dict]:
    path = store.path(key) / "train_log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def pretraining(store: Store, m: dict, shape: dict) -> tuple[float, float, float | None]:
    cfg = m["config"]
    tokens = m["metrics"]["steps"] * cfg["pretrain"]["batch_size"] * cfg["block_size"]
    return 3 * forward_flops(shape, tokens, cfg["block_size"] / 2), tokens, None


def grpo(store: Store, m: dict, shape: dict) -> tuple[float, float, float | None]:
    rows = [r for r in read_log(store, m["key"]) if "completions/mean_length" in r]
    cfg = m["config"]
    group = cfg["prompts_per_step"] * cfg["num_generations"]
    passes = 2 + (2 if cfg.get("beta", 0) > 0 else 0) + 6  # rollout + reference + policy (fwd + bwd)
    flops = tokens = generated = 0.0
    previous = 0.0
    for r in rows:
        step_tokens = r["num_tokens"] - previous if "num_tokens" in r else None
        previous = r.get("num_tokens", previous)
        completion = r["completions/mean_length"] * group
        total = step_tokens if step_tokens and step_tokens > 0 else completion * 1.4
        flops += passes / 2 * forward_flops(shape, total, total / group / 2)
        tokens += total
        generated += completion
    return flops, tokens, generated


def evaluation(store: Store, m: dict, shape: dict) -> tuple[float, float, float | None]:
    from datasets import load_from_disk

    gens = load_from_disk(str(store.path(m["key"]) / "generations"))
    generated = sum(sum(t) for t in gens["sample_tokens"])
    generated *= 1 + 1 / len(gens[0]["sample_tokens"])  # the greedy pass, about one sample's length
    return forward_flops(shape, generated * 1.4, 40), generated * 1.4, generated


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default=str(Path(__file__).resolve().parent.parent / "runs"))
    ap.add_argument("--report", default="r1-zero", help="the run's name under reports/")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    store = Store(args.store)
    link = Path(args.store, "reports", args.report)
    if not link.exists():
        raise SystemExit(f"no report {link}: run the flow first")
    stages = lineage_by_stage(store, link.resolve().name)
    peak = matmul_rate(args.threads)
    print(f"fp32 matmul rate on {args.threads} threads: {peak:.0f} GFLOP/s (1024^3, measured now)")
    base = next((m for m in stages.get("base", []) if m["config"].get("kind") == "micro"), None)
    if base is not None:  # what the model's own matmuls reach: the bound for this model size
        cfg = json.loads((store.path(base["key"]) / "config.json").read_text())
        d, inner = cfg["hidden_size"], cfg["intermediate_size"]
        for rows, what in ((4096, "training / scoring"), (64, "one decode step, 64 rows")):
            rate = matmul_rate(args.threads, 1.0, (rows, d, inner))
            print(
                f"  the model's MLP matmul ({rows} x {d} x {inner}, {what}): {rate:.0f} GFLOP/s = {rate / peak:.0%}"
            )
    print(
        f"{'stage':<22}{'wall s':>8}{'tokens':>11}{'GFLOP':>9}{'GFLOP/s':>9}{'of peak':>9}{'gen tok/s':>11}"
    )
    kinds = (("base", pretraining), ("grpo", grpo), ("evaluate", evaluation))
    for stage, count in kinds:
        for m in stages.get(stage, []):
            if stage == "base" and m["config"].get("kind") != "micro":
                continue
            model_dir = store.path(m["key"] if stage != "evaluate" else m["inputs"]["model"])
            flops, tokens, generated = count(store, m, model_shape(model_dir))
            wall = m["metrics"]["wall_seconds"]
            rate = flops / wall / 1e9
            gen = f"{generated / wall:>11,.0f}" if generated else f"{'':>11}"
            name = f"{stage} {m['key'][-6:]}"
            print(
                f"{name:<22}{wall:>8.1f}{tokens:>11,.0f}{flops / 1e9:>9.0f}{rate:>9.1f}{rate / peak:>9.1%}{gen}"
            )


if __name__ == "__main__":
    main()
