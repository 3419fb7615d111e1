"""AdamW on fp32 master weights, global-norm clipping, warmup + cosine schedule, dynamic loss scaling.

Defaults follow maderix/ANE's dynamic-weight pipeline (``training_dynamic/train.m``): β1 0.9, β2 0.95,
eps 1e-8, weight decay 0.1 on matrices and 0 on norm vectors, clip 1.0, cosine decay to 10 % of the peak. Non-finite
gradients are never rewritten: the step is skipped, the loss scale halved, and both are counted.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

import numpy as np

from .. import _native

from .errors import CheckpointError


@dataclass
class Schedule:
    lr: float = 3e-4
    warmup: int = 100
    total: int = 1000
    min_ratio: float = 0.1

    def __call__(self, step: int) -> float:
        """Learning rate of optimizer step ``step`` (0-based)."""
        if self.warmup > 0 and step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        span = max(1, self.total - self.warmup)
        t = min(1.0, (step - self.warmup) / span)
        lo = self.lr * self.min_ratio
        return lo + 0.5 * (1.0 + math.cos(math.pi * t)) * (self.lr - lo)


@dataclass
class LossScaler:
    """Dynamic loss scale: halve on overflow (skip that step), double after ``growth_interval`` good steps."""
    scale: float = 256.0
    growth_interval: int = 500
    max_scale: float = 2.0 ** 16
    min_scale: float = 2.0 ** -14
    good_steps: int = 0
    overflows: int = 0

    def update(self, finite: bool) -> None:
        if finite:
            self.good_steps += 1
            if self.good_steps >= self.growth_interval and self.scale < self.max_scale:
                self.scale *= 2.0
                self.good_steps = 0
        else:
            self.overflows += 1
            self.good_steps = 0
            self.scale = max(self.min_scale, self.scale / 2.0)

    def state(self) -> dict:
        return asdict(self)

    def load(self, d: dict) -> None:
        for k, v in d.items():
            if hasattr(self, k):
                setattr(self, k, type(getattr(self, k))(v))


def global_norm(grads: dict) -> float:
    """L2 norm over every gradient (inf/NaN when any element is non-finite)."""
    s = 0.0
    for g in grads.values():
        f = g.ravel()
        s += float(np.dot(f, f))
    return math.sqrt(s) if math.isfinite(s) else s


class AdamW:
    def __init__(self, params: dict, betas=(0.9, 0.95), eps: float = 1e-8, weight_decay: float = 0.1):
        self.b1, self.b2 = betas
        self.eps, self.wd = eps, weight_decay
        self.t = 0
        self.m = {k: np.zeros_like(v, dtype=np.float32) for k, v in params.items()}
        self.v = {k: np.zeros_like(v, dtype=np.float32) for k, v in params.items()}
        self._tmp: dict = {}
        self._pool = None
        self.threads = max(1, min(2, os.cpu_count() or 1))   # the update is elementwise: threads split chunks

    def decays(self, name: str, p: np.ndarray) -> bool:
        return p.ndim >= 2                      # matrices (incl. embeddings); never norm vectors

    CHUNK = 1 << 16          # elements per pass: the temporaries stay in cache (~3 memory passes, not ~14)

    def step(self, params: dict, grads: dict, lr: float, grad_mul: float = 1.0) -> None:
        """params -= lr * (m̂ / (sqrt(v̂) + eps) + wd * p), with g = grad_mul * grads (unscale + clip)."""
        self.t += 1
        b1, b2 = self.b1, self.b2
        c1 = 1.0 - b1 ** self.t
        c2 = 1.0 - b2 ** self.t
        # m̂/(sqrt(v̂)+eps) = (sqrt(c2)/c1) * m / (sqrt(v) + eps*sqrt(c2))
        k = lr * math.sqrt(c2) / c1
        eps = self.eps * math.sqrt(c2)
        ga, gb = (1.0 - b1) * grad_mul, (1.0 - b2) * grad_mul * grad_mul
        if self._native_update(params, grads, lr, (b1, b2, ga, gb, k, eps)):
            return
        n = self.CHUNK
        # (slices of) every tensor as chunk jobs, split into contiguous halves by size; each thread runs
        # the same elementwise update on its own chunks (bit-identical to one thread: no reductions).
        jobs = []
        for name, p in params.items():
            decay = 1.0 - lr * self.wd if self.wd and self.decays(name, p) else 1.0
            P, G, M, V = p.reshape(-1), grads[name].reshape(-1), self.m[name].reshape(-1), self.v[name].reshape(-1)
            for i in range(0, P.size, n):
                jobs.append((P[i:i + n], G[i:i + n], M[i:i + n], V[i:i + n], decay))
        coef = (b1, b2, ga, gb, k, eps)
        total = sum(j[0].size for j in jobs)
        nt = min(self.threads, len(jobs)) if total >= 1 << 20 else 1   # small models: no thread hand-off
        if nt <= 1:
            self._run(jobs, self._buf(0), coef)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor  # start-up: only when the update runs in threads
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="adamw")
        parts, start, acc = [], 0, 0
        for idx, j in enumerate(jobs):
            acc += j[0].size
            if acc * nt >= total * (len(parts) + 1) and len(parts) < nt - 1:
                parts.append(jobs[start:idx + 1])
                start = idx + 1
        parts.append(jobs[start:])
        futs = [self._pool.submit(self._run, part, self._buf(w), coef) for w, part in enumerate(parts[1:], 1)]
        self._run(parts[0], self._buf(0), coef)
        for f in futs:
            f.result()

    def _native_update(self, params: dict, grads: dict, lr: float, coef: tuple) -> bool:
        """The same update as :meth:`_run`, bit for bit, in one native pass per tensor (orion's thread pool,
        the GIL released): p, g, m and v read once. False (nothing done) when a tensor is not a
        C-contiguous float32 array (then the numpy chunks run)."""
        arrays = [(name, p, grads[name], self.m[name], self.v[name]) for name, p in params.items()]
        if not all(a.dtype == np.float32 and a.flags.c_contiguous for _, *t in arrays for a in t):
            return False
        for name, p, g, m, v in arrays:
            decay = 1.0 - lr * self.wd if self.wd and self.decays(name, p) else 1.0
            _native.adamw_update(p, g, m, v, *coef, decay)
        return True

    def _buf(self, w: int) -> np.ndarray:
        tmp = self._tmp.get(w)
        if tmp is None:
            tmp = self._tmp[w] = np.empty(self.CHUNK, np.float32)
        return tmp

    @staticmethod
    def _run(jobs, tmp, coef) -> None:
        b1, b2, ga, gb, k, eps = coef
        for pc, gc, mc, vc, decay in jobs:
            t = tmp[:pc.size]
            mc *= b1                                 # m = b1 m + (1 - b1) g
            np.multiply(gc, ga, out=t)
            mc += t
            vc *= b2                                 # v = b2 v + (1 - b2) g^2
            np.multiply(gc, gc, out=t)
            t *= gb
            vc += t
            if decay != 1.0:                         # decoupled weight decay
                pc *= decay
            np.sqrt(vc, out=t)
            t += eps
            np.divide(mc, t, out=t)
            t *= k
            pc -= t

    def state_tensors(self) -> dict[str, np.ndarray]:
        out = {}
        for k in self.m:
            out["m." + k] = self.m[k]
            out["v." + k] = self.v[k]
        return out

    def load_state(self, tensors: dict, t: int) -> None:
        for k in self.m:
            for pre, dst in (("m.", self.m), ("v.", self.v)):
                src = tensors.get(pre + k)
                if src is None or src.shape != dst[k].shape:
                    raise CheckpointError(f"optimizer state: {pre + k} is "
                                          f"{'missing' if src is None else f'shaped {list(src.shape)}'}, expected "
                                          f"{list(dst[k].shape)}")
                dst[k][...] = src
        self.t = int(t)
