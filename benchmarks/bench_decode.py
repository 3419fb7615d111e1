"""GPT-2 124M-shaped decode and prefill: orion programs on the simulator (or the ANE) vs PyTorch CPU
fp32 with a KV cache, side by side in one run (issue 5 target: decode >= 2x PyTorch).

Random weights (the shapes are what matter). Ours: 13 stage programs per (S, T) set, KV cache as
program inputs written in place, classifier on the CPU (fp16 weights, orion's native GEMM, the same
threads) unless --classifier device.
PyTorch: the same weights in fp32, a straightforward GPT-2 forward with a per-layer KV cache, run under
``torch.inference_mode()``, with 1 thread and with torch's default thread count; the speed-up is taken
against the fastest PyTorch row. Compile time is reported separately, never in the timings.

    PYTHONPATH=python:BUILD python benchmarks/bench_decode.py [--prompt 64] [--tokens 32] [--layers 12]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import orion  # noqa: E402
from orion.models import GPT2Config, Model  # noqa: E402
from orion.models.testing import random_weights  # noqa: E402


def bench_orion(cfg, w16, prompt, n_tokens, device, classifier, repeats):
    m = Model(cfg, w16, device=device, classifier=classifier, stop_tokens=[])
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
    return dict(compile_s=compile_s, prefill_s=float(np.median(prefill)), step_s=float(np.median(steps)),
                compiles=eng.compiles, tokens=tokens)


_TORCH_DEFAULT_THREADS = None


def bench_torch(cfg, w32, prompt, n_tokens, repeats, threads=None):
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
                threads=torch.get_num_threads(), version=torch.__version__)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens (prefill)")
    ap.add_argument("--tokens", type=int, default=32, help="generated tokens per round")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--device", default="auto", choices=["auto", "sim", "ane"])
    ap.add_argument("--classifier", default="cpu", choices=["cpu", "device"])
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-threads", type=int, action="append", default=None,
                    help="PyTorch thread count(s) to measure (repeatable; default: 1 and torch's default - on a "
                         "shared, oversubscribed machine torch's multi-threaded runs collapse, so the speed-up is "
                         "taken against the fastest row)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    orion.sim.set_compile_budget(10**6)
    cfg = GPT2Config(n_layers=args.layers)
    w32 = random_weights(cfg, seed=0)
    w16 = {k: v.astype(np.float16) for k, v in w32.items()}
    w32h = {k: v.astype(np.float32) for k, v in w16.items()}        # torch gets the same (fp16-representable) values
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab_size, args.prompt)]
    print(f"GPT-2 124M-shaped (d={cfg.d_model}, L={cfg.n_layers}, H={cfg.n_heads}, V={cfg.vocab_size}), random "
          f"weights; prompt {args.prompt} tokens, {args.tokens} generated, {args.repeats} rounds; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, simulator threads "
          f"{orion._native.num_threads() if hasattr(orion._native, 'num_threads') else '?'}")
    ours = bench_orion(cfg, w16, prompt, args.tokens, args.device, args.classifier, args.repeats)
    rows = [("orion (" + orion.runtime.resolve_device(args.device) + f", classifier {args.classifier})",
             len(prompt) / ours["prefill_s"], 1.0 / ours["step_s"], ours["step_s"] * 1e3)]
    th = None
    if not args.no_torch:
        try:
            import torch  # noqa: F401 - availability check
            for n in args.torch_threads or [1, None]:
                t = bench_torch(cfg, w32h, prompt, args.tokens, args.repeats, n)
                rows.append((f"PyTorch {t['version']} CPU fp32 ({t['threads']} threads, KV cache)",
                             len(prompt) / t["prefill_s"], 1.0 / t["step_s"], t["step_s"] * 1e3))
                if th is None or t["step_s"] < th["step_s"]:
                    th = t                                       # compare with the fastest PyTorch setting
        except ImportError:
            print("(torch not importable: PyTorch column skipped)")
    print(f"\n{'':58s} {'prefill tok/s':>14s} {'decode tok/s':>13s} {'ms/token':>9s}")
    for name, pf, dc, ms in rows:
        print(f"{name:58s} {pf:14.1f} {dc:13.2f} {ms:9.1f}")
    print(f"\norion: {ours['compiles']} programs compiled once in {ours['compile_s']:.1f} s (not in the timings); "
          f"medians over {args.repeats} rounds")
    if th:
        print(f"decode speed-up vs the fastest PyTorch row: {th['step_s'] / ours['step_s']:.2f}x (target >= 2x); prefill: "
              f"{th['prefill_s'] / ours['prefill_s']:.2f}x")
        same = sum(a == b for a, b in zip(ours["tokens"], th["tokens"]))
        print(f"greedy tokens equal to PyTorch's: {same}/{len(th['tokens'])} (fp16 vs fp32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
