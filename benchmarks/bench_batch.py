"""Batched generation on GPT-2 124M-shaped random weights: aggregate tok/s of ``Model.generate_batch`` with
16 sequences per decode eval vs the same prompts generated one stream at a time, in one run.

Both sides do the same work: every prompt prefilled alone (the same programs), then greedy decode; the
batched outputs must equal the single-stream ones token for token. Reported: decode-phase tok/s
(generated tokens / decode seconds; one stream: its decode steps only) and end-to-end tok/s (prefills
included). Compile time is excluded everywhere.

    PYTHONPATH=python:BUILD python benchmarks/bench_batch.py [--prompts 16] [--prompt 64] [--tokens 32] [--rounds 3]

``--step N``: instead, the batched decode step alone (16 busy columns at position ``--prompt``, a region
set of the bucket ``--prompt + --tokens`` uses, caches filled with random values), N steps: min and median
ms of the step's programs and host work, and of the classifier. For A/B runs of two builds (run the script
once per build, alternating): the end-to-end figures move by more than a change between runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from orion.bench.random_gpt2 import add_model_args, describe, machine_line, quiet_unbudgeted, random_gpt2  # noqa: E402
from orion.models.batch import BatchStats  # noqa: E402


def measure(m, prompts, tokens, batch, rounds: int = 1) -> dict:
    """Decode-phase and end-to-end tok/s of the prompts generated one at a time, then with ``generate_batch``
    (``batch`` per eval), compiles excluded (benchmarks/bench_llamacpp.py reuses this). ``rounds`` > 1
    alternates the two sides that many times (a change in the machine's load then hits both) and reports
    the medians; ``ratio``: the median of the per-round batched / single decode ratios."""
    m.generate(prompts[0], max_tokens=2)                                  # compiles the single-stream sets
    m.generate_batch(prompts[:1], max_tokens=tokens, max_batch=batch)     # and the batch set
    runs = []
    for _ in range(max(1, int(rounds))):
        t = time.perf_counter()
        alone = [m.generate(p, max_tokens=tokens) for p in prompts]
        single_s = time.perf_counter() - t - sum(g.compile_seconds for g in alone)
        single_dec = sum(g.decode_seconds for g in alone)
        st = BatchStats()
        gens = m.generate_batch(prompts, max_tokens=tokens, max_batch=batch, stats=st)
        n_tok = sum(len(g.tokens) for g in gens)
        steps = sum(g.decode_steps for g in alone)
        batch_dec = st.seconds - sum(g.prefill_seconds for g in gens)
        runs.append(dict(single_decode_tok_s=steps / single_dec, single_e2e_tok_s=n_tok / single_s,
                         batch_decode_tok_s=steps / batch_dec, batch_e2e_tok_s=n_tok / st.seconds, stats=st,
                         identical=all(a.tokens == b.tokens for a, b in zip(alone, gens))))
    out = {k: float(np.median([r[k] for r in runs])) for k in runs[0] if k.endswith("tok_s")}
    out.update(stats=runs[-1]["stats"], identical=all(r["identical"] for r in runs), rounds=runs,
               ratio=float(np.median([r["batch_decode_tok_s"] / r["single_decode_tok_s"] for r in runs])))
    return out


def measure_step(m, prompt: int, tokens: int, steps: int) -> dict:
    """Per batched decode step (all 16 columns busy, tokens at position ``prompt``): ms of ``batch._step``
    (programs and host work) and of the classifier, over ``steps`` steps after 3 warm-up ones."""
    from orion.models import batch as B
    eng = m.engine
    m.generate_batch([[1, 2, 3]], max_tokens=2, max_batch=B.MAX_BATCH)        # compiles nothing we time
    R = eng.ctx_bucket(prompt + tokens)
    stages = B._batch_stages(eng, R)
    feeds, regions = B._Feeds(eng, R), B._regions(stages)
    rng = np.random.default_rng(0)
    for l in range(1, len(regions)):
        for r in regions[l]:
            r[...] = (rng.standard_normal(r.shape) * 0.1).astype(np.float16)
    pos = np.full(B.DECODE_S, prompt, np.int64)
    cols = list(range(B.DECODE_S))
    toks = [int(t) for t in rng.integers(0, m.config.vocab_size, B.DECODE_S)]
    step, logits = [], []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        h = B._step(eng, stages, regions, feeds, cols, toks, pos)
        t1 = time.perf_counter()
        eng._logits(h, slice(0, B.DECODE_S))
        if i >= 3:
            step.append(t1 - t0)
            logits.append(time.perf_counter() - t1)
    ms = lambda xs: (1e3 * float(np.min(xs)), 1e3 * float(np.median(xs)))  # noqa: E731
    return {"R": R, "step_ms": ms(step), "logits_ms": ms(logits)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    ap.add_argument("--tokens", type=int, default=32, help="generated tokens per prompt")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the two sides this many times (medians)")
    ap.add_argument("--step", type=int, default=0, metavar="N", help="time N batched decode steps instead")
    add_model_args(ap)
    args = ap.parse_args(argv)
    quiet_unbudgeted()
    m = random_gpt2(args.layers, args.device)
    if args.step:
        r = measure_step(m, args.prompt, args.tokens, args.step)
        (s0, s1), (l0, l1) = r["step_ms"], r["logits_ms"]
        print(f"{describe(m)}; {machine_line()}\nbatched decode step, 16 columns, R {r['R']}, {args.step} steps: "
              f"programs + host {s0:.2f} ms min / {s1:.2f} ms median; classifier {l0:.2f} / {l1:.2f} ms")
        return 0
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(0, m.config.vocab_size, args.prompt)] for _ in range(args.prompts)]
    print(f"{describe(m)}; {args.prompts} prompts of {args.prompt} tokens, {args.tokens} generated each, greedy; "
          f"{machine_line()}")
    r = measure(m, prompts, args.tokens, args.batch, args.rounds)
    same, st = r["identical"], r["stats"]
    rows = [("one stream at a time", r["single_decode_tok_s"], r["single_e2e_tok_s"]),
            (f"generate_batch, {args.batch} per eval", r["batch_decode_tok_s"], r["batch_e2e_tok_s"])]
    print(f"\n{'':40s} {'decode tok/s':>13s} {'end-to-end tok/s':>17s}")
    for name, dec, e2e in rows:
        print(f"{name:40s} {dec:13.1f} {e2e:17.1f}")
    if args.rounds > 1:
        per = ", ".join(f"{x['batch_decode_tok_s'] / x['single_decode_tok_s']:.2f}x" for x in r["rounds"])
        print(f"per round, batched / single decode: {per} (median {r['ratio']:.2f}x)")
    print(f"\nbatched / single (medians): decode {rows[1][1] / rows[0][1]:.2f}x, "
          f"end-to-end {rows[1][2] / rows[0][2]:.2f}x; "
          f"{st.decode_evals} batched evals ({np.mean(st.columns_used):.1f} sequences each); outputs identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
