"""What the stage programs take besides the residual stream, per stage: the attention mask of the layer whose
attention a stage runs and the RoPE tables of the layer whose q/k it projects. The engine feeds them to the
programs (fp16), the host run of the definition (float64) to the same graphs."""

from __future__ import annotations

import numpy as np

from ..ir.composites import MASK_VALUE

__all__ = ["additive_mask", "layer_feeds"]


def additive_mask(S: int, T: int, p0: int, n: int, window: int | None = None, dtype=np.float16) -> np.ndarray:
    """Additive mask ``[1, 1, S, T]``: query column i (position p0 + i; padding columns repeat the last) sees
    keys j <= its position, and with a sliding ``window`` only j > position - window (as transformers)."""
    rows = p0 + np.minimum(np.arange(S), n - 1)
    j = np.arange(T)[None, :]
    seen = j <= rows[:, None]
    if window is not None:
        seen &= j > rows[:, None] - window
    return np.where(seen, 0.0, MASK_VALUE).astype(dtype).reshape(1, 1, S, T)


def layer_feeds(cfg, fam, S: int, T: int, p0: int, n: int, positions=None, mask=None, rope=None,
                dtype=np.float16) -> list[dict]:
    """Per stage: the mask of the layer whose attention it runs (stage l: layer l-1) and the RoPE tables of
    the layer whose q/k it projects (stage l: layer l), as ``dtype`` (fp16 for the programs). ``positions``
    (of the S columns, default p0..), ``mask(window)`` and ``rope(cfg, positions, layer)`` (the family's
    ``rope_tables``, e.g. looked up in precomputed ones) replace the single-sequence ones (batched decode)."""
    L = fam.n_stages(cfg) - 1
    positions = np.arange(p0, p0 + S) if positions is None else positions
    mask = mask or (lambda w: additive_mask(S, T, p0, n, w, dtype))
    rope_tables = rope or getattr(fam, "rope_tables", None)
    sliding = [getattr(cfg, "layer_sliding", lambda i: False)(i) for i in range(L)]
    masks = {w: mask(w) for w in {cfg.sliding_window if s else None for s in sliding}}
    ropes = cfg.layer_ropes() if fam.USES_ROPE else []
    tables: dict = {}                                    # by RoPE; layers of one kind share the arrays
    feeds = []
    for l in range(L + 1):
        f = {}
        if l >= 1:
            f["mask"] = masks[cfg.sliding_window if sliding[l - 1] else None]
        if l < L and fam.USES_ROPE:
            r = ropes[l]
            if r not in tables:
                cos, sin = rope_tables(cfg, positions, l)
                tables[r] = {"cos": cos.astype(dtype), "sin": sin.astype(dtype)}
            f.update(tables[r])
        feeds.append(f)
    return feeds
