"""Text generation from trained fp32 weights on the CPU (greedy or temperature sampling), for the sample
printed at the end of ``orion train``: the model definition (:mod:`orion.models.llama`'s stage graphs)
evaluated in float64 on the host with a KV cache (:class:`orion.models.host_run.HostRun`) - every feature
of :class:`orion.models.config.LlamaConfig` exactly as the programs compute it, no compile.
"""

from __future__ import annotations

import numpy as np

from ..models.config import LlamaConfig
from ..models.host_run import HostRun

MAX_POSITIONS = 4096      # a Generator's cache when no length is given (the model's context may be 128k)


class Generator:
    """``feed(ids)`` appends tokens and returns the logits ``[V]`` after the last one; ``T``: positions the
    cache holds (default the model's context, at most :data:`MAX_POSITIONS`)."""

    def __init__(self, cfg: LlamaConfig, params: dict, T: int | None = None):
        self.cfg, self.p = cfg, params
        self.T = int(T) if T else min(cfg.n_ctx, MAX_POSITIONS)
        self.reset()

    def reset(self):
        self.run = HostRun(self.cfg, self.p, self.T, cache=True)     # every token runs the same graphs

    @property
    def pos(self) -> int:
        return self.run.pos

    def feed(self, ids) -> np.ndarray:
        return self.run.logits([int(t) for t in ids])[-1]


def generate(cfg: LlamaConfig, params: dict, prompt_ids, max_new: int = 80, temperature: float = 0.0,
             seed: int = 0, stop_id=None) -> list[int]:
    """Continuation of ``prompt_ids`` (at most the model's context); greedy when ``temperature`` is 0.
    ``stop_id``: an id or a collection of ids that end the sample."""
    rng = np.random.default_rng(seed)
    stops = set() if stop_id is None else ({stop_id} if isinstance(stop_id, (int, np.integer)) else set(stop_id))
    ids = list(prompt_ids)[-cfg.n_ctx:]
    gen = Generator(cfg, params, T=min(cfg.n_ctx, len(ids) + max_new))
    logits = gen.feed(ids)
    out = []
    for _ in range(max_new):
        if gen.pos >= gen.T:
            break
        if temperature <= 0:
            t = int(np.argmax(logits))
        else:
            z = logits / temperature
            z = np.exp(z - z.max())
            t = int(rng.choice(len(z), p=z / z.sum()))
        if t in stops:
            break
        out.append(t)
        logits = gen.feed([t])
    return out
