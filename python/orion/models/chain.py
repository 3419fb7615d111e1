"""A program set's layers run in one native call (``_native.Chain``): the host work between two layers' evals - bind
the layer's surfaces, copy the previous eval's q / k / v / residual into the next one's inputs and the new keys and
values into the layer's cache (and a cache held on the host into the program's surface) - done from Python cost ~1
ms a token at 30 layers, more than the simulator's small ops. The engine uses it when every stage reads and writes
its surfaces in place and each program's per-step feeds (mask, RoPE tables) are the same for all of its turns;
otherwise the Python loop runs. Both compute the same bits (the chain copies exactly what the loop copies, into the
same surfaces)."""

from __future__ import annotations

import numpy as np

from .. import _native
from ..native.runtime import _warn
from .stages import LayerStage, Stage

__all__ = ["StepChain", "feed_once", "same_feeds", "shared_feeds"]


_FILLED = -2          # a copy's columns: positions 0 .. pos + n (runtime::ColumnCopy::kFilled)


class _NotChainable(Exception):
    pass


def _rows(a: np.ndarray) -> np.ndarray:
    """``a`` as the 2-D [rows, columns] fp16 view the chain copies between: its last axis as the columns (a
    widened output's columns are 3 apart), the others merged into rows - which needs one stride between rows
    (a packed weight panel [1, P, K, 16] is P * K rows of 16)."""
    if a.dtype != np.float16 or any(st < 0 for st in a.strides):
        raise _NotChainable
    dims = [(d, st) for d, st in zip(a.shape[:-1], a.strides[:-1]) if d != 1]
    rows, row_stride = 1, a.shape[-1] * a.strides[-1]
    for d, st in reversed(dims):
        if rows > 1 and st != rows * row_stride:
            raise _NotChainable
        if rows == 1:
            row_stride = st
        rows *= d
    return np.lib.stride_tricks.as_strided(a, shape=(rows, a.shape[-1]), strides=(row_stride, a.strides[-1]))


def _base(st) -> Stage:
    return st.base if isinstance(st, LayerStage) else st


def _chainable(stages) -> bool:
    """Whether the set's stages can run as one chain: plain or shared-layer stages, every input and output read
    and written in place, q / k / v as separate outputs."""
    for st in stages:
        if not isinstance(st, (Stage, LayerStage)):
            return False
        b = _base(st)
        if not b.zero_copy or "qkv" in b.outputs:
            return False
    return True


def shared_feeds(stages, feeds: list[dict], l: int) -> tuple:
    """The inputs stage ``l`` is fed exactly as the previous stage was, when both are turns of one shared program:
    the mask and RoPE tables of a step, written into its surfaces once instead of once a layer."""
    if not (isinstance(stages[l], LayerStage) and _base(stages[l - 1]) is stages[l].base):
        return ()
    prev = feeds[l - 1]
    return tuple(n for n, a in feeds[l].items() if prev.get(n) is a)


def same_feeds(stages, feeds: list[dict]) -> bool:
    """Whether every program's turns take the same feed arrays (written once before the chain runs)."""
    return all(len(shared_feeds(stages, feeds, l)) == len(feeds[l]) for l in range(2, len(stages))
               if _base(stages[l]) is _base(stages[l - 1]))


class StepChain:
    """The chain of a program set for ``n`` live columns. ``valid()`` says whether it still matches the stages'
    bindings (a LoRA swap or new weights rebind a layer's surfaces: the chain is then built again)."""

    def __init__(self, stages, n: int):
        self.stages, self.n = stages, n
        self._binds = [getattr(st, "_bind", None) for st in stages]
        self._feeds = [getattr(st, "_feed", None) for st in stages]
        self.chain = _native.Chain()
        self._filled: dict = {}                 # the programs whose own surfaces the chain's fills write
        L = len(stages) - 1
        first = _base(stages[0])
        self.chain.add_step(first.prog._p, [], [], first.live_columns(n), None)
        for l in range(1, L + 1):
            st, base, prev = stages[l], _base(stages[l]), _base(stages[l - 1])
            out = prev.out_arrays
            src_x = first.in_views["x"] if l == 1 else out["x_out"]
            copies = [(_rows(out["k"]), st.cache["k_cache"], -1, True),
                      (_rows(out["v"]), st.cache["v_cache"], -1, True),
                      (_rows(src_x), _rows(base.in_views["x"]), -1, False),
                      (_rows(out["q"]), _rows(base.in_views["q_attn"]), -1, False)]
            binds, fills = [], []
            if isinstance(st, LayerStage):
                binds = list(st._bind)
                fills = list(st._fill)                       # streamed weights (models/streamed.py)
                for view, values in st._feed:                # small weight inputs fed per eval
                    v2 = _rows(view)
                    a2 = np.ascontiguousarray(values, np.float16).reshape(v2.shape)  # the layer's array: kept
                    copies.append((a2, v2, v2.shape[1], False))
                for held, region in st.copy_in:              # a cache held on the host: its filled columns,
                    copies.append((_rows(held), _rows(region), _FILLED, False))   # after the new ones above
            check = base.out_arrays["x_out" if l < L else "h"]
            self.chain.add_step(base.prog._p, binds, copies, base.live_columns(n), _rows(check), fills)
            if fills:
                self._filled[id(base)] = base

    @classmethod
    def build(cls, stages, n: int) -> StepChain | None:
        """The chain, or None where the stages cannot run as one (:func:`_chainable`) or a view it would copy
        through has no single row stride."""
        if not _chainable(stages):
            return None
        try:
            return cls(stages, n)
        except _NotChainable:
            return None

    @property
    def h(self) -> np.ndarray:
        """The last stage's output ``h`` (a view of its surface, valid until the set runs again)."""
        return _base(self.stages[-1]).out_arrays["h"]

    def valid(self) -> bool:
        return all(getattr(st, "_bind", None) is b and getattr(st, "_feed", None) is f
                   for st, b, f in zip(self.stages, self._binds, self._feeds))

    def run(self, pos: int) -> int:
        """Runs the layers at cache position ``pos``; the index of the first stage whose residual output left
        fp16's range, or -1."""
        try:
            bad, warnings = self.chain.run(self.n, pos)
        finally:
            for base in self._filled.values():   # the streamed layers' fills ran natively: no record of whose
                base.fill_state["weights"] = None    # weights the programs' own surfaces hold now
        if warnings:
            _warn(warnings)
        return bad


def feed_once(stages, first_feed: dict, feeds: list[dict]) -> None:
    """Writes a step's inputs that the chain does not copy: the first stage's, and each other program's feeds
    (the same for all of its turns: :func:`same_feeds`), once per program."""
    views = _base(stages[0]).in_views
    for name, a in first_feed.items():
        views[name][...] = a
    done = set()
    for l in range(1, len(stages)):
        base = _base(stages[l])
        for name, a in feeds[l].items():
            if (id(base), name) not in done:
                base.in_views[name][...] = a
                done.add((id(base), name))
