"""Batched generation: up to 16 sequences share each decode eval, column ``i`` carrying sequence ``i``.

Design:

* One decode program set ``(S = 16, T = R)`` with *region* caches, compiled once per ``R`` and kept on the
  engine (``Engine.batch_sets``): the caches hold one region of ``R`` positions per column (sequence
  ``i``'s keys in rows ``i * kv_heads ..`` of ``k_cache`` and ``v_cache [1, 16 * kv_heads, R, head_dim]``,
  its own positions from 0; position-major, so a new token is written as contiguous runs, and read in place
  by the attention matmuls, K transposed), and query column ``i`` attends only to region ``i``
  (``ops.region_attention``: the columns move to a batch axis of the attention matmuls), under a per-column
  additive mask ``[1, 1, 16, R]`` (its position, its sliding window). RoPE tables and position embeddings
  are per column.
* Exactness: ``R`` is the context bucket a single generation of the longest sequence uses, and every key
  keeps its index inside its row, so each column's scores, softmax and value sums are those of the same
  sequence alone (GEMM elements are one in-order fma chain over k; the softmax's sums give key j to lane
  j mod 16 whatever the row length; keys past a sequence's own bucket are masked and add exact zeros):
  each column is bit-identical to the same sequence generated alone (greedy: token for token; sampling:
  the same draws, same seed; the tests compare the logits bit for bit). The one thing that must match is the softmax *kind*: a non-power-of-two last axis is
  decomposed (C21), so sequences whose own bucket is a power of two and those whose bucket is not (a
  non-power-of-two ``n_ctx``) are batched apart.
* A prompt is prefilled alone, through the engine's own prefill (the very programs and cache a single
  generation uses), then its K/V columns are copied into its region.
* Continuous batching: when a sequence stops (its stop tokens, ``max_tokens``, the context), its column
  takes the next waiting prompt. Columns past the last busy one are not computed (``live_columns``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..ir.composites import MASK_VALUE
from .chain import shared_feeds
from .engine import DECODE_S
from .fp16_safety import Fp16RangeError
from .sampling import SamplingParams, sample_next
from .stages import LayerStage
from .stream import Generation, _Output, _prefill

__all__ = ["generate_batch", "BatchStats", "MAX_BATCH"]

MAX_BATCH = DECODE_S          # one sequence per decode column


@dataclass
class BatchStats:
    """Aggregate figures of one :func:`generate_batch` call."""
    sequences: int = 0
    generated: int = 0            # tokens, all sequences
    decode_evals: int = 0         # batched decode steps (one eval of every stage each)
    seconds: float = 0.0          # wall time, prefills and decode (compiles excluded)
    compile_seconds: float = 0.0
    columns_used: list = field(default_factory=list, repr=False)   # busy columns per decode step

    @property
    def tok_s(self) -> float:
        return self.generated / self.seconds if self.seconds > 0 else float("nan")


class _Seq:
    """One sequence in a column: its prompt, sampling state and Generation."""

    def __init__(self, index, ids, params: SamplingParams, model):
        self.index, self.params = index, params
        self.gen = Generation("", [], list(ids))
        self.out = _Output(model, self.gen, params)
        self.rng = np.random.default_rng(params.seed)
        self.pos = len(ids)           # the position the pending token goes to
        self.pending: int | None = None

    def consume(self, logits) -> bool:
        """Samples the next token from ``logits``; True while the sequence needs another step (a single
        generation's stop rule, :class:`~.stream._Output`)."""
        if len(self.gen.tokens) >= self.params.max_tokens:        # max_tokens=0: nothing to sample
            return self._finish()
        t = sample_next(logits, self.params, self.out.history, self.rng)
        if self.out.take(t) is None or self.out.ends():
            return self._finish()
        self.pending = t
        return True

    def _finish(self) -> bool:
        self.out.finish()
        self.pending = None
        return False


def _batch_stages(eng, R: int):
    """The region decode set (16, R) for batches, compiled once per R and LoRA slot layout; kept apart from
    the engine's own sets (their caches hold one sequence each). The current adapter is staged into it."""
    lora = eng.graph_options.get("lora")
    have = eng.batch_sets.get(R)
    if have is not None and have[0] is not lora:      # the adapter slots changed: other program inputs
        for s in have[1]:
            s.release()
        have = None
    if have is None:
        eng.ensure_budget(eng.set_cost(regions=True), f"generate_batch's region program set (R={R})")
        have = eng.batch_sets[R] = (lora, eng.stage_list(DECODE_S, R, regions=True))
    if lora is not None:
        lora.stage([cp for st in have[1] if not isinstance(st, LayerStage) for cp in st.programs])
        eng.refresh_layer_weights()
    return have[1]


class _Feeds:
    """The per-step program inputs of one batch: per-column masks ``[1, 1, 16, R]`` (column i sees its
    region up to pos[i], within its window) and RoPE tables of each column's position (looked up in
    tables computed once for positions 0..R-1: angles are per position, so the same values)."""

    def __init__(self, eng, R: int):
        cfg = eng.cfg
        self.eng, self.R = eng, R
        self.local = np.arange(R)[None, :]
        L = eng.fam.n_stages(cfg) - 1
        self.ropes = {}
        if eng.fam.USES_ROPE:
            for l in range(L):
                rope = cfg.layer_rope(l)
                if rope not in self.ropes:
                    cos, sin = eng.fam.rope_tables(cfg, np.arange(R), l)
                    self.ropes[rope] = (cos.astype(np.float16), sin.astype(np.float16))

    def __call__(self, pos: np.ndarray) -> list[dict]:
        S = DECODE_S

        def mask(window):
            seen = self.local <= pos[:, None]
            if window is not None:
                seen &= self.local > pos[:, None] - window
            return np.where(seen, np.float16(0.0), np.float16(MASK_VALUE)).reshape(1, 1, S, self.R)

        def rope(cfg, positions, layer):
            cos, sin = self.ropes[cfg.layer_rope(layer)]
            return cos[..., positions], sin[..., positions]

        # a finished column keeps its last position, which may be R: any table entry does for it
        at = np.minimum(pos, self.R - 1)
        return self.eng._layer_inputs(S, self.R, 0, S, positions=at, mask=mask, rope=rope)


def _regions(stages) -> list:
    """Per stage (None for stage 0): its caches as views of the program inputs, K and V ``[16, kv_heads,
    R, head_dim]`` (region i: sequence i)."""
    out = [None]
    for st in stages[1:]:
        k, v = st.cache["k_cache"], st.cache["v_cache"]
        out.append((k.reshape((DECODE_S, -1) + k.shape[1:]), v.reshape((DECODE_S, -1) + v.shape[1:])))
    return out


def _step(eng, stages, regions, feeds: _Feeds, cols: list[int], toks: list[int], pos: np.ndarray) -> np.ndarray:
    """One batched decode step: token toks[k] at position pos[cols[k]] in column cols[k]; returns the
    final hidden states h [1, d, 1, 16]."""
    cfg = eng.cfg
    live = max(cols) + 1                             # columns past the last busy one: not computed
    ci = np.asarray(cols)
    at = pos[ci]                                     # each new token's position in its column's region
    x = np.zeros((1, cfg.d_model, 1, DECODE_S), np.float16)
    e = eng.fam.embed(cfg, eng.w, toks, at)
    x[0, :, 0][:, ci] = e * np.float32(eng.residual_scale) if eng.residual_scale != 1.0 else e
    feed = feeds(pos)
    out = stages[0].run({"x": x, **feed[0]}, live=live)
    resid = x
    L = len(stages) - 1
    for l in range(1, L + 1):
        q, k, v = eng._split(out)                    # k, v [kv, 16]
        kr, vr = regions[l]
        n, h, hd = len(ci), kr.shape[1], kr.shape[3]
        kr[ci, :, at] = k[:, ci].T.reshape(n, h, hd)             # one indexed write per cache:
        vr[ci, :, at] = v[:, ci].T.reshape(n, h, hd)             # contiguous head_dim runs
        out = stages[l].run({"x": resid, "q_attn": q, **feed[l]}, live=live, unchanged=shared_feeds(stages, feed, l))
        resid = out["x_out"] if l < L else out["h"]
        if not np.isfinite(resid[0, :, 0, ci]).all():
            raise Fp16RangeError(
                f"layer {l - 1}: a value inside the batched programs left fp16's range; the prompts were "
                f"checked one by one, a generated token overflowed. Pass a smaller residual_scale=2**-k to "
                f"load() (now {eng.residual_scale:g}) or generate these prompts one at a time (re-planned "
                f"automatically)", layer=l - 1, scale=eng.residual_scale)
    return out["h"]


def _admit(model, regions, col: int, seq: _Seq) -> bool:
    """Prefills ``seq`` alone (a single generation's own start, :func:`~.stream._prefill`) and copies its
    K/V into region ``col``."""
    eng = model.engine
    logits = _prefill(model, seq.gen, seq.params)
    n = len(seq.gen.prompt_tokens)
    for l in range(1, len(regions)):
        kr, vr = regions[l]
        h, hd = kr.shape[1], kr.shape[3]
        kr[col, :, :n] = eng.k_host[l - 1, :, :n].reshape(h, hd, n).transpose(0, 2, 1)
        vr[col, :, :n] = eng.v_host[l - 1, :, :n].reshape(h, hd, n).transpose(0, 2, 1)
    return seq.consume(logits)


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def generate_batch(model, prompts, params: list[SamplingParams], *, max_batch: int = MAX_BATCH,
                   stats: BatchStats | None = None) -> list[Generation]:
    """Generates every prompt (token ids) with its own :class:`SamplingParams`, up to ``max_batch``
    sequences per decode eval; returns one :class:`Generation` per prompt, in order."""
    if not 1 <= int(max_batch) <= MAX_BATCH:
        raise InputError(f"max_batch must be in [1, {MAX_BATCH}] (one sequence per decode column), got {max_batch!r}")
    if len(params) != len(prompts):
        raise InputError(f"{len(prompts)} prompts but {len(params)} sampling parameter sets")
    eng, cfg = model.engine, model.config
    n_ctx = cfg.n_ctx
    st = stats if stats is not None else BatchStats()
    st.sequences = len(prompts)
    if not prompts:
        return []
    seqs: list[_Seq] = []
    for i, (ids, p) in enumerate(zip(prompts, params)):
        seqs.append(_Seq(i, ids, p, model))
    # each sequence's context bucket alone; batched apart by softmax kind (see the module notes)
    buckets = [eng.ctx_bucket(min(n_ctx, len(ids) + max(p.max_tokens, 1))) for ids, p in zip(prompts, params)]
    groups: dict[bool, list[int]] = {}
    for i, T in enumerate(buckets):
        groups.setdefault(_pow2(T), []).append(i)
    t_start = time.perf_counter()
    st.compile_seconds = 0.0
    for members in groups.values():
        _run(model, seqs, members, max(buckets[i] for i in members), int(max_batch), st)
    st.seconds = time.perf_counter() - t_start - st.compile_seconds
    st.generated = sum(len(s.gen.tokens) for s in seqs)
    return [s.gen for s in seqs]


def _run(model, seqs: list[_Seq], members: list[int], R: int, max_batch: int, st: BatchStats) -> None:
    """Generates ``seqs[members]`` through the region set of length ``R``, continuous batching."""
    eng = model.engine
    c0 = eng.compile_seconds
    stages = _batch_stages(eng, R)
    st.compile_seconds += eng.compile_seconds - c0
    feeds = _Feeds(eng, R)
    regions = _regions(stages)
    waiting = deque(members)
    cols: list[_Seq | None] = [None] * max_batch
    pos = np.zeros(DECODE_S, np.int64)

    def fill(c: int) -> None:
        while waiting:
            s = seqs[waiting.popleft()]
            c1 = eng.compile_seconds
            busy = _admit(model, regions, c, s)
            st.compile_seconds += eng.compile_seconds - c1
            if busy:
                cols[c] = s
                pos[c] = s.pos
                return
        cols[c] = None

    for c in range(len(cols)):
        fill(c)
    while any(cols):
        busy = [c for c, s in enumerate(cols) if s is not None]
        t1 = time.perf_counter()
        c1 = eng.compile_seconds
        h = _step(eng, stages, regions, feeds, busy, [cols[c].pending for c in busy], pos)
        logits = eng._logits(h, slice(0, busy[-1] + 1))             # [columns, V]: one shape per width
        dt = time.perf_counter() - t1 - (eng.compile_seconds - c1)
        st.decode_evals += 1
        st.columns_used.append(len(busy))
        for c in busy:
            s = cols[c]
            s.pos += 1
            pos[c] = s.pos
            s.gen.decode_steps += 1
            s.gen.decode_seconds += dt
            if not s.consume(logits[c]):
                fill(c)
