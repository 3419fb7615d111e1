"""Memory a training run needs, estimated from its sizes before anything is allocated, so absurd sizes
(``--dim 1000000``, ``--layers 100000``, ``--seq-len 100000``) are a typed error saying what to lower
instead of a MemoryError, a swapping machine or an init that never ends.

The estimate: fp32 master weights, their gradients and AdamW's two moments, plus the device's fp16
copy (a LoRA run: weights + device copy only; its adapters are small); activations of one microbatch
kept for the backward pass (per layer and token: the residual stream, norms, q/k/v, attention output,
the MLP's three projections; the attention probabilities, heads x seq_len per token) and the logits
with their gradient, counted twice (CPU arrays and device surfaces).
"""

from __future__ import annotations

import dataclasses
import os

from .errors import ModelTooLarge
from .model import n_params

GiB = 1 << 30


def _n_params(cfg) -> tuple[int, int]:
    """(per layer, outside the layers) without building a table for every layer (per-layer lists such
    as Gemma's layer_types are cut to the layers counted)."""
    if cfg.n_layers <= 64:
        return 0, n_params(cfg)

    def cut(k: int):
        per = {f.name: getattr(cfg, f.name)[:k] for f in dataclasses.fields(cfg)
               if isinstance(getattr(cfg, f.name), (list, tuple)) and len(getattr(cfg, f.name)) == cfg.n_layers}
        return dataclasses.replace(cfg, n_layers=k, **per)
    one, two = n_params(cut(1)), n_params(cut(2))
    return two - one, one - (two - one)


def estimate(cfg, batch: int, seq_len: int, lora: bool = False) -> dict[str, int]:
    """Bytes by part: ``weights`` (with gradients, optimizer moments and the device copy), ``activations``,
    ``total``."""
    per_layer, rest = _n_params(cfg)
    n = per_layer * cfg.n_layers + rest
    weights = n * (4 + 2) if lora else n * (4 * 4 + 2)
    toks = batch * seq_len
    q = cfg.n_heads * cfg.head_dim
    kv = cfg.n_kv_heads * cfg.head_dim
    per_tok = 6 * cfg.d_model + q + 2 * kv + 3 * cfg.d_ff + cfg.n_heads * seq_len
    acts = 2 * 4 * (toks * per_tok * cfg.n_layers + 2 * toks * cfg.vocab_size)
    return {"weights": weights, "activations": acts, "total": weights + acts, "params": n}


def available_bytes() -> int | None:
    """Memory this process can still get: MemAvailable (Linux), else physical memory; None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(cfg, batch: int, seq_len: int, lora: bool = False, available: int | None = None) -> dict:
    """Raises :class:`ModelTooLarge` when :func:`estimate` exceeds the available memory, naming the
    larger part and the options that shrink it; returns the estimate."""
    est = estimate(cfg, batch, seq_len, lora)
    avail = available_bytes() if available is None else available
    if avail is None or est["total"] <= avail:
        return est
    if est["activations"] > est["weights"]:
        what = (f"activations of one microbatch ({est['activations'] / GiB:,.1f} GiB at batch {batch} x seq_len "
                f"{seq_len}, {cfg.n_layers} layers): lower --seq-len or --batch (use --accum for a larger "
                f"effective batch), or --layers")
    else:
        n = est["params"]
        count = f"{n / 1e9:,.1f}B" if n >= 1e9 else f"{n / 1e6:,.1f}M"
        what = (f"{count} parameters with gradients and AdamW state "
                f"({est['weights'] / GiB:,.1f} GiB): lower --dim, --layers, --hidden or --vocab")
    raise ModelTooLarge(f"this run needs about {est['total'] / GiB:,.1f} GiB but {avail / GiB:,.1f} GiB are "
                        f"available; the larger part is the {what}")
