"""Decode and prefill of a GPT-2 124M-shaped model (random weights: the shapes are what matter): orion's
programs vs PyTorch CPU fp32 with a KV cache, in the same run (``benchmarks/bench_decode.py`` prints the
RESULTS.md table from these functions).

Ours: 13 stage programs per (S, T) set, KV cache as program inputs written in place, classifier on the CPU
unless ``classifier="device"``; compile time is reported apart, never in the timings. PyTorch: the same
(fp16-representable) weights in fp32, a straightforward GPT-2 forward with a per-layer KV cache under
``torch.inference_mode()``; torch is imported only on that side (:class:`TorchDecode`, :func:`run` with torch).
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np

from ..models import GPT2Config, Model
from ..models.testing import random_weights
from ..native import sim
from ..native.runtime import resolve_device
from .measure import alternating_blocks, figure, time_cap


class OrionDecode:
    """Greedy decode with orion's engine, compiled once (timed apart, ``compile_s``); each :meth:`round` is
    one prefill and ``n_tokens - 1`` steps. ``quantize``: compressed weights (``Model``'s);
    ``model_options``: more :class:`~orion.models.Model` options (e.g. ``layers="shared"``)."""

    def __init__(self, cfg, w16, prompt, n_tokens, device, classifier, quantize=None, **model_options):
        self.prompt, self.n_tokens = prompt, n_tokens
        self.model = Model(cfg, w16, device=device, classifier=classifier, stop_tokens=[], quantize=quantize,
                           **model_options)
        self.engine = self.model.engine
        t = time.perf_counter()
        self.engine.prepare(len(prompt), len(prompt) + n_tokens)
        self.compile_s = time.perf_counter() - t

    def round(self):
        """(prefill seconds, seconds of each step, the greedy tokens)."""
        eng = self.engine
        eng.reset(len(self.prompt) + self.n_tokens)
        t = time.perf_counter()
        logits = eng.prefill(self.prompt)
        prefill = time.perf_counter() - t
        tok = int(np.argmax(logits))
        toks, steps = [tok], []
        for _ in range(self.n_tokens - 1):
            t = time.perf_counter()
            logits = eng.step(tok)
            steps.append(time.perf_counter() - t)
            tok = int(np.argmax(logits))
            toks.append(tok)
        return prefill, steps, toks

    def release(self):
        self.model.release()


def bench_orion(cfg, w16, prompt, n_tokens, device, classifier, repeats, quantize=None, **model_options):
    """:class:`OrionDecode` for ``repeats`` rounds: medians and every sample."""
    run = OrionDecode(cfg, w16, prompt, n_tokens, device, classifier, quantize, **model_options)
    prefill, steps, tokens = [], [], None
    for _ in range(repeats):
        p, s, tokens = run.round()
        prefill.append(p)
        steps += s
    run.release()
    return dict(compile_s=run.compile_s, prefill_s=float(np.median(prefill)), step_s=float(np.median(steps)),
                compiles=run.engine.compiles, tokens=tokens, prefill_samples=prefill, step_samples=steps)


_TORCH_DEFAULT_THREADS = None


class TorchDecode:
    """The same decode in PyTorch fp32 with a KV cache (``threads``: None = torch's default); each
    :meth:`round` as :meth:`OrionDecode.round`."""

    def __init__(self, cfg, w32, prompt, n_tokens, threads=None):
        import torch  # optional: torch (not a dependency; seconds to import)

        global _TORCH_DEFAULT_THREADS
        if _TORCH_DEFAULT_THREADS is None:
            _TORCH_DEFAULT_THREADS = torch.get_num_threads()
        self.threads = threads or _TORCH_DEFAULT_THREADS   # None: back to the default after a 1-thread row
        self.torch, self.cfg, self.prompt, self.n_tokens = torch, cfg, prompt, n_tokens
        self.W = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in w32.items()}
        self.version = torch.__version__

    def forward(self, ids, cache, pos0):
        import torch.nn.functional as F  # optional: torch (not a dependency; seconds to import)
        torch, cfg, W = self.torch, self.cfg, self.W
        d, H = cfg.d_model, cfg.n_heads
        hd = d // H
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

    def round(self):
        torch, cfg = self.torch, self.cfg
        torch.set_num_threads(self.threads)
        with torch.inference_mode():
            cache = [(torch.zeros(cfg.n_ctx, cfg.d_model), torch.zeros(cfg.n_ctx, cfg.d_model))
                     for _ in range(cfg.n_layers)]
            ids = torch.tensor(self.prompt)
            t = time.perf_counter()
            logits = self.forward(ids, cache, 0)
            prefill = time.perf_counter() - t
            tok = int(torch.argmax(logits))
            toks, steps = [tok], []
            pos = len(self.prompt)
            for _ in range(self.n_tokens - 1):
                t = time.perf_counter()
                logits = self.forward(torch.tensor([tok]), cache, pos)
                steps.append(time.perf_counter() - t)
                tok = int(torch.argmax(logits))
                toks.append(tok)
                pos += 1
        return prefill, steps, toks


def bench_torch(cfg, w32, prompt, n_tokens, repeats, threads=None):
    """:class:`TorchDecode`: a warm-up round, then ``repeats`` timed rounds."""
    run = TorchDecode(cfg, w32, prompt, n_tokens, threads)
    run.round()
    prefill, steps, tokens = [], [], None
    for _ in range(repeats):
        p, s, tokens = run.round()
        prefill.append(p)
        steps += s
    return dict(prefill_s=float(np.median(prefill)), step_s=float(np.median(steps)), tokens=tokens,
                threads=run.threads, version=run.version, prefill_samples=prefill, step_samples=steps)


QUICK = dict(config=dict(n_layers=1, d_model=64, n_heads=2, d_ff=256, vocab_size=512, n_ctx=64), prompt=16,
             tokens=16)
FULL = dict(config=dict(n_layers=12), prompt=64, tokens=32)


def setup(config: dict, prompt_len: int):
    """Config, fp16 weights, the same values in fp32 for torch, and a random prompt."""
    cfg = GPT2Config(**config)
    w32 = random_weights(cfg, seed=0)
    w16 = {k: v.astype(np.float16) for k, v in w32.items()}
    w32h = {k: v.astype(np.float32) for k, v in w16.items()}
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab_size, prompt_len)]
    return cfg, w16, w32h, prompt


def _timed_round(side, n_prompt: int) -> dict:
    """One round as repetition samples: prefill tok/s and decode tok/s (from the round's median step)."""
    prefill, steps, side.tokens = side.round()
    return {"prefill_tok_s": n_prompt / prefill, "decode_tok_s": 1 / statistics.median(steps)}


def _speedups(torch_names, r: dict) -> dict:
    """A round's ratios of our tok/s to each PyTorch side's."""
    return {f"orion/{n} {kind}": r[f"orion {kind}_tok_s"] / r[f"{n} {kind}_tok_s"]
            for n in torch_names for kind in ("decode", "prefill")}


def faster_torch(rep, names) -> str:
    """Of the PyTorch sides ``names``, the one whose median decode was faster over the same rounds."""
    return max(names, key=lambda n: statistics.median(rep.samples[f"{n} decode_tok_s"]))


def run(quick: bool = False, use_torch: bool = True, device: str = "auto") -> dict:
    """The ``decode`` section of an ``orion bench`` result: tok/s of both sides (medians over rounds repeated
    until their spreads are within target, :mod:`.measure`), and the speed-ups against the faster PyTorch
    thread setting (1 thread or torch's default), per round: each round runs a block of ours and of PyTorch
    at each setting (:func:`.measure.alternating_blocks`)."""
    p = QUICK if quick else FULL
    old = sim.compile_budget()[1]
    sim.set_compile_budget(10**6)
    torch_default = None
    try:
        cfg, w16, w32h, prompt = setup(p["config"], p["prompt"])
        sides = {"orion": OrionDecode(cfg, w16, prompt, p["tokens"], device, "cpu")}
        try:
            if use_torch:
                for threads in (1, None):
                    side = TorchDecode(cfg, w32h, prompt, p["tokens"], threads)
                    torch_default = _TORCH_DEFAULT_THREADS
                    sides.setdefault(f"torch/{side.threads}", side)
            rep = alternating_blocks({n: functools.partial(_timed_round, side, len(prompt))
                                      for n, side in sides.items()}, time_cap=time_cap(quick) * len(sides),
                                     derived=functools.partial(_speedups, [n for n in sides if n != "orion"]))
        finally:
            sides["orion"].release()
            if torch_default is not None:
                import torch  # optional: torch (not a dependency; seconds to import)
                torch.set_num_threads(torch_default)              # the train benchmark's torch: its default
    finally:
        sim.set_compile_budget(old)
    ours = sides["orion"]
    metrics = {"orion_decode_tok_s": figure(rep.samples["orion decode_tok_s"], "tok/s", "higher"),
               "orion_prefill_tok_s": figure(rep.samples["orion prefill_tok_s"], "tok/s", "higher")}
    notes = [f"orion on {resolve_device(device)}: {ours.engine.compiles} programs compiled in {ours.compile_s:.1f} s "
             f"(not timed); medians of {rep.reps} turns of {', '.join(sides)} (stopped: {rep.stopped}), each "
             f"side's sample the median of a block of back-to-back generations, decode from each one's median step"]
    params = dict(p["config"], prompt=p["prompt"], tokens=p["tokens"], repeat=rep.summary())
    if use_torch:
        torch_names = [n for n in sides if n != "orion"]
        best = faster_torch(rep, torch_names)
        theirs = sides[best]
        for kind in ("decode", "prefill"):
            metrics[f"torch_{kind}_tok_s"] = figure(rep.samples[f"{best} {kind}_tok_s"], "tok/s", "higher")
            metrics[f"{kind}_speedup_vs_torch"] = figure(rep.samples[f"orion/{best} {kind}"], "x", "higher")
        same = sum(x == y for x, y in zip(ours.tokens, theirs.tokens))
        tried = ", ".join(f"{sides[n].threads} thread(s) {statistics.median(rep.samples[f'{n} decode_tok_s']):.4g} "
                          f"tok/s" for n in torch_names)
        notes.append(f"PyTorch {theirs.version} CPU fp32, the faster decode of 1 and default threads ({tried}); "
                     f"speed-ups per round against it; greedy tokens equal: {same}/{len(theirs.tokens)}")
    return {"params": params, "notes": notes, "metrics": metrics}
