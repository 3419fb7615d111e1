"""Speculative decoding vs plain decoding, side by side in one run; greedy tokens must be identical.

1. Prompt lookup on repetitive text: GPT-2 124M-shaped random weights, the prompt a random 32-token
   passage repeated, greedy.
2. With ``--target`` and ``--draft``: a trained Llama and its smaller sibling of the same tokenizer
   proposing ``k`` tokens per round, and prompt lookup on the same prompts; greedy (tokens asserted
   identical to plain greedy) and sampled (temperature 0.8: the same distribution, other draws). The
   two models, both trained with ``orion train`` on the bundled story corpus (its default data), the
   draft with the target's tokenizer (19 and 3 minutes on the shared 2 cores at load average 9; the
   checkpoints are not committed)::

       orion train --preset tiny --dim 256 --layers 6 --heads 8 --hidden 688 --steps 250 --seed 1337 \\
           --ckpt-dir /tmp/spec-train/target-run --ckpt-interval 0 --export-hf /tmp/spec-train/target
       orion train --preset tiny --dim 64 --layers 2 --heads 4 --hidden 172 --steps 250 --seed 1337 \\
           --tokenizer /tmp/spec-train/target/tokenizer.model \\
           --ckpt-dir /tmp/spec-train/draft-run --ckpt-interval 0 --export-hf /tmp/spec-train/draft

Every method runs once per round, rounds interleave the methods (a noisy machine slows all of them
alike), the tables give medians over the rounds. decode tok/s = tokens after the first / decode seconds
(a speculative generation's decode seconds include its draft model's evals; compiles excluded);
end-to-end tok/s adds the prefills (the draft's included).

    PYTHONPATH=python:BUILD python benchmarks/bench_speculative.py [--tokens 64] [--repeats 3] \\
        [--target DIR --draft DIR [--draft-k 2 4] [--story-tokens 96] [--skip-lookup]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from orion.bench.random_gpt2 import add_model_args, describe, machine_line, quiet_unbudgeted, random_gpt2  # noqa: E402

STORY_PROMPTS = ["Once upon a time", "One day, a little girl named Lily went to the park.",
                 "Tom had a red ball. He", "The sun was shining and the birds"]


def run_methods(m, prompts, methods: dict, tokens: int, repeats: int, **opts) -> dict:
    """``methods``: {name: extra ``generate`` options (``speculative``, ``draft_k``; {} = plain)}. Every method
    generates every prompt once per round, rounds interleave the methods, a warm-up compiles first; returns
    {name: {"gens": the last round's generations, "decode": [tok/s per round], "e2e": [...]}}."""
    for extra in methods.values():
        m.generate(prompts[0], max_tokens=4, **extra, **opts)                       # compiles
    out = {name: {"decode": [], "e2e": []} for name in methods}
    for _ in range(repeats):
        for name, extra in methods.items():
            gens = [m.generate(p, max_tokens=tokens, seed=i, **extra, **opts) for i, p in enumerate(prompts)]
            out[name]["decode"].append(sum(len(g.tokens) - 1 for g in gens) / sum(g.decode_seconds for g in gens))
            out[name]["e2e"].append(sum(len(g.tokens) for g in gens) /
                                    sum(g.prefill_seconds + g.decode_seconds for g in gens))
            out[name]["gens"] = gens
    return out


def print_table(res: dict, base: str) -> None:
    print(f"{'':36s} {'decode tok/s':>13s} {'vs plain':>9s} {'e2e tok/s':>10s} {'target evals':>13s} "
          f"{'tokens/eval':>12s} {'acceptance':>11s}")
    ref = statistics.median(res[base]["decode"])
    for name, r in res.items():
        gens = r["gens"]
        dec, e2e = statistics.median(r["decode"]), statistics.median(r["e2e"])
        evals = sum(g.decode_steps for g in gens)
        per_eval = sum(len(g.tokens) - 1 for g in gens) / evals
        drafted = sum(getattr(g, "drafted", 0) for g in gens)
        acc = f"{sum(g.accepted for g in gens) / drafted:11.2f}" if drafted else f"{'':>11s}"
        print(f"{name:36s} {dec:13.1f} {dec / ref:8.2f}x {e2e:10.1f} {evals:13d} {per_eval:12.2f} {acc}")


def same_tokens(res: dict, base: str) -> bool:
    ref = [g.tokens for g in res[base]["gens"]]
    return all([g.tokens for g in r["gens"]] == ref for r in res.values())


def prompt_lookup_on_repetitive_text(args) -> bool:
    m = random_gpt2(args.layers, args.device)
    passage = [int(t) for t in np.random.default_rng(1).integers(0, m.config.vocab_size, args.passage)]
    prompt = passage * args.copies
    print(f"\n1. {describe(m)}; prompt {len(prompt)} tokens ({args.copies} x a {args.passage}-token passage), "
          f"{args.tokens} generated, greedy, median of {args.repeats} rounds\n")
    res = run_methods(m, [prompt], {"plain greedy": {}, "prompt lookup (4-15 drafts/eval)":
                                    {"speculative": "prompt-lookup"}}, args.tokens, args.repeats)
    print_table(res, "plain greedy")
    same = same_tokens(res, "plain greedy")
    print(f"\nidentical tokens: {same}")
    m.release()
    return same


def draft_model_speculation(args) -> bool:
    from orion.models import load
    target, draft = load(args.target, device=args.device), load(args.draft, device=args.device)
    c, cd = target.config, draft.config
    n_t, n_d = (sum(v.size for v in x.weights.values()) / 1e6 for x in (target, draft))
    print(f"\n2. target {args.target} (Llama d={c.d_model}, L={c.n_layers}, {n_t:.2f}M parameters), draft "
          f"{args.draft} (d={cd.d_model}, L={cd.n_layers}, {n_d:.2f}M); vocabulary {c.vocab_size}; "
          f"{len(STORY_PROMPTS)} story prompts, {args.story_tokens} tokens each (no stop token), median of "
          f"{args.repeats} rounds")
    methods = {"plain": {}, "prompt lookup": {"speculative": "prompt-lookup"}}
    methods.update({f"draft model, k={k}": {"speculative": draft, "draft_k": k} for k in args.draft_k})
    prompts = [target.encode(p) for p in STORY_PROMPTS]
    ok = True
    for label, temp in (("greedy", 0.0), ("sampled, temperature 0.8 (seeds 0..3)", 0.8)):
        res = run_methods(target, prompts, methods, args.story_tokens, args.repeats, temperature=temp, stop_tokens=[])
        print(f"\n{label}:\n")
        print_table(res, "plain")
        if temp == 0:
            ok = same_tokens(res, "plain")
            print(f"\nidentical tokens (every method, every prompt): {ok}")
        print(f"sample (plain): {STORY_PROMPTS[0]!r} + {res['plain']['gens'][0].text[:120]!r}")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passage", type=int, default=32, help="tokens of the passage repeated in the prompt")
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated in part 1")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (the tables give medians)")
    add_model_args(ap)
    ap.add_argument("--target", default=None, help="part 2: the trained target model (folder)")
    ap.add_argument("--draft", default=None, help="part 2: its smaller sibling of the same tokenizer")
    ap.add_argument("--draft-k", type=int, nargs="+", default=[2, 4], help="part 2: draft tokens per round")
    ap.add_argument("--story-tokens", type=int, default=96, help="tokens generated per story prompt in part 2")
    ap.add_argument("--skip-lookup", action="store_true", help="part 2 only")
    args = ap.parse_args(argv)
    if (args.target is None) != (args.draft is None):
        ap.error("--target and --draft go together")
    quiet_unbudgeted()
    print(f"bench_speculative: {machine_line()}")
    ok = True
    if not args.skip_lookup:
        ok &= prompt_lookup_on_repetitive_text(args)
    if args.target is not None:
        ok &= draft_model_speculation(args)
    print(f"\nload average at the end: {machine_line()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
