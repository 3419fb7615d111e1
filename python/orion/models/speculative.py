"""Speculative decoding: drafts from prompt lookup or from a smaller draft model, verified
by the target in one decode eval, exact for greedy decoding and for sampling.

One decode eval verifies up to 15 drafts: the last token and the drafts run as consecutive columns of
the 16-column decode program (causal mask, their own positions), giving the target's logits after
each. :func:`accept_drafts` keeps a prefix of the drafts and adds one token of the target's, by the
speculative-sampling rule (Leviathan et al. 2023, Chen et al. 2023) on the *sampling* distributions
(:func:`~orion.models.sampling.sampling_probs`: penalty, temperature, top-k, top-p). Greedy decoding
is the point-mass case: a draft is kept exactly when it is the target's argmax, and the token added is
the argmax, so the output equals plain greedy decoding token for token (the same column-local programs
over the same cache compute the logits). With sampling, every kept token is distributed as the
target's own sample given the tokens before it.

Drafts:

- prompt lookup (:func:`lookup_draft`): the tokens that followed an earlier occurrence of the longest
  recent n-gram; deterministic, so its distribution is a point mass on the proposal. The first eval
  takes :data:`LOOKUP_START` drafts; the length doubles (to 15) while all are kept, halves at a rejection.
- a draft :class:`~orion.models.Model` of the same vocabulary (:func:`check_draft_compatible`):
  proposes ``k`` tokens one decode step at a time, sampled from its own sampling distribution under
  the same parameters (greedy: its argmax).

Rejected drafts are rolled back by moving each cache position back (``Engine.rollback``): their K/V
columns are masked from then on and overwritten, no copies. The draft model's cache is kept a prefix
of the accepted text the same way; the tokens it has not seen (the target's own token, and the last
draft when all were kept) go into its next round's first eval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from .engine import DECODE_S
from .sampling import SamplingParams, draw, sample_next, sampling_probs
from .stream import Generation, _begin, _prefill, _timed

__all__ = ["SpeculativeGeneration", "accept_drafts", "check_draft_compatible", "generate_speculative",
           "lookup_draft"]

MAX_DRAFT = DECODE_S - 1      # the last token + 15 drafts fill one decode eval
PROBE = "Once upon a time, Lily said: \"Hello, world!\" 3.14 x_y <tag> naïve café 😀\n\tend."


@dataclass
class SpeculativeGeneration(Generation):
    """A :class:`Generation` with the speculation figures; ``decode_steps`` counts the target's evals
    (each verifies the drafts of one round)."""
    drafted: int = 0              # draft tokens proposed
    accepted: int = 0             # draft tokens kept
    draft_evals: int = 0          # evals of the draft model (prompt lookup: 0), its prefill not counted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_eval(self) -> float:
        """Tokens produced per target decode eval (plain decoding: 1)."""
        return (len(self.tokens) - 1) / self.decode_steps if self.decode_steps else float("nan")

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first per second of decode (target and draft evals): comparable with a plain
        generation's, whose decode steps make one token each."""
        return (len(self.tokens) - 1) / self.decode_seconds if self.decode_seconds > 0 else float("nan")


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


def accept_drafts(p: Callable[[int], np.ndarray], draft: Sequence[int], q: Sequence[np.ndarray] | None,
                  rng: np.random.Generator) -> list[int]:
    """The tokens one verification keeps: a prefix of ``draft`` and one token of the target's.

    ``p(i)``: the target's sampling distribution after the first ``i`` drafts (i = 0 .. len(draft));
    ``q[i]``: the distribution draft i was drawn from, None for deterministic drafts (point masses).
    Draft x is kept with probability min(1, p(x) / q(x)); the first one rejected is replaced by a draw
    from norm(max(0, p - q)) and ends the round; when all are kept, one more token is drawn from p.
    Each token returned is then distributed as a draw from p given the tokens before it."""
    out: list[int] = []
    for i, x in enumerate(draft):
        pi = p(i)
        qx = 1.0 if q is None else float(q[i][x])
        if pi[x] > 0 and (pi[x] >= qx or rng.random() * qx < pi[x]):
            out.append(int(x))
            continue
        if q is None:
            res = pi.copy()
            res[x] = 0.0
        else:
            res = np.maximum(pi - q[i], 0.0)
        # a residual of zero mass needs p == q, where the rejection above has probability zero
        out.append(draw(res if res.sum() > 0 else pi, rng))
        return out
    out.append(draw(p(len(draft)), rng))
    return out


def check_draft_compatible(target, draft) -> None:
    """:class:`InputError` unless ``draft`` can propose tokens for ``target``: a different Model object, the
    same vocabulary size and, when they have tokenizers (both or neither), the same number of tokens, the
    same ids for a probe text and the same text for every id."""
    if draft is target:
        raise InputError("the draft model is the target itself: load a second, smaller Model of the same "
                         "tokenizer as the draft (each needs its own KV cache)")
    vt, vd = target.config.vocab_size, draft.config.vocab_size
    if vt != vd:
        raise InputError(f"draft model {draft.name!r} has a vocabulary of {vd} tokens but the target "
                         f"{target.name!r} has {vt}: speculative decoding needs a draft of the same tokenizer")
    tt, td = target.tokenizer, draft.tokenizer
    if (tt is None) != (td is None):
        which, other = (target, draft) if tt is None else (draft, target)
        raise InputError(f"model {which.name!r} has no tokenizer and {other.name!r} has one, so their vocabularies "
                         f"cannot be compared: load {which.name!r} with tokenizer= the other's tokenizer file")
    if tt is None:
        return                  # token-id models: the vocabulary size is all there is to compare
    what = f"draft model {draft.name!r} and target {target.name!r}"
    fix = "speculative decoding needs a draft of the same tokenizer"
    nt, nd = getattr(tt, "vocab_size", None), getattr(td, "vocab_size", None)
    if nt != nd:
        raise InputError(f"{what} have tokenizers of {nd} and {nt} tokens: {fix}")
    a, b = list(tt.encode(PROBE)), list(td.encode(PROBE))
    if a != b:
        i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        raise InputError(f"{what} tokenize differently: the probe text {PROBE!r} gives {len(b)} vs {len(a)} ids, "
                         f"first difference at position {i} ({b[i:i + 4]} vs {a[i:i + 4]}); {fix}")
    ids = list(range(nt if nt is not None else vt))
    if tt.decode(ids) != td.decode(ids):      # special and rare tokens the probe does not reach
        i = next(j for j in ids if tt.decode([j]) != td.decode([j]))
        raise InputError(f"{what} tokenize differently: token id {i} is {td.decode([i])!r} vs {tt.decode([i])!r}; "
                         f"{fix}")


#: prompt-lookup drafts in the first eval: where a step streams the weights (a model of real size), up to
#: ~5 live columns cost what one does; a small model that fits in cache pays per column
LOOKUP_START = 4


class _LookupDrafter:
    """Prompt-lookup drafts: deterministic (point masses), nothing to keep in step. The draft length
    adapts: it doubles (up to 15) while every draft is accepted and halves (down to 1) at a rejection,
    so text that does not repeat costs little more than plain decoding."""

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self.k = LOOKUP_START

    def start(self, r, params) -> None:
        self.k = LOOKUP_START

    def propose(self, history, k, params, rng, r):
        return lookup_draft(history, min(k, self.k), self.max_ngram), None

    def keep(self, n: int, drafted: int, accepted: int) -> None:
        if drafted and accepted == drafted:
            self.k = min(MAX_DRAFT, 2 * self.k)
        elif accepted < drafted:
            self.k = max(1, self.k // 2)


class _ModelDrafter:
    """Drafts from a smaller model. Its cache always holds a prefix of the accepted tokens; the rest of
    them are its next round's first eval."""

    def __init__(self, model, k: int):
        self.model, self.k, self.eng = model, k, None

    def start(self, r, params) -> None:
        self.eng = self.model.engine
        _prefill(self.model, r, params)            # its prefill counts as prefill time of the generation

    def propose(self, history, k, params, rng, r):
        eng = self.eng
        k = min(k, self.k, self.model.config.n_ctx - len(history) + 1)     # the last draft is never cached
        if k <= 0:
            return [], None
        pending = history[eng.pos:]
        for i in range(0, len(pending), DECODE_S):
            logits = _timed(eng, r, eng.verify, pending[i:i + DECODE_S])[-1]
            r.draft_evals += 1
        draft: list[int] = []
        q: list[np.ndarray] = []
        for i in range(k):
            qi = sampling_probs(logits, params, list(history) + draft)
            draft.append(draw(qi, rng))
            q.append(qi)
            if i < k - 1:
                logits = _timed(eng, r, eng.step, draft[-1])
                r.draft_evals += 1
        return draft, q

    def keep(self, n: int, drafted: int, accepted: int) -> None:
        """The first ``n`` tokens of the text are accepted: forget the rejected drafts."""
        self.eng.rollback(min(self.eng.pos, n))


def generate_speculative(model, ids: list[int], params: SamplingParams, draft=None, draft_k: int = 4,
                         max_ngram: int = 3) -> SpeculativeGeneration:
    """Generation of ``ids`` with drafts from prompt lookup (``draft=None``) or from the draft model
    ``draft`` (``draft_k`` tokens per round); greedy: the tokens of ``model.generate``, sampling: its
    distribution."""
    if draft is not None:
        check_draft_compatible(model, draft)
        if not 1 <= draft_k <= MAX_DRAFT:
            raise InputError(f"draft_k must be in 1..{MAX_DRAFT} (one decode eval verifies the last token and "
                             f"the drafts), got {draft_k!r}")
        if len(ids) >= draft.config.n_ctx:
            raise InputError(f"the prompt has {len(ids)} tokens but the draft model {draft.name!r} has a context "
                             f"of {draft.config.n_ctx}: use a shorter prompt or a draft with a longer context")
        # both locks in one global order: two threads speculating with the roles swapped cannot each hold
        # one model and wait for the other
        first, second = sorted((model, draft), key=id)
        with first.exclusive(), second.exclusive():
            return _speculate(model, ids, params, _ModelDrafter(draft, draft_k))
    with model.exclusive():
        return _speculate(model, ids, params, _LookupDrafter(max_ngram))


def _speculate(model, ids: list[int], params: SamplingParams, drafter) -> SpeculativeGeneration:
    eng, n_ctx = model.engine, model.config.n_ctx
    r = SpeculativeGeneration("", [], list(ids))
    out, logits = _begin(model, r, params)
    drafter.start(r, params)
    rng = np.random.default_rng(params.seed)
    history = out.history
    queue = [sample_next(logits, params, history, rng)] if params.max_tokens > 0 else []
    while queue:
        t = queue.pop(0)                  # TokenStream's stop rule
        if out.take(t) is None or out.ends():
            break
        if queue:                         # verified tokens still to emit: their K/V are cached
            continue
        # one eval: t (not cached yet) + drafts, within the token budget and the context
        pos = eng.pos
        k = min(MAX_DRAFT, params.max_tokens - len(r.tokens) - 1, n_ctx - pos - 1)
        draft, q = drafter.propose(history, k, params, rng, r)
        z = _timed(eng, r, eng.verify, [t] + draft)
        got = accept_drafts(lambda j: sampling_probs(z[j], params, history + draft[:j]), draft, q, rng)
        a = len(got) - 1                  # drafts kept
        eng.rollback(pos + 1 + a)         # t and the kept drafts stay cached
        drafter.keep(len(history) + a, len(draft), a)
        r.decode_steps += 1
        r.drafted += len(draft)
        r.accepted += a
        queue = got
    out.finish()
    return r
