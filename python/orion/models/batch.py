"""Batched generation: up to 16 sequences share each decode eval, column ``i`` carrying sequence ``i``.

Design (issue 15 §2):

* One decode program set ``(S = 16, T = 16 R)``, compiled once per ``R`` and kept on the engine
  (``Engine.batch_sets``): the KV cache holds one region of ``R`` positions per column (sequence ``i`` at
  ``[i R, i R + len)``, its own positions from 0), and a per-column additive mask lets query column ``i``
  see only its region up to its position (and its sliding window); RoPE tables and position embeddings
  are per column. ``R`` is a multiple of 64, so a sequence's keys keep the offsets, modulo every lane
  width, that they have alone: the masked keys add exact zeros and each column is bit-identical to the
  same sequence generated alone (greedy: token for token; sampling: the same draws, same seed).
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
from .engine import DECODE_S
from .sampling import SamplingParams, sample_next
from .stream import Generation, _Detok

__all__ = ["generate_batch", "BatchStats", "MAX_BATCH"]

MAX_BATCH = DECODE_S          # one sequence per decode column
_ALIGN = 64                   # region length granule: keeps each key's lane position as when alone


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

    def __init__(self, index, ids, params: SamplingParams, stops, tok):
        self.index, self.params = index, params
        self.gen = Generation("", [], list(ids))
        self.stops = stops
        self.rng = np.random.default_rng(params.seed)
        self.history = list(ids)
        self.detok = _Detok(tok, ids)
        self.pieces: list[str] = []
        self.pos = len(ids)           # the position the pending token goes to
        self.pending: int | None = None

    def consume(self, logits, n_ctx: int) -> bool:
        """Samples the next token from ``logits``; True while the sequence needs another step (the same
        decisions, in the same order, as a single generation's TokenStream)."""
        g, p = self.gen, self.params
        if len(g.tokens) >= p.max_tokens:
            return self._finish("max_tokens")
        t = sample_next(logits, p, self.history, self.rng)
        g.tokens.append(t)
        self.history.append(t)
        if t in self.stops:
            return self._finish("stop_token")
        self.pieces.append(self.detok.push(t))
        if len(g.tokens) >= p.max_tokens:
            return self._finish("max_tokens")
        if self.pos >= n_ctx:
            return self._finish("context")
        self.pending = t
        return True

    def _finish(self, reason: str) -> bool:
        self.gen.stop_reason = reason
        self.pieces.append(self.detok.flush())
        self.gen.text = "".join(self.pieces)
        self.pending = None
        return False


def _batch_stages(eng, R: int):
    """The decode set (16, 16 R) for batches, compiled once per R and LoRA slot layout; kept apart from the
    engine's own sets (their caches hold one sequence each). The current adapter is staged into it."""
    lora = eng.graph_options.get("lora")
    have = eng.batch_sets.get(R)
    if have is not None and have[0] is not lora:      # the adapter slots changed: other program inputs
        for s in have[1]:
            s.release()
        have = None
    if have is None:
        stages = []
        try:
            for i in range(eng.fam.n_stages(eng.cfg)):
                stages.append(eng._stage(i, DECODE_S, DECODE_S * R))
        except BaseException:
            for s in stages:
                s.release()
            raise
        have = eng.batch_sets[R] = (lora, stages)
    if lora is not None:
        lora.stage([cp for st in have[1] for cp in st.programs])
    return have[1]


def _feeds(eng, R: int, pos: np.ndarray) -> list[dict]:
    """Per stage: the per-column masks (column i sees region i up to pos[i], within its window) and the
    RoPE tables of each column's position."""
    S = DECODE_S
    local = np.arange(R)[None, :]

    def mask(window):
        seen = local <= pos[:, None]
        if window is not None:
            seen &= local > pos[:, None] - window
        m = np.full((S, S, R), MASK_VALUE, np.float16)
        m[np.arange(S), np.arange(S)] = np.where(seen, 0.0, MASK_VALUE)
        return m.reshape(1, 1, S, S * R)

    return eng._layer_inputs(S, S * R, 0, S, positions=pos, mask=mask)


def _step(eng, stages, R: int, cols: list[int], toks: list[int], pos: np.ndarray) -> np.ndarray:
    """One batched decode step: token toks[k] at position pos[cols[k]] in column cols[k]; returns the
    final hidden states h [1, d, 1, 16]."""
    cfg = eng.cfg
    live = max(cols) + 1                             # columns past the last busy one: not computed
    x = np.zeros((1, cfg.d_model, 1, DECODE_S), np.float16)
    for c, t in zip(cols, toks):
        e = eng.fam.embed(cfg, eng.w, [t], int(pos[c]))[:, 0]
        x[0, :, 0, c] = e * np.float32(eng.residual_scale) if eng.residual_scale != 1.0 else e
    feeds = _feeds(eng, R, pos)
    out = stages[0].run({"x": x, **feeds[0]}, live=live)
    resid = x
    at = np.asarray(cols) * R + pos[cols]            # cache position of each new token
    L = len(stages) - 1
    for l in range(1, L + 1):
        q, k, v = eng._split(out)
        c = stages[l].cache
        c["k_cache"][:, at] = k[:, cols]
        c["v_cache"][:, at] = v[:, cols]
        out = stages[l].run({"x": resid, "q_attn": q, **feeds[l]}, live=live)
        if l < L:
            resid = out["x_out"]
    return out["h"]


def _admit(eng, stages, R: int, col: int, seq: _Seq, n_ctx: int) -> bool:
    """Prefills ``seq`` alone (the engine's own path) and copies its K/V into region ``col``."""
    ids, p = seq.gen.prompt_tokens, seq.params
    total = min(n_ctx, len(ids) + max(p.max_tokens, 1))
    c0 = eng.compile_seconds
    eng.prepare(len(ids), total)
    eng.reset(total)
    t0 = time.perf_counter()
    logits = eng.prefill(ids)
    seq.gen.prefill_seconds = time.perf_counter() - t0
    seq.gen.compile_seconds = eng.compile_seconds - c0
    n = len(ids)
    for l in range(1, len(stages)):
        c = stages[l].cache
        c["k_cache"][:, col * R:col * R + n] = eng.k_host[l - 1, :, :n]
        c["v_cache"][:, col * R:col * R + n] = eng.v_host[l - 1, :, :n]
    return seq.consume(logits, n_ctx)


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
    totals = [min(n_ctx, len(ids) + max(p.max_tokens, 1)) for ids, p in zip(prompts, params)]
    R = -(-max(totals) // _ALIGN) * _ALIGN
    c0 = eng.compile_seconds
    stages = _batch_stages(eng, R)
    st.compile_seconds = eng.compile_seconds - c0
    waiting = deque(range(len(prompts)))
    seqs: list[_Seq] = []
    for i, (ids, p) in enumerate(zip(prompts, params)):
        stops = set(model.stop_tokens if p.stop_tokens is None else (int(t) for t in p.stop_tokens))
        seqs.append(_Seq(i, ids, p, stops, model.tokenizer))
    cols: list[_Seq | None] = [None] * int(max_batch)
    pos = np.zeros(DECODE_S, np.int64)
    t_start = time.perf_counter()

    def fill(c: int) -> None:
        while waiting:
            s = seqs[waiting.popleft()]
            c1 = eng.compile_seconds
            busy = _admit(eng, stages, R, c, s, n_ctx)
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
        h = _step(eng, stages, R, busy, [cols[c].pending for c in busy], pos)
        logits = eng._logits(h, slice(0, busy[-1] + 1))[busy]       # one classifier shape per width
        dt = time.perf_counter() - t1 - (eng.compile_seconds - c1)
        st.decode_evals += 1
        st.columns_used.append(len(busy))
        for k, c in enumerate(busy):
            s = cols[c]
            s.pos += 1
            pos[c] = s.pos
            s.gen.decode_steps += 1
            s.gen.decode_seconds += dt
            if not s.consume(logits[k], n_ctx):
                fill(c)
    st.seconds = time.perf_counter() - t_start - st.compile_seconds
    st.generated = sum(len(s.gen.tokens) for s in seqs)
    for s in seqs:
        s.gen.text = "".join(s.pieces)
    return [s.gen for s in seqs]
