"""Speculative decoding with prompt lookup (issue 15 §3), exact for greedy decoding.

Drafts come from the text itself: the longest recent n-gram (n = 3, 2, 1) of the prompt + generated
tokens that occurred before is looked up, and the tokens that followed it are proposed (at most 15).
One decode eval verifies them all: the last token and the drafts run as consecutive columns of the
16-column decode program (causal mask, their own positions), giving the target's logits after each;
the longest prefix of drafts that the target's own choice confirms is kept, plus the target's token
after it. Every kept token is the target's greedy choice at its position, computed by the same
column-local programs over the same cache, so the output equals plain greedy decoding token for token.
Rejected drafts are rolled back by moving the cache position back (``Engine.rollback``): their K/V
columns are masked from then on and overwritten, no copies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .engine import DECODE_S
from .sampling import SamplingParams, sample_next
from .stream import Generation, _Detok

__all__ = ["SpeculativeGeneration", "generate_prompt_lookup", "lookup_draft"]

MAX_DRAFT = DECODE_S - 1      # the last token + 15 drafts fill one decode eval


@dataclass
class SpeculativeGeneration(Generation):
    """A :class:`Generation` with the speculation figures."""
    drafted: int = 0              # draft tokens proposed
    accepted: int = 0             # draft tokens kept

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_eval(self) -> float:
        """Tokens produced per decode eval (plain decoding: 1)."""
        return (len(self.tokens) - 1) / self.decode_steps if self.decode_steps else float("nan")


def lookup_draft(history, k: int, max_ngram: int = 3) -> list[int]:
    """Up to ``k`` tokens that followed an earlier occurrence of the longest suffix n-gram (n = max_ngram
    .. 1) of ``history``: the latest one with k tokens after it, else the earliest; [] when none recurs."""
    if k <= 0:
        return []
    h = np.asarray(history, dtype=np.int64)
    for n in range(min(max_ngram, len(h) - 1), 0, -1):
        tail = h[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(h[:-1], n)       # starts 0 .. len-1-n
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:           # the latest occurrence followed by k tokens, else the one followed by most
            full = hits[hits + n + k <= len(h)]
            i = int(full[-1] if full.size else hits[0]) + n
            return [int(t) for t in h[i:i + k]]
    return []


def generate_prompt_lookup(model, ids: list[int], params: SamplingParams, max_ngram: int = 3) -> SpeculativeGeneration:
    """Greedy generation of ``ids`` with prompt-lookup drafts; equals ``model.generate`` token for token."""
    if params.temperature != 0:
        raise InputError("speculative='prompt-lookup' is exact for greedy decoding only: use temperature=0")
    eng, n_ctx = model.engine, model.config.n_ctx
    r = SpeculativeGeneration("", [], list(ids))
    total = min(n_ctx, len(ids) + max(params.max_tokens, 1))
    c0 = eng.compile_seconds
    eng.prepare(len(ids), total)
    eng.reset(total)
    stops = set(model.stop_tokens if params.stop_tokens is None else (int(t) for t in params.stop_tokens))
    detok = _Detok(model.tokenizer, ids)
    history = list(ids)
    t0 = time.perf_counter()
    logits = eng.prefill(ids)
    r.prefill_seconds = time.perf_counter() - t0
    r.compile_seconds = eng.compile_seconds - c0
    r.stop_reason = "max_tokens"
    pieces: list[str] = []
    queue = [sample_next(logits, params, history)] if params.max_tokens > 0 else []
    t_dec = 0.0
    while queue:
        t = queue.pop(0)                  # the same checks, in the same order, as TokenStream
        r.tokens.append(t)
        history.append(t)
        if t in stops:
            r.stop_reason = "stop_token"
            break
        pieces.append(detok.push(t))
        if len(r.tokens) >= params.max_tokens:
            break
        if len(ids) + len(r.tokens) - 1 >= n_ctx:
            r.stop_reason = "context"
            break
        if queue:                         # verified tokens still to emit: their K/V are cached
            continue
        # one eval: t (not cached yet) + drafts, within the token budget and the context
        pos = eng.pos
        k = min(MAX_DRAFT, params.max_tokens - len(r.tokens) - 1, n_ctx - pos - 1)
        draft = lookup_draft(history, k, max_ngram)
        t1 = time.perf_counter()
        c1 = eng.compile_seconds
        z = eng.verify([t] + draft)
        got = []
        for j in range(len(draft) + 1):   # the target's own choice after t, d1, .., dj
            g = sample_next(z[j], params, history + draft[:j])
            got.append(g)
            if j == len(draft) or draft[j] != g:
                break
        a = len(got) - 1                  # drafts confirmed
        eng.rollback(pos + 1 + a)         # t and the confirmed drafts stay cached
        t_dec += time.perf_counter() - t1 - (eng.compile_seconds - c1)
        r.compile_seconds += eng.compile_seconds - c1
        r.decode_steps += 1
        r.decode_seconds = t_dec
        r.drafted += len(draft)
        r.accepted += a
        queue = got
    pieces.append(detok.flush())
    r.text = "".join(pieces)
    return r
