"""W8A8 calibration: the static int8 activation scales of a model's quantized linears
(:class:`orion.quant.activations.ActivationScales`), measured by running the fp16 model's definition in float64
on the host (:class:`orion.models.host_run.HostRun`, tapping every linear's input) on calibration tokens.
Here with the models because it runs one; the scales' arithmetic and file format are in
:mod:`orion.quant.activations` (which describes the methods)."""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..quant.activations import METHODS, QMAX, ActivationScales
from ..quant.common import covering_scale
from .host_run import HostRun

__all__ = ["calibrate"]


class _Tail:
    """max |x| or the ``p``-th percentile of |x| of one linear input over the calibration tokens, keeping
    only the largest values the percentile can be among (the count of all values is known up front)."""

    def __init__(self, p: float | None, total: int):
        self.p, self.total = p, total
        self.keep = total if p is None else min(total, int(math.ceil(total * (1 - p / 100))) + 1)
        self.vals = np.zeros(0)
        self.peak = 0.0

    def add(self, x: np.ndarray) -> None:
        a = np.abs(np.asarray(x, np.float64)).reshape(-1)
        self.peak = max(self.peak, float(a.max(initial=0.0)))
        if self.p is not None:
            a = np.concatenate([self.vals, a])
            k = min(self.keep, a.size)
            self.vals = np.partition(a, a.size - k)[a.size - k:]

    def value(self) -> float:
        if self.p is None:
            return self.peak
        # inverted-CDF order statistic: the smallest v with at least p% of the values <= v
        rank = max(1, int(math.ceil(self.p / 100 * self.total)))           # 1-based, ascending
        from_top = self.total - rank                                      # values above it
        return float(np.sort(self.vals)[::-1][from_top])


def calibrate(cfg, weights: dict, ids, names, *, method: str = "max", percentile: float = 99.99,
              window: int | None = None) -> ActivationScales:
    """Scales of the inputs of the linears ``names`` (canonical weight names) from the model definition
    evaluated in float64 on the host (:class:`orion.models.host_run.HostRun`; ``weights``: the fp16 model)
    on the token ``ids`` in windows of ``window`` tokens (default: the context), read at each linear's input
    tap. Each scale is the smallest fp16 ``s`` with ``127 s >=`` the statistic."""
    if method not in METHODS:
        raise InputError(f"calibration method must be one of {', '.join(METHODS)}, got {method!r}")
    p = None
    if method == "percentile":
        if isinstance(percentile, bool) or not isinstance(percentile, (int, float)) or not 50 <= percentile < 100:
            raise InputError(f"percentile must be a number in [50, 100), got {percentile!r}")
        p = float(percentile)
    ids = [int(t) for t in ids]
    if not ids:
        raise InputError("calibration gives no tokens: pass a non-empty text or token ids")
    bad = [t for t in ids if not 0 <= t < cfg.vocab_size]
    if bad:
        raise InputError(f"calibration token id(s) {bad[:5]} outside the vocabulary [0, {cfg.vocab_size})")
    names = sorted(names)
    if not names:
        raise InputError("calibration needs the names of the quantized linears; none were given")
    win = int(window or cfg.n_ctx)
    dims = {n: np.shape(weights[n])[1] for n in names}
    tails = {n: _Tail(p, len(ids) * dims[n]) for n in names}

    def tap(kind, arrays):
        name = kind[len("input:"):] if kind.startswith("input:") else None
        if name in tails:
            for x in arrays:
                tails[name].add(x)

    for i in range(0, len(ids), win):
        chunk = ids[i:i + win]
        HostRun(cfg, weights, len(chunk), on_tap=tap).feed(chunk)
    stat = np.array([tails[n].value() for n in names])
    scale = covering_scale(stat, QMAX)
    return ActivationScales({n: float(s) for n, s in zip(names, scale)}, "int8", method, p, len(ids))
