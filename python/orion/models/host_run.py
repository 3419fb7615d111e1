"""The model definition evaluated on the host: the stage graphs of :mod:`orion.models.llama` - the very graphs
the programs are compiled from - run in float64 by the graph interpreter (:func:`orion.ir.evaluate`), with a
KV cache, the engine's masks and RoPE tables. What needs the model's math without a device uses it: the
fp16 probe and re-plan (:mod:`orion.models.fp16_safety`: peaks of the stream and of the values the residual
scale carries, read off the graphs' ``taps``) and the sample printed after training (:mod:`orion.train.sample`).
No compile, no fp16 rounding (the tables are float32, the rest float64).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir import evaluate
from . import llama
from .feeds import layer_feeds

__all__ = ["HostRun"]


class HostRun:
    """Feeds tokens through the definition, ``T`` positions at most; ``feed(ids)`` -> final hidden states
    ``[n, d]``, ``logits(ids)`` -> ``[n, V]`` (soft-capped like the engine's). With ``peaks``, tracks
    ``max_abs_stream`` / ``max_abs_branch`` over everything fed (the fp16 probe); ``on_tap(kind, arrays)``
    receives every tapped value (kinds of :func:`orion.models.llama.stage_graph`'s ``taps``; W8A8
    calibration reads ``"input:<linear>"``). ``cache``: keep each stage's graph and its float64 weights for
    later feeds (the sampler's tokens); off, a stage's are dropped once evaluated, so a single pass (the
    probe, calibration) holds one stage's weights in float64 at a time."""

    def __init__(self, cfg, weights: dict, T: int, peaks: bool = False, on_tap=None, cache: bool = False):
        self.cfg, self.w, self.T = cfg, weights, int(T)
        self.fam = llama
        self.L = self.fam.n_stages(cfg) - 1
        self.k = np.zeros((self.L, cfg.kv_dim, self.T))
        self.v = np.zeros((self.L, cfg.kv_dim, self.T))
        self.pos = 0
        self.peaks, self.on_tap = peaks, on_tap
        self.max_abs_stream = 0.0
        self.max_abs_branch = 0.0
        self.cache = cache
        self._graphs: dict = {}
        self._consts: dict | None = {} if cache else None
        self._cls = None

    def _graph(self, stage: int, S: int):
        key = (stage, S)
        if key in self._graphs:
            return self._graphs[key]
        taps: dict | None = {} if self.peaks or self.on_tap else None
        g = self.fam.stage_graph(self.cfg, self.w, stage, S, self.T, taps=taps)
        built = (g, [v for vs in (taps or {}).values() for v in vs], taps or {})
        if self.cache:
            self._graphs[key] = built
        return built

    def feed(self, ids: Sequence[int]) -> np.ndarray:
        """Appends ``ids`` at positions pos..; returns the final-norm hidden states ``[n, d]`` (float64)."""
        cfg, n, p0 = self.cfg, len(ids), self.pos
        if n == 0 or p0 + n > self.T:
            raise ValueError(f"feed of {n} tokens at position {p0} exceeds the {self.T} positions of this run")
        x = np.asarray(self.fam.embed(cfg, self.w, list(ids), p0), np.float64).reshape(1, cfg.d_model, 1, n)
        if self.peaks:
            self.max_abs_stream = max(self.max_abs_stream, float(np.abs(x).max()))
        feeds = layer_feeds(cfg, self.fam, n, self.T, p0, n, dtype=np.float64)
        out = self._stage(0, {"x": x, **feeds[0]}, n)
        resid = x
        for l in range(1, self.L + 1):
            self.k[l - 1, :, p0:p0 + n] = out["k"][0, :, 0]
            self.v[l - 1, :, p0:p0 + n] = out["v"][0, :, 0]
            inputs = {"x": resid, "q_attn": out["q"], "k_cache": self.k[l - 1].reshape(1, -1, 1, self.T),
                      "v_cache": self.v[l - 1].reshape(1, -1, 1, self.T), **feeds[l]}
            out = self._stage(l, inputs, n)
            resid = out["x_out"] if l < self.L else out["h"]
        self.pos = p0 + n
        return out["h"][0, :, 0].T

    def _stage(self, stage: int, inputs: dict, n: int) -> dict:
        g, tapped, taps = self._graph(stage, n)
        out = evaluate(g, inputs, values=tapped, consts=self._consts)
        for kind, vs in taps.items():
            if self.on_tap is not None:
                self.on_tap(kind, [out[v] for v in vs])
            if self.peaks and kind in ("stream", "branch"):
                m = max(float(np.abs(out[v]).max()) for v in vs)
                if kind == "stream":
                    self.max_abs_stream = max(self.max_abs_stream, m)
                else:
                    self.max_abs_branch = max(self.max_abs_branch, m)
        return out

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """``feed(ids)`` then the classifier (and the final soft-capping): ``[n, V]`` float64."""
        h = self.feed(ids)
        if self._cls is None:
            self._cls = np.asarray(self.fam.classifier_weight(self.cfg, self.w), np.float64)
        z = h @ self._cls.T
        cap = getattr(self.cfg, "final_softcap", None)
        return np.tanh(z / cap) * cap if cap else z
