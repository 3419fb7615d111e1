"""Generated text as it comes: :class:`Token`, the finished :class:`Generation`, incremental
detokenisation and the :class:`TokenStream` iterator that drives the engine.

``model`` below is an :class:`orion.models.Model` (its config, engine, tokenizer and stop tokens), left
unannotated: Model's methods call into this module, which stays below it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from .sampling import SamplingParams, sample_next

__all__ = ["Token", "Generation", "TokenStream"]


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

    def __str__(self) -> str:
        """The generated text (``print(model.generate(...))`` prints what the model wrote; ``repr`` has the rest)."""
        return self.text

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


class _Output:
    """The one stop rule of plain, speculative and batched generation, applied to each token as it is chosen:
    it joins ``gen.tokens`` and the sampling history; a stop token ends the generation and is not decoded;
    any other is, and the generation then ends when ``max_tokens`` are out or the context has no room
    left for the token. ``gen.stop_reason`` says which ("max_tokens" unless another applies)."""

    def __init__(self, model, gen: Generation, params: SamplingParams):
        self.gen, self.max_tokens, self.n_ctx = gen, params.max_tokens, model.config.n_ctx
        self.stops = set(model.stop_tokens if params.stop_tokens is None else (int(t) for t in params.stop_tokens))
        self.history = list(gen.prompt_tokens)
        self.detok = _Detok(model.tokenizer, gen.prompt_tokens)
        self.pieces: list[str] = []
        gen.stop_reason = "max_tokens"

    def take(self, t: int) -> str | None:
        """Token ``t`` chosen: the text it completes, or None when it is a stop token (the generation ended)."""
        self.gen.tokens.append(t)
        self.history.append(t)
        if t in self.stops:
            self.gen.stop_reason = "stop_token"
            return None
        text = self.detok.push(t)
        self.pieces.append(text)
        return text

    def ends(self) -> bool:
        """After a token :meth:`take` decoded: whether the generation ends with it."""
        g = self.gen
        if len(g.tokens) >= self.max_tokens:
            return True
        if len(g.prompt_tokens) + len(g.tokens) - 1 >= self.n_ctx:     # the cache positions before the token
            g.stop_reason = "context"
            return True
        return False

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def finish(self) -> None:
        """The generation is over: the text held back (an open UTF-8 sequence) goes out too."""
        self.pieces.append(self.detok.flush())
        self.gen.text = self.text


class TokenStream:
    """Iterator of :class:`Token`; ``.result`` (a :class:`Generation`) is complete when it is exhausted."""

    def __init__(self, model, prompt_ids: list[int], params: SamplingParams, keep_logits: bool = False):
        self.model, self.params = model, params
        self.result = Generation("", [], prompt_ids)
        self._keep = keep_logits
        self._it = self._run()

    def __iter__(self) -> "TokenStream":
        return self

    def __next__(self) -> Token:
        return next(self._it)

    def close(self) -> None:
        """Stops the generation early and hands the model back (also done when the stream is exhausted
        or garbage-collected)."""
        self._it.close()

    def _run(self) -> Iterator[Token]:
        with self.model.exclusive():          # the stream owns the engine's KV cache until it ends
            yield from self._steps()

    def _steps(self) -> Iterator[Token]:
        m, p, r = self.model, self.params, self.result
        eng = m.engine
        out, logits = _begin(m, r, p)
        rng = np.random.default_rng(p.seed)
        while len(r.tokens) < p.max_tokens:
            if self._keep:
                r.logits.append(logits)
            t = sample_next(logits, p, out.history, rng)
            text = out.take(t)
            if text is None:
                break
            r.text = out.text
            yield Token(t, text)
            if out.ends():
                break
            logits = _timed(eng, r, eng.step, t)
            r.decode_steps += 1
        out.finish()


def _prefill(model, r: Generation, params: SamplingParams) -> np.ndarray:
    """Compiles what a generation of ``r.prompt_tokens`` uses on ``model`` (once), empties its cache and
    prefills the prompt, timed into ``r`` (compiles apart); returns the logits after the prompt."""
    eng, ids = model.engine, r.prompt_tokens
    total = min(model.config.n_ctx, len(ids) + max(params.max_tokens, 1))
    c0 = eng.compile_seconds
    eng.prepare(len(ids), total)
    eng.reset(total)
    c1, t0 = eng.compile_seconds, time.perf_counter()
    logits = eng.prefill(ids)
    r.prefill_seconds += time.perf_counter() - t0 - (eng.compile_seconds - c1)
    r.compile_seconds += eng.compile_seconds - c0
    return logits


def _begin(model, r: Generation, params: SamplingParams) -> tuple[_Output, np.ndarray]:
    """The start of every single generation (plain, speculative): the prompt prefilled (:func:`_prefill`);
    returns the generation's :class:`_Output` and the logits after the prompt."""
    logits = _prefill(model, r, params)
    return _Output(model, r, params), logits


def _timed(eng, r: Generation, fn, *args):
    """``fn(*args)`` (an eval of ``eng``) counted as decode time of ``r``; compiles (a new context
    bucket) go to ``r.compile_seconds`` instead."""
    t1 = time.perf_counter()
    c1 = eng.compile_seconds
    out = fn(*args)
    dc = eng.compile_seconds - c1
    r.decode_seconds += time.perf_counter() - t1 - dc
    r.compile_seconds += dc
    return out
