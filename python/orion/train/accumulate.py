"""The gradient of an optimizer step, folded microbatch by microbatch in a fixed order.

A step's gradient is defined as ``((m0 + m1) + m2) + ...`` where ``m_k`` is microbatch k's own gradient
(its batch elements accumulated into it in order). One process with ``--accum N`` computes m1, m2, ...
into scratch buffers and adds each into the total; N data-parallel ranks with one microbatch each
compute m_r locally and the reduction adds them in rank order (:mod:`orion.train.distributed`) — the
same additions on the same values, so the weights are bitwise equal. (Adding every batch element straight
into the total, as the plain :class:`GradAccumulator` does, gives a different rounding for each way the
batch is split.)

Gradients are grouped in buckets (one per layer, in backward order, then the rest: embedding, final norm,
classifier); a bucket's folding runs as soon as the step engine reports its layer done (``layer_done``,
on the dW worker), and after the last local microbatch the bucket is handed to the ``reducer`` while the
rest of the backward still runs.
"""

from __future__ import annotations

import numpy as np

from .step import GradAccumulator


def bucket_names(names, n_layers: int) -> list[list[str]]:
    """Gradient names grouped as the backward completes them: layers n-1 .. 0, then everything else
    (empty buckets dropped)."""
    layers = [[] for _ in range(n_layers)]
    rest = []
    for n in names:
        parts = n.split(".")
        if parts[0] == "layers" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) < n_layers:
            layers[int(parts[1])].append(n)
        else:
            rest.append(n)
    return [b for b in list(reversed(layers)) + [rest] if b]


def flat_grads(params: dict, buckets: list[list[str]]) -> tuple[dict, list[np.ndarray]]:
    """Zeroed fp32 gradient arrays, in ``params``' order (the order global_norm sums them in), that are
    views into one contiguous buffer per bucket (what a reduction sends without copies), and those
    buffers. Every mode uses this layout, so BLAS sees the same alignments with or without MPI."""
    views, flats = {}, []
    for b in buckets:
        flat = np.zeros(sum(params[n].size for n in b), np.float32)
        off = 0
        for n in b:
            k = params[n].size
            views[n] = flat[off:off + k].reshape(params[n].shape)
            off += k
        flats.append(flat)
    return {n: views[n] for n in params}, flats


def step_gradients(params: dict, n_layers: int, dist=None) -> "StepGradients":
    """The trainer's gradient buffers for ``params`` (its trainable tensors); ``dist``: a
    distributed.Comm whose ranks reduce every bucket."""
    buckets = bucket_names(params, n_layers)
    grads, flats = flat_grads(params, buckets)
    reducer = None
    if dist is not None:
        from .distributed import Reducer  # start-up: orion.train.distributed loads only for a multi-process run
        reducer = Reducer(dist, flats)
    return StepGradients(grads, buckets, n_layers, reducer)


class StepGradients(GradAccumulator):
    """A :class:`GradAccumulator` whose step total is the microbatch fold described above.

    Per step: ``start()``, then per local microbatch ``begin_micro(last)`` / engine / ``end_micro()``,
    then ``finish()`` (which waits for the reducer, when there is one). ``reducer``: an object with
    ``submit(index)`` (bucket ``index`` holds this rank's final local gradient) and ``wait()``.

    The inherited writes (``mm``/``add``/``target``) go to ``self.grads``/``self.written``: the totals
    during the first microbatch, a scratch set during the later ones, the totals again after ``finish``."""

    def __init__(self, grads: dict, buckets: list[list[str]], n_layers: int, reducer=None):
        super().__init__(grads)
        self.totals, self.total_written = grads, self.written
        self.buckets = buckets
        self.reducer = reducer
        self._layer_bucket = {}
        for i, b in enumerate(buckets):
            p = b[0].split(".")
            if p[0] == "layers" and len(p) > 2 and p[1].isdigit() and int(p[1]) < n_layers:
                self._layer_bucket[int(p[1])] = i
        self._scratch: dict = {}
        self._micro = -1
        self._last = True
        self._folded: set = set()           # buckets folded into the total for the current microbatch
        self._submitted: set = set()

    # ------------------------------------------------------------------------------------ step
    def start(self) -> None:
        self.grads, self.written = self.totals, self.total_written
        super().start()
        self._micro, self._last = -1, True
        self._folded.clear()
        self._submitted.clear()

    def begin_micro(self, last: bool) -> None:
        self._micro += 1
        self._last = last
        self._folded.clear()
        if self._micro == 0:
            self.grads, self.written = self.totals, self.total_written
        else:
            if not self._scratch:
                self._scratch = flat_grads(self.totals, self.buckets)[0]
            self.grads, self.written = self._scratch, set()

    def layer_done(self, layer: int) -> None:
        """Every gradient of ``layer`` is final for this microbatch (called in dW-worker order)."""
        i = self._layer_bucket.get(layer)
        if i is not None:
            self._fold(i)

    def end_micro(self) -> None:
        for i in range(len(self.buckets)):
            self._fold(i)

    def finish(self) -> dict:
        self.grads, self.written = self.totals, self.total_written
        for i in range(len(self.buckets)):        # also after a microbatch that stopped early (non-finite)
            self._zero_unwritten(i)
            self._submit(i)
        super().finish()
        if self.reducer is not None:
            self.reducer.wait()
        return self.grads

    # ------------------------------------------------------------------------------------ folding
    def _zero_unwritten(self, i: int) -> None:
        for n in self.buckets[i]:
            if n not in self.total_written:
                self.totals[n].fill(0.0)
                self.total_written.add(n)

    def _fold(self, i: int) -> None:
        if i in self._folded:
            return
        self._folded.add(i)
        self._zero_unwritten(i)
        if self._micro > 0:
            for n in self.buckets[i]:
                if n in self.written:
                    self.totals[n] += self._scratch[n]
                else:                               # 0 + x, as the rank-order sum adds a zero-filled rank
                    self.totals[n] += np.float32(0.0)
        if self._last:
            self._submit(i)

    def _submit(self, i: int) -> None:
        if i in self._submitted:
            return
        self._submitted.add(i)
        if self.reducer is not None:
            self.reducer.submit(i)
