"""Decode and prefill of a GPT-2 124M-shaped model (random weights: the shapes are what matter): orion's
programs vs PyTorch CPU fp32 with a KV cache, in the same run (``benchmarks/bench_decode.py`` prints the
RESULTS.md table from these functions).

Ours: 13 stage programs per (S, T) set, KV cache as program inputs written in place, classifier on the CPU
unless ``classifier="device"``; compile time is reported apart, never in the timings. PyTorch: the same
(fp16-representable) weights in fp32, a straightforward GPT-2 forward with a per-layer KV cache under
``torch.inference_mode()``; torch is imported only here, inside :func:`bench_torch`.
"""

from __future__ import annotations

import time

import numpy as np

from ..models import GPT2Config, Model
from ..models.testing import random_weights


def bench_orion(cfg, w16, prompt, n_tokens, device, classifier, repeats, quantize=None, **model_options):
    """Greedy decode with orion's engine: compile once (timed apart), then ``repeats`` rounds of one prefill
    and ``n_tokens - 1`` steps; medians and every sample. ``quantize``: compressed weights (``Model``'s);
    ``model_options``: more :class:`~orion.models.Model` options (e.g. ``layers="shared"``)."""
    m = Model(cfg, w16, device=device, classifier=classifier, stop_tokens=[], quantize=quantize, **model_options)
    eng = m.engine
    t = time.perf_counter()
    eng.prepare(len(prompt), len(prompt) + n_tokens)
    compile_s = time.perf_counter() - t
    prefill, steps = [], []
    tokens = None
    for _ in range(repeats):
        eng.reset(len(prompt) + n_tokens)
        t = time.perf_counter()
        logits = eng.prefill(prompt)
        prefill.append(time.perf_counter() - t)
        tok = int(np.argmax(logits))
        toks = [tok]
        for _ in range(n_tokens - 1):
            t = time.perf_counter()
            logits = eng.step(tok)
            steps.append(time.perf_counter() - t)
            tok = int(np.argmax(logits))
            toks.append(tok)
        tokens = toks
    m.release()
    return dict(compile_s=compile_s, prefill_s=float(np.median(prefill)), step_s=float(np.median(steps)),
                compiles=eng.compiles, tokens=tokens, prefill_samples=prefill, step_samples=steps)


_TORCH_DEFAULT_THREADS = None


def bench_torch(cfg, w32, prompt, n_tokens, repeats, threads=None):
    """The same decode in PyTorch fp32 with a KV cache (``threads``: None = torch's default); a warm-up
    round, then ``repeats`` timed rounds."""
    import torch
    import torch.nn.functional as F

    global _TORCH_DEFAULT_THREADS
    if _TORCH_DEFAULT_THREADS is None:
        _TORCH_DEFAULT_THREADS = torch.get_num_threads()
    torch.set_num_threads(threads or _TORCH_DEFAULT_THREADS)   # None: back to the default after a 1-thread row

    W = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in w32.items()}
    d, H = cfg.d_model, cfg.n_heads
    hd = d // H

    def forward(ids, cache, pos0):
        x = W["wte"][ids] + W["wpe"][pos0:pos0 + len(ids)]                      # [n, d]
        n = x.shape[0]
        for i in range(cfg.n_layers):
            p = f"h.{i}."
            h = F.layer_norm(x, (d,), W[p + "ln1.g"], W[p + "ln1.b"], cfg.norm_eps)
            qkv = F.linear(h, W[p + "wqkv"], W[p + "bqkv"])
            q, k, v = qkv.split(d, dim=1)
            kc, vc = cache[i]
            kc[pos0:pos0 + n] = k
            vc[pos0:pos0 + n] = v
            K, V = kc[:pos0 + n], vc[:pos0 + n]
            qh = q.view(n, H, hd).transpose(0, 1)
            kh = K.view(-1, H, hd).transpose(0, 1)
            vh = V.view(-1, H, hd).transpose(0, 1)
            if n == 1:
                a = F.scaled_dot_product_attention(qh, kh, vh)
            else:
                mask = torch.ones(n, pos0 + n, dtype=torch.bool).tril(pos0)
                a = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
            a = a.transpose(0, 1).reshape(n, d)
            x = x + F.linear(a, W[p + "wo"], W[p + "bo"])
            h = F.layer_norm(x, (d,), W[p + "ln2.g"], W[p + "ln2.b"], cfg.norm_eps)
            x = x + F.linear(F.gelu(F.linear(h, W[p + "wfc"], W[p + "bfc"]), approximate="tanh"),
                             W[p + "wproj"], W[p + "bproj"])
        x = F.layer_norm(x[-1:], (d,), W["ln_f.g"], W["ln_f.b"], cfg.norm_eps)
        return F.linear(x, W["wte"])[0]

    prefill, steps = [], []
    tokens = None
    with torch.inference_mode():
        for _ in range(repeats + 1):          # first round warms up
            cache = [(torch.zeros(cfg.n_ctx, d), torch.zeros(cfg.n_ctx, d)) for _ in range(cfg.n_layers)]
            ids = torch.tensor(prompt)
            t = time.perf_counter()
            logits = forward(ids, cache, 0)
            prefill.append(time.perf_counter() - t)
            tok = int(torch.argmax(logits))
            toks = [tok]
            pos = len(prompt)
            for _ in range(n_tokens - 1):
                t = time.perf_counter()
                logits = forward(torch.tensor([tok]), cache, pos)
                steps.append(time.perf_counter() - t)
                tok = int(torch.argmax(logits))
                toks.append(tok)
                pos += 1
            tokens = toks
    k = n_tokens - 1
    return dict(prefill_s=float(np.median(prefill[1:])), step_s=float(np.median(steps[k:])), tokens=tokens,
                threads=torch.get_num_threads(), version=torch.__version__, prefill_samples=prefill[1:],
                step_samples=steps[k:])


QUICK = dict(config=dict(n_layers=1, d_model=64, n_heads=2, d_ff=256, vocab_size=512, n_ctx=64), prompt=16,
             tokens=4, repeats=1)
FULL = dict(config=dict(n_layers=12), prompt=64, tokens=32, repeats=2)


def setup(config: dict, prompt_len: int):
    """Config, fp16 weights, the same values in fp32 for torch, and a random prompt."""
    cfg = GPT2Config(**config)
    w32 = random_weights(cfg, seed=0)
    w16 = {k: v.astype(np.float16) for k, v in w32.items()}
    w32h = {k: v.astype(np.float32) for k, v in w16.items()}
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab_size, prompt_len)]
    return cfg, w16, w32h, prompt


def run(quick: bool = False, use_torch: bool = True, device: str = "auto") -> dict:
    """The ``decode`` section of an ``orion bench`` result: tok/s of both sides, the speed-ups against the
    fastest PyTorch thread setting (1 thread and torch's default)."""
    from .. import sim
    from ..runtime import resolve_device
    from . import metric
    p = QUICK if quick else FULL
    old = sim.compile_budget()[1]
    sim.set_compile_budget(10**6)
    try:
        cfg, w16, w32h, prompt = setup(p["config"], p["prompt"])
        ours = bench_orion(cfg, w16, prompt, p["tokens"], device, "cpu", p["repeats"])
    finally:
        sim.set_compile_budget(old)
    n = len(prompt)
    metrics = {"orion_decode_tok_s": metric(1 / ours["step_s"], "tok/s", "higher", [1 / s for s in ours["step_samples"]]),
               "orion_prefill_tok_s": metric(n / ours["prefill_s"], "tok/s", "higher",
                                             [n / s for s in ours["prefill_samples"]])}
    notes = [f"orion on {resolve_device(device)}: {ours['compiles']} programs compiled in {ours['compile_s']:.1f} s "
             f"(not timed); medians"]
    if use_torch:
        best = None
        for threads in (1, None):
            t = bench_torch(cfg, w32h, prompt, p["tokens"], p["repeats"], threads)
            if best is None or t["step_s"] < best["step_s"]:
                best = t
        metrics["torch_decode_tok_s"] = metric(1 / best["step_s"], "tok/s", "higher",
                                               [1 / s for s in best["step_samples"]])
        metrics["torch_prefill_tok_s"] = metric(n / best["prefill_s"], "tok/s", "higher",
                                                [n / s for s in best["prefill_samples"]])
        for kind in ("decode", "prefill"):
            a, b = metrics[f"orion_{kind}_tok_s"], metrics[f"torch_{kind}_tok_s"]
            metrics[f"{kind}_speedup_vs_torch"] = metric(a["value"] / b["value"], "x", "higher",
                                                         spread=a["spread"] + b["spread"])
        same = sum(x == y for x, y in zip(ours["tokens"], best["tokens"]))
        notes.append(f"PyTorch {best['version']} CPU fp32, fastest of 1 and default threads ({best['threads']}); "
                     f"greedy tokens equal: {same}/{len(best['tokens'])}")
    return {"params": dict(p["config"], prompt=p["prompt"], tokens=p["tokens"], repeats=p["repeats"]),
            "notes": notes, "metrics": metrics}
