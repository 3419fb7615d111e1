"""``loss.png`` of a run: training loss per step (and its moving average), validation loss, tokens/s,
drawn from the run's JSONL log (:mod:`orion.train.runlog`) with matplotlib, an optional dependency
(``pip install "orion-ane[plot]"``): plotting is the only use orion has for it, and it is large.
"""

from __future__ import annotations

import os

import numpy as np

from .checkpoint import atomic_write
from .errors import TrainError
from .runlog import LOG_NAME, read_log


class PlotUnavailable(TrainError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib  # optional: matplotlib (the plot extra)
    except ImportError:
        raise PlotUnavailable("orion plot needs matplotlib, an optional extra: pip install 'orion-ane[plot]' "
                              "(or pip install matplotlib)") from None
    matplotlib.use("Agg")                 # files only: no display needed (servers, CI)
    import matplotlib.pyplot as plt  # optional: matplotlib (the plot extra)
    return plt


def _smooth(ys: list[float], w: int) -> list[float]:
    """Centred mean over ``w`` steps (a trailing mean or an EMA would lag behind a falling loss)."""
    c = np.concatenate([[0.0], np.cumsum(ys)])
    i = np.arange(len(ys))
    lo, hi = np.maximum(0, i - w // 2), np.minimum(len(ys), i + w // 2 + 1)
    return list((c[hi] - c[lo]) / (hi - lo))


def _points(records: list[dict], key: str) -> list[tuple[float, float]]:
    """(step, value) of the records where both are real numbers matplotlib can draw (a hand-edited or
    foreign log may hold strings, booleans or integers beyond float range: those records are skipped)."""
    def real(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        try:
            return float(v)
        except OverflowError:
            return None
    pts = [(real(d.get("step")), real(d.get(key))) for d in records]
    return [(x, y) for x, y in pts if x is not None and y is not None]


def plot_run(run: str, out: str | None = None) -> str:
    """Writes the plot of ``run`` (a run folder or a JSONL log) to ``out`` (default: ``loss.png`` beside the
    log); returns its path."""
    log = os.path.join(run, LOG_NAME) if os.path.isdir(run) else run
    steps, vals = read_log(log)
    pts, vp, tp = _points(steps, "loss"), _points(vals, "val_loss"), _points(steps, "tokens_per_s")
    if not pts and not vp:
        raise TrainError(f"{log}: no step records with a loss yet (nothing to plot)")
    plt = _pyplot()
    out = out or os.path.join(os.path.dirname(os.path.abspath(log)), "loss.png")
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    if pts:
        x, y = zip(*pts)
        w = min(50, len(y) // 10)
        ax.plot(x, y, color="tab:blue", alpha=0.35 if w > 1 else 1.0, lw=1, label="train loss")
        if w > 1:
            ax.plot(x, _smooth(list(y), w), color="tab:blue", lw=1.5, label=f"train loss (mean of {w} steps)")
    if vp:
        vx, vy = zip(*vp)
        ax.plot(vx, vy, "o-", color="tab:orange", label="validation loss")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(os.path.basename(os.path.dirname(os.path.abspath(log))) or log)
    ax.grid(alpha=0.3)
    ax.legend()
    if tp:
        tx, ty = zip(*tp)
        ax2.plot(tx, ty, color="tab:green", lw=1)
    ax2.set_ylabel("tokens/s")
    ax2.set_xlabel("step")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_write(out) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return out
