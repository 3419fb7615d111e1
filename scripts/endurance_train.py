#!/usr/bin/env python3
"""Endurance run of ``orion train``: 1,000 steps of the default tiny model on the shipped corpus.

Reports the NaN/skip counts, the loss trend (mean per 100-step window, which should fall
monotonically), validation loss, the RSS at the start and end (flat = no leak), the per-step time split
and the compile/load counts during training. Writes a JSON summary.

    PYTHONPATH=python:BUILD python scripts/endurance_train.py [--steps 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except OSError:
        import resource
        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r / 2 ** 20 if sys.platform == "darwin" else r / 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--strategy", default="dynamic")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", default="endurance_train.json")
    ap.add_argument("--ckpt-dir", default=None)
    args = ap.parse_args()

    from orion.train import data as D
    from orion.train.defaults import DEFAULTS, default_corpus
    from orion.train.model import PRESETS, init_params
    from orion.train.trainer import TrainConfig, Trainer

    cfg = PRESETS[DEFAULTS["preset"]]
    docs = D.read_texts(default_corpus())
    tok = D.train_sentencepiece(docs, cfg.vocab_size)
    tokens = D.encode_documents(docs, tok)
    d = dict(DEFAULTS)
    tc = TrainConfig(steps=args.steps, batch=d["batch"], lr=d["lr"], warmup=d["warmup"], seed=d["seed"],
                     strategy=args.strategy, device=args.device, val_fraction=d["val_fraction"],
                     eval_interval=max(1, args.steps // 5), eval_batches=d["eval_batches"], ckpt_dir=args.ckpt_dir,
                     ckpt_interval=max(1, args.steps // 5) if args.ckpt_dir else 0)
    data = D.TokenDataset(tokens, cfg.seq_len, cfg.vocab_size, tc.val_fraction, tc.seed)
    trainer = Trainer(cfg, tc, init_params(cfg, tc.seed), data, tokenizer=tok)
    rss = [(0, rss_mb())]
    t0 = time.time()

    def on_step(rec):
        if rec.step % 50 == 0:
            rss.append((rec.step, rss_mb()))
        if rec.step % 100 == 0:
            print(f"step {rec.step}: loss {rec.loss:.4f} rss {rss[-1][1]:.0f} MB "
                  f"({time.time() - t0:.0f}s elapsed)", flush=True)

    res = trainer.train(on_step=on_step, on_eval=lambda s, v: print(f"step {s}: val loss {v:.4f}", flush=True))
    trainer.close()
    losses = res.losses
    nan = sum(1 for x in losses if not math.isfinite(x))
    win = [sum(losses[i:i + 100]) / len(losses[i:i + 100]) for i in range(0, len(losses), 100)]
    monotone = all(b <= a + 0.02 for a, b in zip(win, win[1:]))
    recs = res.records
    tot = sum(r.t_total for r in recs)
    summary = {
        "steps": len(losses), "status": res.status, "nan_losses": nan, "skipped_steps": res.stats["skipped_steps"],
        "stability": res.stats, "loss_first": losses[0], "loss_last": losses[-1],
        "loss_window_means": [round(w, 4) for w in win], "loss_monotone_by_100": monotone,
        "val": res.val, "rss_mb_start": round(rss[1][1] if len(rss) > 1 else rss[0][1], 1),
        "rss_mb_end": round(rss[-1][1], 1), "rss_samples": [(s, round(m, 1)) for s, m in rss],
        "wall_s": round(time.time() - t0, 1), "tokens_per_s": round(sum(r.tokens for r in recs) / tot, 1),
        "split_pct": {k: round(100 * sum(getattr(r, "t_" + k) for r in recs) / tot, 1)
                      for k in ("device", "cpu", "update", "optim")},
        "compiles_during_training": sum(r.compiles for r in recs), "loads_during_training": sum(r.loads for r in recs),
        "model": cfg.to_dict(), "strategy": tc.strategy,
    }
    print(json.dumps(summary, indent=1))
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    ok = nan == 0 and monotone and summary["rss_mb_end"] <= summary["rss_mb_start"] * 1.10 + 20
    print("ENDURANCE", "OK" if ok else "CHECK", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
