"""Text generation on ANE programs: the decode engine, sampling, streaming and the ``Model`` facade.

Design (documented in the issue notes as "KV cache as program inputs"):

* The network is cut at the attention inputs (see :mod:`orion.models.gpt2` / :mod:`orion.models.llama`):
  ``L + 1`` stage programs per *program set* ``(S, T)``: ``S`` query columns, ``T`` cache length. Weights
  are baked (convs, C46); nothing is recompiled per token.
* The KV cache lives in the cache **input surfaces** of the stage programs (staged once, then written
  in place through zero-copy surface views: only the new columns cross per token), with a host mirror
  so a different program set (prefill bucket, longer context bucket) can be synchronised once.
* Prefill runs the prompt through a set with ``S`` = a sequence bucket (16, 32, 64, ... chunks);
  decode uses ``S = 16`` (the ANE minimum, C04) with the new token in column 0. The causal structure is
  an additive ``mask [1,1,S,T]`` input (0 / -1e4), RoPE angles are ``cos``/``sin`` inputs, so one program
  serves every position. Context buckets ``T`` (powers of two up to ``n_ctx``) bound the attention work.
* Programs are compiled once per ``(S, T)`` and kept; the classifier runs on the CPU (fp16 weights in
  16-row panels through the native GEMM: fp32 accumulation, half the bytes of fp32 BLAS, no second
  thread pool spinning between the stage programs) or as chunked programs (``classifier="device"``;
  rows split so no axis exceeds C22's 65,536 and no program holds more than ``classifier_chunk`` rows,
  C26).
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from .. import _native
from ..errors import CompileError, InputError, ModelFormatError
from ..ir import Graph, ops
from ..ir.composites import MASK_VALUE

log = logging.getLogger("orion")

__all__ = ["Engine", "Model", "Generation", "Token", "TokenStream", "SamplingParams", "sample_next", "load",
           "DECODE_S"]

_NP_FLOAT = {"fp16": np.float16, "fp32": np.float32}
DECODE_S = 16                      # C04: the smallest sequence the ANE evaluates correctly
PREFILL_BUCKETS = (16, 32, 64, 128, 256)


def _family(cfg):
    """The graph builder module of a config (every Llama-style model_type shares models/llama.py)."""
    if cfg.family == "gpt2":
        from . import gpt2
        return gpt2
    if cfg.family == "llama":
        from . import llama
        return llama
    raise ModelFormatError(f"unsupported model family {cfg.family!r}")


# ----------------------------------------------------------------------------------------- stages
class _Stage:
    """One compiled stage program, called by graph names; cache inputs are written in place."""

    def __init__(self, cp):
        self.cp = cp
        self.prog = cp.program
        plan = cp.io_plan
        self.inputs = {n: b for n, b in plan.inputs.items() if b.kind == "activation"}
        self.outputs = dict(plan.outputs)
        self.views: dict[str, np.ndarray] = {}       # cache name -> writable [C, T] region of the surface
        self.host: dict[str, np.ndarray] = {}        # fallback: cache passed with every call
        for name in ("k_cache", "v_cache"):
            b = self.inputs.get(name)
            if b is None:
                continue
            ms, s = tuple(b.mil_shape), tuple(b.shape)
            if b.mil_dtype == "fp16" and len(ms) == 4 and ms[:3] == s[:3] and ms[3] >= s[3]:
                self.prog.stage(b.mil_name, np.zeros(ms, np.float16))
                view = self.prog.input_surface(b.mil_name).view("fp16", list(ms))
                self.views[name] = view[0, :, 0, :s[3]]
            else:
                self.host[name] = np.zeros((s[1], s[3]), np.float16)
        self.cache = {**self.views, **self.host}
        self.in_views: dict[str, np.ndarray] = {}
        self.out_views: dict[str, tuple] = {}
        self.zero_copy = not self.host and self._bind_views()

    def _bind_views(self) -> bool:
        """Zero-copy I/O for every input and output: inputs are written in place into their surfaces
        (padding zeroed once), outputs read through views of theirs, one ``eval`` per call - no staging
        copies or fresh arrays in the runtime layer. False (use the call API) if one cannot be viewed."""
        try:
            for name, b in self.inputs.items():
                if name in self.cache:
                    continue
                ms, s = tuple(b.mil_shape), tuple(b.shape)
                if b.mil_dtype not in _NP_FLOAT or len(ms) != len(s) or any(d > m for d, m in zip(s, ms)):
                    return False
                self.prog.stage(b.mil_name, np.zeros(ms, _NP_FLOAT[b.mil_dtype]))
                full = self.prog.input_surface(b.mil_name).view(b.mil_dtype, list(ms))
                self.in_views[name] = full[tuple(slice(0, d) for d in s)]
            for name, ob in self.outputs.items():
                parts = []
                for p in ob.parts:
                    if p.mil_dtype not in _NP_FLOAT:
                        return False
                    parts.append(p.from_surface(self.prog.output_surface(p.mil_name).view(p.mil_dtype,
                                                                                          list(p.mil_shape))))
                self.out_views[name] = (parts, ob)
        except Exception:  # noqa: BLE001 - a backend without surface views: the call API works everywhere
            self.in_views.clear()
            self.out_views.clear()
            return False
        return True

    def run(self, feed: dict) -> dict:
        """Runs the stage; with zero-copy I/O the returned arrays are views of the output surfaces,
        valid until this stage runs again (callers consume them before that)."""
        if self.zero_copy:
            for n, a in feed.items():
                self.in_views[n][...] = a
            self.prog.eval()
            out = {}
            for name, (parts, ob) in self.out_views.items():
                arr = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ob.concat_axis)
                out[name] = arr.reshape(ob.shape)
            return out
        mil = {}
        for n, a in feed.items():
            b = self.inputs[n]
            mil[b.mil_name] = b.to_surface(a)
        for n, a in self.host.items():
            b = self.inputs[n]
            mil[b.mil_name] = b.to_surface(a[None, :, None, :])
        raw = self.prog.run(mil)
        out = {}
        for name, ob in self.outputs.items():
            parts = [p.from_surface(np.asarray(raw[p.mil_name])) for p in ob.parts]
            arr = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ob.concat_axis)
            out[name] = arr.reshape(ob.shape)
        return out

    @property
    def programs(self) -> list:
        return [self.cp]

    def release(self):
        self.views.clear()
        self.in_views.clear()
        self.out_views.clear()
        self.cp.release()


class _SplitStage:
    """A stage run as several programs in turn (the parts of the family's ``stage_graph``) when one
    program cannot hold all of its weights (C18); same interface as :class:`_Stage`. Each part takes
    the previous part's residual output as ``x``; the KV cache lives in the attention part."""

    def __init__(self, parts: list[_Stage]):
        self.parts = parts
        self.cache = next((p.cache for p in parts if p.cache), {})

    @property
    def programs(self) -> list:
        return [p.cp for p in self.parts]

    def run(self, feed: dict) -> dict:
        out: dict = {}
        x = feed["x"]
        for p in self.parts:
            o = p.run({"x": x, **{n: a for n, a in feed.items() if n in p.inputs and n != "x"}})
            x = o.get("x_mid", o.get("x_out", x))
            out.update(o)
        out.pop("x_mid", None)
        return out

    def release(self):
        for p in self.parts:
            p.release()


def _classifier_panels(W) -> np.ndarray:
    """``W [V, d]`` -> fp16 ``[ceil(V/16), d, 16]``: 16-row panels stored k-major, the layout the native
    narrow-output GEMM streams in place (``trans_a``). The CPU classifier reads half the bytes of fp32
    (the programs hold fp16 weights anyway) and runs on orion's threads: no BLAS pool spinning between
    the stage programs."""
    W = np.asarray(W, np.float16)
    V, d = W.shape
    n = -(-V // 16)
    P = np.zeros((n * 16, d), np.float16)
    P[:V] = W
    return np.ascontiguousarray(P.reshape(n, 16, d).transpose(0, 2, 1))


# ----------------------------------------------------------------------------------------- engine
class Engine:
    """Runs one model on a device: ``reset()``, ``prefill(ids)``, ``step(token)`` → logits.

    ``ctx_buckets``: cache lengths T to compile for (default powers of two from 64 to n_ctx, plus n_ctx);
    ``prefill_buckets``: prefill chunk sizes S; ``classifier``: "cpu" or "device";
    ``residual_scale``: factor carried by the residual stream inside the programs so that it stays within
    fp16 (exact up to rounding; see :mod:`orion.models.fp16_safety`): a number, or "auto" (measured on a
    probe through the float reference at construction)."""

    def __init__(self, cfg, weights: dict, *, device: str = "auto", profile=None, classifier: str = "cpu",
                 ctx_buckets: Sequence[int] | None = None, prefill_buckets: Sequence[int] = PREFILL_BUCKETS,
                 classifier_chunk: int = 16384, compile_options: dict | None = None, residual_scale="auto"):
        if classifier not in ("cpu", "device"):
            raise InputError(f"classifier must be 'cpu' or 'device', got {classifier!r}")
        from .fp16_safety import Fp16Plan, resolve_fp16_plan
        self.fp16 = resolve_fp16_plan(cfg, weights, residual_scale)
        self.residual_scale = self.fp16.scale
        self.cfg, self.w = cfg, weights
        self.fam = _family(cfg)
        self.device, self.profile = device, profile
        self.classifier = classifier
        self.classifier_chunk = int(classifier_chunk)
        self.compile_options = dict(compile_options or {})
        n_ctx = cfg.n_ctx
        if ctx_buckets is None:
            b, ctx_buckets = 64, []
            while b < n_ctx:
                ctx_buckets.append(b)
                b *= 2
            ctx_buckets.append(n_ctx)
        self.ctx_buckets = sorted({max(DECODE_S, min(int(t), n_ctx)) for t in ctx_buckets} | {max(DECODE_S, n_ctx)})
        self.prefill_buckets = sorted({max(DECODE_S, int(s)) for s in prefill_buckets})
        # host mirror of the KV cache, sized for the current context bucket (grown on demand: a model's
        # n_ctx may be 128k positions that no call uses)
        self.k_host = np.zeros((cfg.n_layers, cfg.kv_dim, 0), np.float16)
        self.v_host = np.zeros((cfg.n_layers, cfg.kv_dim, 0), np.float16)
        self.sets: dict[tuple[int, int], list[_Stage]] = {}
        self.cls_sets: dict[int, list[tuple[int, int, _Stage]]] = {}
        self._synced: dict[tuple[int, int], int] = {}
        self._wcls = None                                # classifier panels (CPU path)
        self.pos = 0
        self.T = self.ctx_buckets[0]
        self.compiles = 0
        self.compile_seconds = 0.0
        self.graph_options: dict = {}                    # extra stage_graph arguments (orion.lora: adapter slots)
        if self.fp16 != Fp16Plan():
            self.graph_options["fp16"] = self.fp16

    # -- programs --------------------------------------------------------------------------------
    def _compile(self, g: Graph):
        from ..compiler import compile as compile_graph
        t = time.perf_counter()
        cp = compile_graph(g, device=self.device, profile=self.profile, **self.compile_options)
        self.compile_seconds += time.perf_counter() - t
        self.compiles += 1
        return cp

    def program_set(self, S: int, T: int) -> list[_Stage]:
        key = (S, T)
        if key not in self.sets:
            stages = []
            try:
                for i in range(self.fam.n_stages(self.cfg)):
                    stages.append(self._stage(i, S, T))
            except BaseException:
                for s in stages:
                    s.release()
                raise
            self.sets[key] = stages
            self._synced[key] = 0
            log.info("orion: compiled %d stage programs for S=%d T=%d", len(stages), S, T)
        return self.sets[key]

    def _stage(self, i: int, S: int, T: int):
        """Stage ``i`` as one program or, when its weights exceed one program's budget (C18/C19) and the
        family can cut it, as one program per part."""
        build, n = self.fam.stage_graph, self.fam.n_stages(self.cfg)
        try:
            return _Stage(self._compile(build(self.cfg, self.w, i, S, T, **self.graph_options)))
        except CompileError as e:
            if e.constraint not in ("C18", "C19") or not getattr(self.fam, "PARTS", None):
                raise
            log.info("orion: stage %d exceeds the weight budget (%s): one program per part", i, e.constraint)
        parts = [p for p in self.fam.PARTS if not (i == 0 and p != "qkv") and not (i == n - 1 and p == "qkv")]
        done: list[_Stage] = []
        try:
            for p in parts:
                done.append(_Stage(self._compile(build(self.cfg, self.w, i, S, T, part=p, **self.graph_options))))
        except BaseException:
            for st in done:
                st.release()
            raise
        return _SplitStage(done)

    def _classifier_set(self, S: int):
        if S not in self.cls_sets:
            W = self.fam.classifier_weight(self.cfg, self.w)
            V, d = W.shape
            step = max(1, min(self.classifier_chunk, 65536))
            n = math.ceil(V / step)
            step = math.ceil(V / n)
            progs = []
            for r0 in range(0, V, step):
                r1 = min(V, r0 + step)
                g = Graph(f"classifier_S{S}_{r0}")
                h = g.input("h", (1, d, 1, S))
                g.output("logits", ops.linear(h, g.weight("wcls", W[r0:r1])))
                progs.append((r0, r1, _Stage(self._compile(g))))
            self.cls_sets[S] = progs
        return self.cls_sets[S]

    def _budget_left(self) -> int | None:
        try:
            from .. import _native
            from ..runtime import resolve_device
            used, limit = _native.budget(resolve_device(self.device))
            return int(limit) - int(used)
        except Exception:  # noqa: BLE001 - no budget information: no guard
            return None

    def prepare(self, n_prompt: int, n_total: int) -> None:
        """Compiles (once) what a generation of ``n_total`` tokens from ``n_prompt`` prompt tokens uses.
        When the per-process compile budget (C05) cannot afford a separate prefill set, prompts are
        prefilled through the decode set in chunks of 16."""
        T = self.ctx_bucket(n_total)
        S = self._prefill_S(n_prompt, T)
        new = [k for k in {(S, T), (DECODE_S, T)} if k not in self.sets]
        left = self._budget_left()
        if len(new) == 2 and left is not None and left < 2 * self.fam.n_stages(self.cfg):
            log.warning("orion: compile budget low (%d left): prefilling through the decode programs", left)
            self.prefill_buckets = [DECODE_S]
        self.program_set(self._prefill_S(n_prompt, T), T)
        self.program_set(DECODE_S, T)
        if self.classifier == "device":
            self._classifier_set(self._prefill_S(n_prompt, T))
            self._classifier_set(DECODE_S)
        elif self._wcls is None:        # the CPU classifier's weight layout, built with the programs
            self._wcls = _classifier_panels(self.fam.classifier_weight(self.cfg, self.w))

    def ctx_bucket(self, n: int) -> int:
        i = bisect.bisect_left(self.ctx_buckets, n)
        if i == len(self.ctx_buckets):
            raise InputError(f"sequence of {n} tokens exceeds the context of {self.cfg.n_ctx}")
        return self.ctx_buckets[i]

    def _prefill_S(self, n: int, T: int) -> int:
        ok = [s for s in self.prefill_buckets if s <= T] or [DECODE_S]
        i = bisect.bisect_left(ok, n)
        return ok[min(i, len(ok) - 1)]

    def release(self) -> None:
        for stages in self.sets.values():
            for s in stages:
                s.release()
        for progs in self.cls_sets.values():
            for _, _, s in progs:
                s.release()
        self.sets.clear()
        self.cls_sets.clear()

    # -- state -----------------------------------------------------------------------------------
    def reset(self, n_total: int | None = None) -> None:
        """Empties the cache; ``n_total`` (prompt + new tokens) picks the context bucket."""
        self.pos = 0
        for k in self._synced:
            self._synced[k] = 0
        self.T = self.ctx_bucket(n_total or 1)
        self._host_capacity(self.T)

    def _host_capacity(self, T: int) -> None:
        have = self.k_host.shape[2]
        if have >= T:
            return
        for name in ("k_host", "v_host"):
            old = getattr(self, name)
            new = np.zeros(old.shape[:2] + (T,), np.float16)
            new[:, :, :have] = old
            setattr(self, name, new)

    def _sync(self, key, stages) -> None:
        have = self._synced.get(key, 0)
        if have >= self.pos:
            return
        for l in range(1, len(stages)):
            c = stages[l].cache
            c["k_cache"][:, have:self.pos] = self.k_host[l - 1, :, have:self.pos]
            c["v_cache"][:, have:self.pos] = self.v_host[l - 1, :, have:self.pos]
        self._synced[key] = self.pos

    def _mask(self, S: int, T: int, p0: int, n: int, window: int | None = None) -> np.ndarray:
        """Additive mask: query column i (position p0 + i; padding columns repeat the last) sees keys
        j <= its position, and with a sliding ``window`` only j > position - window (as transformers)."""
        rows = p0 + np.minimum(np.arange(S), n - 1)
        j = np.arange(T)[None, :]
        seen = j <= rows[:, None]
        if window is not None:
            seen &= j > rows[:, None] - window
        return np.where(seen, 0.0, MASK_VALUE).astype(np.float16).reshape(1, 1, S, T)

    def _layer_inputs(self, S: int, T: int, p0: int, n: int) -> list[dict]:
        """Per stage: the mask of the layer whose attention it runs (stage l: layer l-1) and the RoPE
        tables of the layer whose q/k it projects (stage l: layer l)."""
        cfg, L = self.cfg, self.fam.n_stages(self.cfg) - 1
        sliding = [getattr(cfg, "layer_sliding", lambda i: False)(i) for i in range(L)]
        masks = {w: self._mask(S, T, p0, n, w) for w in {cfg.sliding_window if s else None for s in sliding}}
        tables: dict = {}
        feeds = []
        for l in range(L + 1):
            f = {}
            if l >= 1:
                f["mask"] = masks[cfg.sliding_window if sliding[l - 1] else None]
            if l < L and self.fam.USES_ROPE:
                rope = cfg.layer_rope(l)
                if rope not in tables:
                    cos, sin = self.fam.rope_tables(cfg, np.arange(p0, p0 + S), l)
                    tables[rope] = {"cos": cos.astype(np.float16), "sin": sin.astype(np.float16)}
                f.update(tables[rope])
            feeds.append(f)
        return feeds

    def _split(self, out: dict):
        if "qkv" in out:
            d, kv = self.cfg.d_model, self.cfg.kv_dim
            qkv = out["qkv"]
            return qkv[:, :d], qkv[0, d:d + kv, 0], qkv[0, d + kv:, 0]
        return out["q"], out["k"][0, :, 0], out["v"][0, :, 0]

    def _block(self, ids: Sequence[int], S: int) -> np.ndarray:
        """Runs ``ids`` (at most S) at positions pos.. through the set (S, T); returns h [d, n] float32."""
        cfg, T, p0, n = self.cfg, self.T, self.pos, len(ids)
        if p0 + n > T:
            raise InputError(f"internal: {p0 + n} positions exceed the cache bucket {T}")
        key = (S, T)
        stages = self.program_set(S, T)
        self._sync(key, stages)
        x = np.zeros((1, cfg.d_model, 1, S), np.float16)
        e = self.fam.embed(cfg, self.w, ids, p0)
        x[0, :, 0, :n] = e * np.float32(self.residual_scale) if self.residual_scale != 1.0 else e
        feeds = self._layer_inputs(S, T, p0, n)
        out = stages[0].run({"x": x, **feeds[0]})
        resid = x
        L = len(stages) - 1
        for l in range(1, L + 1):
            q, k, v = self._split(out)
            self.k_host[l - 1, :, p0:p0 + n] = k[:, :n]
            self.v_host[l - 1, :, p0:p0 + n] = v[:, :n]
            c = stages[l].cache
            c["k_cache"][:, p0:p0 + n] = k[:, :n]
            c["v_cache"][:, p0:p0 + n] = v[:, :n]
            out = stages[l].run({"x": resid, "q_attn": q, **feeds[l]})
            if l < L:
                resid = out["x_out"]
        self.pos = p0 + n
        self._synced[key] = self.pos
        return out["h"]

    def _logits(self, h: np.ndarray, cols: slice) -> np.ndarray:
        """h [1, d, 1, S] fp16 -> logits [n, V] float32 for the selected columns."""
        if self.classifier == "device":
            S = h.shape[3]
            parts = [st.run({"h": h})["logits"][0, :, 0, cols] for _, _, st in self._classifier_set(S)]
            return self._softcap(np.concatenate(parts, axis=0).T.astype(np.float32))
        if self._wcls is None:
            self._wcls = _classifier_panels(self.fam.classifier_weight(self.cfg, self.w))
        hh = np.ascontiguousarray(h[0, :, 0, cols], dtype=np.float16)[None]           # [1, d, n]
        z = _native.gemm_f16(self._wcls, hh, trans_a=True, f32_out=True)               # [V/16, 16, n]
        return self._softcap(z.reshape(-1, hh.shape[2])[:self.cfg.vocab_size].T)

    def _softcap(self, z: np.ndarray) -> np.ndarray:
        """Final logit soft-capping (Gemma): ``cap * tanh(z / cap)``, on the host in float32."""
        cap = getattr(self.cfg, "final_softcap", None)
        if not cap:
            return z
        return (np.tanh(z / np.float32(cap)) * np.float32(cap)).astype(np.float32)

    def _grow(self, n: int) -> None:
        if n > self.T:
            self.T = self.ctx_bucket(n)
        self._host_capacity(self.T)

    def prefill(self, ids: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Appends ``ids`` to the cache; returns the logits of the last position ``[V]`` (or of every
        position, ``[n, V]``, with ``all_logits``)."""
        ids = [int(t) for t in ids]
        if not ids:
            raise InputError("prefill needs at least one token")
        self._check_ids(ids)
        self._grow(self.pos + len(ids))
        S = self._prefill_S(len(ids), self.T)
        outs = []
        for c0 in range(0, len(ids), S):
            chunk = ids[c0:c0 + S]
            h = self._block(chunk, S)
            last = c0 + S >= len(ids)
            if all_logits:
                outs.append(self._logits(h, slice(0, len(chunk))))
            elif last:
                outs.append(self._logits(h, slice(len(chunk) - 1, len(chunk))))
        logits = np.concatenate(outs, axis=0)
        return logits if all_logits else logits[-1]

    def step(self, token: int) -> np.ndarray:
        """Appends one token (decode: S = 16, token in column 0); returns its logits ``[V]``."""
        self._check_ids([token])
        self._grow(self.pos + 1)
        h = self._block([int(token)], DECODE_S)
        return self._logits(h, slice(0, 1))[0]

    def _check_ids(self, ids) -> None:
        V = self.cfg.vocab_size
        bad = [t for t in ids if not 0 <= int(t) < V]
        if bad:
            raise InputError(f"token id(s) {bad[:5]} outside the vocabulary [0, {V})")
        if self.pos + len(ids) > self.cfg.n_ctx:
            raise InputError(f"{self.pos + len(ids)} tokens exceed the model's context of {self.cfg.n_ctx}")


# --------------------------------------------------------------------------------------- sampling
@dataclass
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0          # 0 = greedy
    top_k: int = 0                    # 0 = off
    top_p: float = 1.0                # 1 = off
    repetition_penalty: float = 1.0   # 1 = off (HF/CTRL: positive logits / p, negative * p)
    seed: int | None = None
    stop_tokens: Iterable[int] | None = None   # None = the model's end-of-text token(s)

    def validate(self) -> None:
        if not isinstance(self.max_tokens, (int, np.integer)) or self.max_tokens < 0:
            raise InputError(f"max_tokens must be a non-negative integer, got {self.max_tokens!r}")
        if not self.temperature >= 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise InputError(f"top_k must be >= 0, got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not self.repetition_penalty > 0:
            raise InputError(f"repetition_penalty must be > 0, got {self.repetition_penalty!r}")


def sample_next(logits: np.ndarray, params: SamplingParams, history: Sequence[int] = (),
                rng: np.random.Generator | None = None) -> int:
    """One token from ``logits [V]``: repetition penalty, then greedy (temperature 0) or
    temperature → top-k → top-p (nucleus) sampling."""
    z = np.array(logits, dtype=np.float64)
    if params.repetition_penalty != 1.0 and len(history):
        idx = np.unique(np.asarray(history, dtype=np.int64))
        vals = z[idx]
        z[idx] = np.where(vals > 0, vals / params.repetition_penalty, vals * params.repetition_penalty)
    if params.temperature == 0:
        return int(np.argmax(z))
    z = z / params.temperature
    if 0 < params.top_k < z.size:
        kth = np.partition(z, -params.top_k)[-params.top_k]
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max()
    p = np.exp(z)
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        keep = int(np.searchsorted(cum, params.top_p)) + 1      # smallest prefix reaching top_p
        mask = np.zeros_like(p, dtype=bool)
        mask[order[:keep]] = True
        p = np.where(mask, p, 0.0)
        p /= p.sum()
    rng = rng or np.random.default_rng()
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), p.size - 1))


# ------------------------------------------------------------------------------------ generation
class Token(tuple):
    """A generated token: ``id`` and the text it completes (may be "" while a UTF-8 sequence is open)."""
    __slots__ = ()

    def __new__(cls, id: int, text: str):  # noqa: A002
        return tuple.__new__(cls, (id, text))

    id = property(lambda self: self[0])
    text = property(lambda self: self[1])

    def __repr__(self) -> str:
        return f"Token(id={self[0]}, text={self[1]!r})"


@dataclass
class Generation:
    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    stop_reason: str = ""               # "stop_token" | "max_tokens" | "context"
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_steps: int = 0
    compile_seconds: float = 0.0
    logits: list = field(default_factory=list, repr=False)   # with keep_logits=True

    @property
    def prefill_tok_s(self) -> float:
        return len(self.prompt_tokens) / self.prefill_seconds if self.prefill_seconds > 0 else float("nan")

    @property
    def decode_tok_s(self) -> float:
        return self.decode_steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")


class _Detok:
    """Incremental detokenisation that is exact for byte-level and SentencePiece vocabularies: decodes
    a short context window plus the new ids and emits the new suffix, holding back open UTF-8."""

    def __init__(self, tok, context: Sequence[int]):
        self.tok = tok
        self.ctx = list(context[-4:])
        self.base = tok.decode(self.ctx) if tok else ""
        self.ids: list[int] = []
        self.emitted = ""

    def push(self, t: int) -> str:
        if self.tok is None:
            return ""
        self.ids.append(int(t))
        full = self.tok.decode(self.ctx + self.ids)
        text = full[len(self.base):] if full.startswith(self.base) else full
        if text.endswith("\ufffd"):
            return ""
        new = text[len(self.emitted):] if text.startswith(self.emitted) else text
        self.emitted = text
        if len(self.ids) >= 32:
            self.ctx = (self.ctx + self.ids)[-4:]
            self.base = self.tok.decode(self.ctx)
            self.ids, self.emitted = [], ""
        return new


    def flush(self) -> str:
        """Text held back at the end (an unfinished UTF-8 sequence, rendered as U+FFFD)."""
        if self.tok is None or not self.ids:
            return ""
        full = self.tok.decode(self.ctx + self.ids)
        text = full[len(self.base):] if full.startswith(self.base) else full
        return text[len(self.emitted):] if text.startswith(self.emitted) else ""


class TokenStream:
    """Iterator of :class:`Token`; ``.result`` (a :class:`Generation`) is complete when it is exhausted."""

    def __init__(self, model: "Model", prompt_ids: list[int], params: SamplingParams, keep_logits: bool = False):
        self.model, self.params = model, params
        self.result = Generation("", [], prompt_ids)
        self._keep = keep_logits
        self._it = self._run()

    def __iter__(self) -> "TokenStream":
        return self

    def __next__(self) -> Token:
        return next(self._it)

    def _run(self) -> Iterator[Token]:
        m, p, r = self.model, self.params, self.result
        eng = m.engine
        ids = r.prompt_tokens
        n_ctx = m.config.n_ctx
        total = min(n_ctx, len(ids) + max(p.max_tokens, 1))
        c0 = eng.compile_seconds
        eng.prepare(len(ids), total)
        eng.reset(total)
        stops = set(m.stop_tokens if p.stop_tokens is None else (int(t) for t in p.stop_tokens))
        rng = np.random.default_rng(p.seed)
        detok = _Detok(m.tokenizer, ids)
        history = list(ids)
        t0 = time.perf_counter()
        logits = eng.prefill(ids)
        r.prefill_seconds = time.perf_counter() - t0
        r.compile_seconds = eng.compile_seconds - c0
        r.stop_reason = "max_tokens"
        pieces = []
        t_dec = 0.0
        while len(r.tokens) < p.max_tokens:
            if self._keep:
                r.logits.append(logits)
            t = sample_next(logits, p, history, rng)
            r.tokens.append(t)
            history.append(t)
            if t in stops:
                r.stop_reason = "stop_token"
                break
            text = detok.push(t)
            pieces.append(text)
            r.text = "".join(pieces)
            yield Token(t, text)
            if len(r.tokens) >= p.max_tokens:
                break
            if eng.pos >= n_ctx:
                r.stop_reason = "context"
                break
            t1 = time.perf_counter()
            c1 = eng.compile_seconds
            logits = eng.step(t)
            t_dec += time.perf_counter() - t1 - (eng.compile_seconds - c1)
            r.compile_seconds += eng.compile_seconds - c1
            r.decode_steps += 1
            r.decode_seconds = t_dec
        pieces.append(detok.flush())
        r.text = "".join(pieces)


class Model:
    """A loaded language model on ANE programs.

    >>> m = orion.models.load("stories260K.bin")
    >>> for tok in m.stream([1], max_tokens=20): print(tok.id)
    """

    def __init__(self, config, weights: dict, tokenizer=None, *, device: str = "auto", profile=None,
                 name: str | None = None, stop_tokens: Iterable[int] | None = None, add_bos: bool | None = None,
                 **engine_options):
        self.config, self.weights, self.tokenizer = config, weights, tokenizer
        self.name = name or config.family
        self.device, self.profile = device, profile
        if tokenizer is not None and getattr(tokenizer, "vocab_size", config.vocab_size) > config.vocab_size:
            raise ModelFormatError(f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary is "
                                   f"{config.vocab_size}")
        if stop_tokens is None:
            stop_tokens = getattr(config, "eos_ids", None) or ([config.eos_id] if config.eos_id is not None else [])
        self.stop_tokens = [int(t) for t in stop_tokens]
        self.add_bos = (config.family == "llama") if add_bos is None else add_bos
        self._engine_options = engine_options
        self._engine: Engine | None = None

    def __repr__(self) -> str:
        c = self.config
        return (f"<orion.models.Model {self.name}: {c.family} d={c.d_model} L={c.n_layers} H={c.n_heads} "
                f"V={c.vocab_size} ctx={c.n_ctx} tokenizer={type(self.tokenizer).__name__ if self.tokenizer else None}>")

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self.config, self.weights, device=self.device, profile=self.profile,
                                  **self._engine_options)
            if getattr(self, "_lora_slots", None) is not None:      # adapter inputs survive release()
                self._engine.graph_options["lora"] = self._lora_slots
        return self._engine

    def release(self) -> None:
        if self._engine is not None:
            self._engine.release()
            self._engine = None

    # -- LoRA ------------------------------------------------------------------------------------
    def set_adapter(self, adapter, **options) -> None:
        """Generate with a LoRA ``adapter`` (an :class:`orion.lora.Adapter`, a PEFT folder path, or None for
        the base model) from the next evaluation on; swaps within the programs' adapter slots cost zero
        compiles and zero loads. Options (``rank``, ``targets``, ``check_base``): :func:`orion.lora.set_adapter`."""
        from ..lora import set_adapter
        set_adapter(self, adapter, **options)

    @property
    def adapter(self):
        """The current LoRA adapter (None: the base model)."""
        return getattr(self, "_lora_adapter", None)

    # -- text ------------------------------------------------------------------------------------
    def encode(self, prompt) -> list[int]:
        """Prompt (str or token ids) -> ids. Special tokens: a tokenizer.json decides through its
        post-processor, as transformers does (Llama 3 adds BOS, Qwen nothing); other tokenizers
        (SentencePiece, llama2.c) get the config's BOS when ``add_bos`` (Llama-family models)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InputError(f"model {self.name!r} has no tokenizer; pass token ids, or load it with "
                                 f"tokenizer=PATH")
            bos = self.config.bos_id
            if hasattr(self.tokenizer, "adds_special_tokens"):
                ids = list(self.tokenizer.encode(prompt, add_special_tokens=True))
            else:
                ids = list(self.tokenizer.encode(prompt))
                if self.add_bos and bos is not None:
                    ids = [bos] + ids
            if not ids and bos is not None:
                ids = [bos]
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise InputError("the prompt is empty (and the model has no BOS token to start from)")
        V = self.config.vocab_size
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise InputError(f"prompt token id(s) {bad[:5]} outside the vocabulary [0, {V})")
        if len(ids) > self.config.n_ctx:
            raise InputError(f"the prompt has {len(ids)} tokens but the context of {self.name!r} is "
                             f"{self.config.n_ctx}")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return " ".join(str(int(t)) for t in ids)
        return self.tokenizer.decode(list(ids))

    # -- generation ------------------------------------------------------------------------------
    def stream(self, prompt, max_tokens: int = 64, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
               repetition_penalty: float = 1.0, seed: int | None = None, stop_tokens: Iterable[int] | None = None,
               keep_logits: bool = False) -> TokenStream:
        """``for tok in model.stream("Once upon a time"): print(tok.text, end="")``"""
        params = SamplingParams(max_tokens, temperature, top_k, top_p, repetition_penalty, seed,
                                None if stop_tokens is None else list(stop_tokens))
        params.validate()
        return TokenStream(self, self.encode(prompt), params, keep_logits)

    def generate(self, prompt, **kw) -> Generation:
        """Same options as :meth:`stream`; returns the finished :class:`Generation`."""
        s = self.stream(prompt, **kw)
        for _ in s:
            pass
        return s.result

    def chat(self, messages, *, add_generation_prompt: bool = True, stream: bool = False,
             template_kwargs: dict | None = None, **generate_kw):
        """Answers ``messages`` (``[{"role": "user", "content": "Hi"}, ...]``) through the tokenizer's chat
        template (rendered as transformers renders it, tokenized without added special tokens) and
        stops at end-of-turn: the model's stop tokens, the tokenizer's eos and the token the template
        ends an answer with, unless ``stop_tokens`` is given. Options as :meth:`stream`; returns a
        :class:`Generation` (``stream=True``: the :class:`TokenStream`). ``template_kwargs``: extra
        template variables (e.g. enable_thinking)."""
        from .tokenizers import chat_prompt_ids, end_of_turn_ids
        ids = chat_prompt_ids(self.tokenizer, messages, add_generation_prompt, **(template_kwargs or {}))
        if generate_kw.get("stop_tokens") is None:
            eos = getattr(self.tokenizer, "eos_id", None)
            stops = self.stop_tokens + ([eos] if eos is not None else []) + end_of_turn_ids(self.tokenizer)
            generate_kw["stop_tokens"] = list(dict.fromkeys(stops))
        s = self.stream(ids, **generate_kw)
        if not stream:
            for _ in s:
                pass
            return s.result
        return s

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits ``[n, V]`` of every position of ``ids`` (one prefill through the programs)."""
        ids = self.encode(list(ids))
        eng = self.engine
        eng.reset(len(ids))
        return eng.prefill(ids, all_logits=True)


# ------------------------------------------------------------------------------------------- load
def _search_dirs() -> list[str]:
    dirs = [d for d in os.environ.get("ORION_MODEL_PATH", "").split(os.pathsep) if d]
    from .loaders import cache_dir
    dirs += [os.path.join(cache_dir(), "models"), os.getcwd()]
    return dirs


def resolve_model_path(path_or_name: str) -> str:
    """A path as given; a bare name in $ORION_MODEL_PATH, ~/.cache/orion/models, the current folder; a
    Hub repo id (``Qwen/Qwen3-0.6B``) that is not a local path through :mod:`orion.models.hub`."""
    p = os.path.expanduser(os.fspath(path_or_name))
    if os.path.exists(p):
        return p
    if os.sep not in p and "/" not in p:
        for d in _search_dirs():
            for cand in (p, p + ".bin"):
                full = os.path.join(d, cand)
                if os.path.exists(full):
                    return full
    from .hub import is_repo_id, resolve_repo
    if is_repo_id(p):
        return resolve_repo(p)
    raise ModelFormatError(f"{path_or_name}: no such model file or folder (searched the path as given and "
                           f"$ORION_MODEL_PATH, ~/.cache/orion/models, the current folder; Hugging Face Hub names "
                           f"look like org/name)")


def load(path_or_name, *, tokenizer=None, device: str = "auto", profile=None, cache: str | None = None,
         use_cache: bool = True, **options) -> Model:
    """Loads a model: a Hugging Face folder (config.json + model.safetensors, GPT-2 or Llama) or a llama2.c
    ``.bin``; by path, by name (searched in $ORION_MODEL_PATH, ~/.cache/orion/models and the current
    folder) or by Hub repo id (``Qwen/Qwen3-0.6B``: the Hugging Face cache, else downloaded unless
    HF_HUB_OFFLINE). Weights are converted to fp16 once and cached (``cache``: folder, default ~/.cache/orion).
    ``tokenizer``: a tokenizer object or file path (default: found next to the checkpoint)."""
    from .loaders import load_weights
    from .tokenizers import find_tokenizer, load_tokenizer, stop_token_ids
    path = resolve_model_path(path_or_name)
    ck = load_weights(path, cache=cache, use_cache=use_cache)
    if isinstance(tokenizer, (str, os.PathLike)):
        tok = load_tokenizer(os.fspath(tokenizer), vocab_size=ck.config.vocab_size)
    elif tokenizer is None:
        tok = find_tokenizer(path, ck.config)
    else:
        tok = tokenizer
    # fewer tokens than embedding rows is normal (Qwen pads 151,665 to 151,936); more is a mismatch
    if tok is not None and tok.vocab_size > ck.config.vocab_size:
        raise ModelFormatError(f"tokenizer {getattr(tok, 'path', tok)!r} has {tok.vocab_size} tokens, the model "
                               f"{path} has only {ck.config.vocab_size}")
    name = os.path.basename(os.path.normpath(path))
    stop = options.pop("stop_tokens", None)
    if stop is None and ck.kind.startswith("llama2c"):
        stop = [1, 2]          # run.c stops at BOS (1), the separator its Stories data use; EOS (2) too
    elif stop is None:         # end-of-text and end-of-turn (<|eot_id|>, <|im_end|>, <end_of_turn>, <|end|>)
        stop = stop_token_ids(path, tok) or None
    return Model(ck.config, ck.weights, tok, device=device, profile=profile, name=name, stop_tokens=stop, **options)
