"""One training step (one microbatch, forward + backward + AdamW) of a Llama-shaped model: orion (device
programs on the simulator or the ANE, the rest on the CPU) vs PyTorch CPU fp32 with AdamW, in the same run
(``benchmarks/bench_train_step.py`` prints the RESULTS.md table from these functions). torch is imported
only inside :func:`torch_step_times`."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np

from ..native import sim
from ..native.runtime import counters
from ..train.model import PRESETS, init_params
from ..train.optim import AdamW, global_norm
from ..train.programs import LayerPrograms
from ..train.step import GradAccumulator, StepEngine, zero_grads
from ..train.trainer import blas_threads as limit
from ..train.trainer import default_blas_threads
from .measure import alternating_blocks, figure, time_cap


class OrionTrainSteps:
    """Training steps on orion's programs (compiled once, ``compile_s``): each :meth:`step` is one microbatch
    (forward + backward), clipping and AdamW, returning the total and its split (device eval, CPU, weight
    staging/update, AdamW), loss, compiles and loads. Call :meth:`release` when done."""

    def __init__(self, cfg, params, tokens, strategy: str, blas_threads):
        self.params, self.blas_threads = params, blas_threads or default_blas_threads(cfg)
        t = time.perf_counter()
        self.progs = LayerPrograms(cfg, tokens.shape[1] - 1, params, strategy, "auto")
        self.compile_s = time.perf_counter() - t
        self.device = self.progs.device
        self.eng = StepEngine(cfg, self.progs, params)
        self.opt = AdamW(params)
        self.grads = GradAccumulator(zero_grads(params))
        self.X, self.Y = tokens[:, :-1], tokens[:, 1:]

    def step(self) -> dict:
        progs, grads, X, Y = self.progs, self.grads, self.X, self.Y
        with limit(self.blas_threads):
            c0 = counters()
            s0 = dict(progs.stats)
            t0 = time.perf_counter()
            grads.start()
            res = self.eng.microbatch(X, Y, grads, 256.0 / X.size)
            grads.finish()
            t1 = time.perf_counter()
            gn = global_norm(grads) / 256.0
            mul = (1 / 256.0) * min(1.0, 1.0 / (gn + 1e-6))
            t2 = time.perf_counter()
            self.opt.step(self.params, grads, 3e-4, grad_mul=mul)
            t3 = time.perf_counter()
            progs.update(self.params)
            t4 = time.perf_counter()
            c1 = counters()
        s1 = progs.stats
        dev = s1["eval_s"] - s0["eval_s"]
        stage = s1["stage_s"] - s0["stage_s"]
        return dict(total=t4 - t0, device=dev, weights=stage + (t4 - t3), cpu=(t1 - t0) - dev - stage + (t2 - t1),
                    optim=t3 - t2, loss=res.loss_sum / res.n_tokens, finite=res.finite,
                    compiles=c1["compiles"] - c0["compiles"], loads=c1["loads"] - c0["loads"])

    def release(self):
        self.progs.release()


def recompile_update_cost(cfg, params, seq):
    """Seconds for one weight update under the recompile strategy (4 programs per layer)."""
    progs = LayerPrograms(cfg, seq, params, "recompile", "auto")
    c0 = counters()
    t = time.perf_counter()
    progs.update(params)
    dt = time.perf_counter() - t
    c1 = counters()
    progs.release()
    return dt, c1["compiles"] - c0["compiles"], c1["loads"] - c0["loads"]


class TorchTrainSteps:
    """The same step in PyTorch fp32 (the Llama forward written out, autograd, clipping, AdamW); each
    :meth:`step` returns its total and split (forward, backward, optim) and the loss."""

    def __init__(self, cfg, params, tokens):
        import torch  # optional: a benchmark-only dependency
        import torch.nn.functional as F  # optional: as torch

        torch.manual_seed(0)
        P = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
        decay = [p for k, p in P.items() if p.ndim >= 2]
        nodecay = [p for k, p in P.items() if p.ndim < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
        S = tokens.shape[1] - 1
        hd = cfg.head_dim or cfg.d_model // cfg.n_heads
        freq = cfg.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(S, dtype=torch.float64)[:, None] * freq[None]
        cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
        x_in = torch.from_numpy(tokens[:, :-1])
        y = torch.from_numpy(tokens[:, 1:])

        def rms(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * w

        def rope(x, heads):                    # x [B, S, heads*hd], adjacent pairs
            B = x.shape[0]
            xr = x.view(B, S, heads, hd // 2, 2)
            x0, x1 = xr[..., 0], xr[..., 1]
            c, s = cos[None, :, None, :], sin[None, :, None, :]
            return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).view(B, S, heads * hd)

        def loss_fn():
            x = P["tok_emb"][x_in]
            B = x.shape[0]
            for i in range(cfg.n_layers):
                p = f"layers.{i}."
                h = rms(x, P[p + "rms_att"])
                q = rope(h @ P[p + "wq"].T, cfg.n_heads).view(B, S, cfg.n_heads, hd).transpose(1, 2)
                k = rope(h @ P[p + "wk"].T, cfg.n_kv_heads).view(B, S, cfg.n_kv_heads, hd).transpose(1, 2)
                v = (h @ P[p + "wv"].T).view(B, S, cfg.n_kv_heads, hd).transpose(1, 2)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + a.transpose(1, 2).reshape(B, S, cfg.d_model) @ P[p + "wo"].T
                h = rms(x, P[p + "rms_ffn"])
                x = x + (F.silu(h @ P[p + "w1"].T) * (h @ P[p + "w3"].T)) @ P[p + "w2"].T
            logits = rms(x, P["rms_final"]) @ P.get("wcls", P["tok_emb"]).T
            return F.cross_entropy(logits.view(-1, cfg.vocab_size), y.reshape(-1))

        self.torch, self.P, self.opt, self.loss_fn = torch, P, opt, loss_fn
        self.threads = torch.get_num_threads()

    def step(self) -> dict:
        P, opt = self.P, self.opt
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = self.loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        t3 = time.perf_counter()
        return dict(total=t3 - t0, forward=t1 - t0, backward=t2 - t1, optim=t3 - t2, loss=float(loss.detach()))


class HFTrainSteps:
    """The same step on transformers' ``LlamaForCausalLM`` of the same config (random init, SDPA attention,
    tied embeddings as ours), clipping and AdamW; :meth:`step` in fp32 or under
    ``torch.autocast("cpu", dtype=torch.bfloat16)`` (one model and optimizer serve both: the timing does not
    depend on the weights' values). Each step returns its total and split (forward, backward, optim)."""

    def __init__(self, cfg, tokens, threads: int | None = None):
        import torch  # optional: a benchmark-only dependency
        from transformers import LlamaConfig as HFLlamaConfig  # optional: as torch
        from transformers import LlamaForCausalLM  # optional: as torch

        if threads:
            torch.set_num_threads(threads)
        torch.manual_seed(0)
        S = tokens.shape[1] - 1
        hc = HFLlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                           num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                           num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                           max_position_embeddings=max(cfg.n_ctx, S), rms_norm_eps=cfg.norm_eps,
                           rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
                           tie_word_embeddings=cfg.tie_embeddings, use_cache=False)
        hc._attn_implementation = "sdpa"
        model = LlamaForCausalLM(hc).float().train()
        decay = [p for p in model.parameters() if p.ndim >= 2]
        nodecay = [p for p in model.parameters() if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                      {"params": nodecay, "weight_decay": 0.0}],
                                     lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
        self.torch, self.model = torch, model
        self.x = torch.from_numpy(tokens[:, :-1])
        self.y = torch.from_numpy(tokens[:, 1:]).reshape(-1)
        self.threads = torch.get_num_threads()

    def step(self, bf16: bool = False) -> dict:
        torch, model, opt = self.torch, self.model, self.opt
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with ctx:
            logits = model(input_ids=self.x).logits
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), self.y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t3 = time.perf_counter()
        return {"total": t3 - t0, "forward": t1 - t0, "backward": t2 - t1, "optim": t3 - t2,
                "loss": float(loss.detach())}


SIDES = ("orion", "torch", "hf_fp32", "hf_bf16")


def interleaved_step_times(cfg, params, tokens, steps: int, sides=SIDES, blas_threads=None, torch_threads=None,
                           profile=None, log=print):
    """``steps`` + 1 (the first a warm-up) rounds of one training step per side, the sides interleaved in
    each round so a change of the machine's load hits all of them alike: ``orion`` (dynamic strategy),
    ``torch`` (:class:`TorchTrainSteps`, the hand-written model), ``hf_fp32`` / ``hf_bf16``
    (:class:`HFTrainSteps` in fp32 / under bf16 autocast). ``profile``: a list that receives our last
    step's :func:`orion.sim.timing` result. Returns ({side: [step records]}, info: compile seconds, device,
    torch threads)."""
    ours = OrionTrainSteps(cfg, {k: v.copy() for k, v in params.items()}, tokens, "dynamic", blas_threads)
    info = {"compile_s": ours.compile_s, "device": ours.device}
    runners = {"orion": ours.step}
    try:
        if "torch" in sides:
            t = TorchTrainSteps(cfg, params, tokens)
            runners["torch"] = t.step
        if "hf_fp32" in sides or "hf_bf16" in sides:
            hf = HFTrainSteps(cfg, tokens, torch_threads)
            if "hf_fp32" in sides:
                runners["hf_fp32"] = lambda: hf.step(False)
            if "hf_bf16" in sides:
                runners["hf_bf16"] = lambda: hf.step(True)
        if len(runners) > 1:
            import torch  # optional: a benchmark-only dependency
            if torch_threads:
                torch.set_num_threads(torch_threads)
            info["torch_threads"] = torch.get_num_threads()
        out = {k: [] for k in runners}
        for i in range(steps + 1):
            for side, run in runners.items():
                if side == "orion" and profile is not None and i == steps:
                    with sim.timing() as tm:
                        rec = run()
                    profile.append(tm)
                else:
                    rec = run()
                rec["warmup"] = i == 0
                out[side].append(rec)
                log(f"  round {i}{' (warmup)' if i == 0 else ''} {side}: {rec['total']:.2f}s loss {rec['loss']:.4f}")
    finally:
        ours.release()
    return out, info


def med(xs, k):
    return float(np.median([x[k] for x in xs if not x["warmup"]]))


QUICK = dict(preset="micro", layers=1, seq=32)
FULL = dict(preset="stories110M", layers=12, seq=256)
PARTS = ("device", "cpu", "weights", "optim")


def setup(preset: str, layers: int, seq: int):
    """Config (``preset`` with ``layers``), initial parameters and one ``seq``-token microbatch."""
    cfg = dataclasses.replace(PRESETS[preset], n_layers=layers, n_ctx=max(seq, PRESETS[preset].n_ctx))
    params = init_params(cfg, 0)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, seq + 1))
    return cfg, params, tokens


def run(quick: bool = False, use_torch: bool = True, log=lambda *a: None) -> dict:
    """The ``train`` section of an ``orion bench`` result: seconds per step of both sides and our step's
    split (medians repeated until their spreads are within target, :mod:`.measure`), and the speed-up (torch
    time / ours). The sides take turns, a block of steps each per round, and the speed-up's samples are each
    round's ratio (:func:`.measure.alternating_blocks` says why)."""
    p = QUICK if quick else FULL
    cfg, params, tokens = setup(p["preset"], p["layers"], p["seq"])
    ours = OrionTrainSteps(cfg, {k: v.copy() for k, v in params.items()}, tokens, "dynamic", None)
    theirs = TorchTrainSteps(cfg, params, tokens) if use_torch else None
    last = {}

    def ours_step():
        last.update(ours.step())
        return {k: last[k] for k in ("total",) + PARTS}
    sides = {"orion": ours_step}
    if theirs is not None:
        sides["torch"] = lambda: {"total": theirs.step()["total"]}
    try:
        rep = alternating_blocks(sides, time_cap=time_cap(quick) * len(sides),
                                 derived=lambda r: {"speedup": r["torch total"] / r["orion total"]} if theirs else {})
    finally:
        ours.release()
    samples = {k.removeprefix("orion "): v for k, v in rep.samples.items()}
    metrics = {"orion_step_s": figure(samples["total"], "s/step", "lower")}
    for part in PARTS:
        metrics[f"orion_{part}_s"] = figure(samples[part], "s/step", "lower")
    notes = [f"orion on {ours.device}, strategy dynamic: {last['compiles']} compiles and {last['loads']} loads "
             f"per step; one-time compile {ours.compile_s:.2f} s (not timed); medians of {rep.reps} rounds "
             f"(stopped: {rep.stopped}), each a block's median"]
    params_out = dict(preset=p["preset"], layers=p["layers"], seq=p["seq"], d_model=cfg.d_model,
                      vocab_size=cfg.vocab_size, repeat=rep.summary())
    if theirs is not None:
        metrics["torch_step_s"] = figure(samples["torch total"], "s/step", "lower")
        metrics["speedup_vs_torch"] = figure(samples["speedup"], "x", "higher")
        notes.append(f"PyTorch CPU fp32 with AdamW, {theirs.threads} threads, a block of steps after each block "
                     f"of ours (:func:`orion.bench.measure.alternating_blocks`); speed-up = torch / orion, per round")
    return {"params": params_out, "notes": notes, "metrics": metrics}
