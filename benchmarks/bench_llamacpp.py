"""orion vs llama.cpp vs HF transformers on the same GPT-2 124M-shaped weights, in one run (targets:
single-stream decode >= 1.0x llama.cpp f16 with prefill still ahead; batch of 16 >= 8x one stream, next
to llama.cpp's batched figure and transformers bf16 with the same batch).

One random checkpoint (transformers ``GPT2LMHeadModel`` from its default config, seed 0, saved as fp16
safetensors with the GPT-2 tokenizer from /work/shared/data) is read by all three: orion loads the folder,
llama.cpp gets it through its own ``convert_hf_to_gguf.py`` (f16 and q8_0), transformers loads it in bf16 and in fp32.
Prompt 64 tokens, 32 generated, greedy, 2 threads everywhere. The machine is shared, so every measurement
runs once per round, the rounds interleave all sides (``--rounds``), and each figure and ratio is the
median over rounds.

- orion: ``orion.bench.decode.bench_orion`` (bench_decode.py's measurement, live columns) and
  ``bench_batch.measure`` (bench_batch.py's: 16 prompts one at a time vs ``generate_batch``).
- llama.cpp: ``llama-bench -t 2 -p 64 -n 32`` (median of its repetitions) for f16 and q8_0;
  ``llama-batched-bench -npp 64 -ntg 32 -npl 1,16`` (f16; S_TG = aggregate decode tok/s; median of runs).
- ``--family llama``: a random Llama of the same width and depth (Llama-2 tokenizer.model, 32,000 tokens),
  which orion also runs with int8 weights (``quantize="int8"``), next to llama.cpp q8_0 (int8
  target: >= 1.0x q8_0).
- transformers bf16 and fp32: ``model.generate`` on the 16 prompts as one batch (and on one prompt), decode tok/s
  = new tokens after the first / (time of 32 new tokens - time of 1 new token).

    scripts/build_llamacpp.sh /tmp/llamacpp
    PYTHONPATH=python:BUILD python benchmarks/bench_llamacpp.py --llamacpp /tmp/llamacpp
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import orion  # noqa: E402
from orion.native.runtime import DEVICES, resolve_device  # noqa: E402
from orion.bench.decode import bench_orion  # noqa: E402
from orion.models import Model  # noqa: E402
from orion.models.engine import Engine  # noqa: E402
from orion.models.loaders import load_weights  # noqa: E402

import bench_batch  # noqa: E402

DATA = "/work/shared/data"


def write_checkpoint(out: str, seed: int) -> None:
    """A random GPT-2 124M checkpoint in fp16 safetensors plus the real GPT-2 tokenizer files (the GGUF
    converter identifies the tokenizer by its behaviour, so it must be GPT-2's)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    for f in ("gpt2-vocab.json", "gpt2-merges.txt"):
        if not os.path.exists(os.path.join(DATA, f)):
            raise SystemExit(f"{DATA}/{f} missing: the GGUF converter needs GPT-2's tokenizer files")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config()).to(torch.float16)
    model.save_pretrained(out, safe_serialization=True)
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["n_ctx"] = cfg["n_positions"]          # the converter reads n_ctx, which transformers 5 no longer writes
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copyfile(os.path.join(DATA, "gpt2-vocab.json"), os.path.join(out, "vocab.json"))
    shutil.copyfile(os.path.join(DATA, "gpt2-merges.txt"), os.path.join(out, "merges.txt"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f)


# the Llama shapes: GPT-2 124M's width and depth, and SmolLM2-135M's (deep and narrow: 30 layers of d 576,
# 9 query / 3 KV heads, tied embeddings; the Llama-2 vocabulary of 32,000 instead of its 49,152)
LLAMA_SHAPES = {
    "llama": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                  num_key_value_heads=12, tie_word_embeddings=False),
    "smollm": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                   num_key_value_heads=3, tie_word_embeddings=True),
    # Llama-3.2-1B's shape and vocabulary size (the Llama-2 tokenizer.model padded to it by the GGUF converter):
    # benchmarks/bench_quantized_decode.py's default
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=True, vocab_size=128256, rope_theta=500000.0,
               max_position_embeddings=2048),
}


def write_llama_checkpoint(out: str, seed: int, family: str = "llama", **overrides) -> None:
    """A random Llama of :data:`LLAMA_SHAPES` ``family`` (the Llama-2 SentencePiece vocabulary of 32,000 unless the
    shape says otherwise) in fp16 safetensors with the Llama-2 tokenizer.model: the family orion compresses
    (``quantize="int8"``), for orion int8 next to llama.cpp q8_0. ``overrides``: more ``LlamaConfig`` fields
    (``num_hidden_layers=8``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    spm = os.path.join(DATA, "llama2-tokenizer.model")
    if not os.path.exists(spm):
        raise SystemExit(f"{spm} missing: the GGUF converter needs the Llama-2 tokenizer.model")
    torch.manual_seed(seed)
    cfg = LlamaConfig(**{"vocab_size": 32000, "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2,
                         **LLAMA_SHAPES[family], **overrides})
    model = LlamaForCausalLM(cfg).to(torch.float16)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copyfile(spm, os.path.join(out, "tokenizer.model"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "model_max_length": 1024, "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}, f)


def run(cmd: list[str], env=None) -> str:
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def convert(llama: str, ckpt: str, outtype: str, out: str) -> str:
    if os.path.exists(out) and os.path.getmtime(out) > os.path.getmtime(os.path.join(ckpt, "model.safetensors")):
        return out                                           # --work reused: already converted
    env = dict(os.environ, PYTHONPATH=os.path.join(llama, "gguf-py"))
    run([sys.executable, os.path.join(llama, "convert_hf_to_gguf.py"), ckpt, "--outtype", outtype,
         "--outfile", out], env=env)
    return out


def llama_bench(binary: str, gguf: str, threads: int, prompt: int, tokens: int, reps: int) -> dict:
    """Prefill and decode tok/s, the median of llama-bench's repetitions."""
    out = run([binary, "-m", gguf, "-t", str(threads), "-p", str(prompt), "-n", str(tokens), "-r", str(reps),
               "-o", "json"])
    res = {}
    for e in json.loads(out):
        kind = "prefill" if e["n_prompt"] and not e["n_gen"] else "decode"
        res[kind] = float(np.median(e["samples_ts"]))
        res[kind + "_samples"] = e["samples_ts"]
    return res


def llama_batched(binary: str, gguf: str, threads: int, prompt: int, tokens: int, batch: int, runs: int) -> dict:
    """llama-batched-bench: decode (S_TG, all sequences per step) and prefill tok/s for 1 and ``batch``
    sequences; medians over ``runs`` invocations (the tool measures each once)."""
    samples: dict = {}
    ctx = batch * (prompt + tokens) + 64
    for _ in range(runs):
        out = run([binary, "-m", gguf, "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-b", "2048",
                   "-ub", "512", "-npp", str(prompt), "-ntg", str(tokens), "-npl", f"1,{batch}",
                   "--output-format", "jsonl"])
        for line in out.splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                samples.setdefault(e["pl"], []).append((e["speed_pp"], e["speed_tg"]))
    return {pl: dict(prefill=float(np.median([s[0] for s in v])), decode=float(np.median([s[1] for s in v])),
                     decode_samples=[s[1] for s in v]) for pl, v in samples.items()}


def hf_generate(ckpt: str, prompts: list[list[int]], tokens: int, repeats: int, threads: int,
                dtype: str = "bf16") -> dict:
    """transformers bf16 ``model.generate`` (greedy, KV cache) on the prompts as one batch: prefill tok/s
    from a 1-token generate, decode tok/s from the extra time of ``tokens`` new tokens; medians."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype={"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]).eval()
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)

    def timed(n):
        t = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 pad_token_id=0)
        assert out.shape[1] == ids.shape[1] + n
        return time.perf_counter() - t

    timed(2)                                                    # warm-up
    first, full = [], []
    for _ in range(repeats):
        first.append(timed(1))
        full.append(timed(tokens))
    b = len(prompts)
    return dict(prefill=b * ids.shape[1] / float(np.median(first)),
                decode=b * (tokens - 1) / (float(np.median(full)) - float(np.median(first))),
                version=__import__("transformers").__version__, dtype=dtype)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llamacpp", required=True, help="the folder scripts/build_llamacpp.sh built")
    ap.add_argument("--work", default=None, help="folder for the checkpoint and GGUFs (default: a temp dir; "
                    "reused when it has them)")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="threads of every side: orion's pool, llama.cpp, torch")
    ap.add_argument("--repeats", type=int, default=3, help="per round: orion / transformers repeats, llama-bench -r")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every measurement")
    ap.add_argument("--device", default="auto", choices=DEVICES)
    ap.add_argument("--family", default="gpt2", choices=["gpt2", "llama", "smollm"],
                    help="gpt2: GPT-2 124M; llama: a Llama of the same width and depth; smollm: SmolLM2-135M's "
                         "30-layer shape (the Llamas also run by orion with int8 weights next to llama.cpp q8_0)")
    ap.add_argument("--no-batch", action="store_true", help="skip the batched measurements (single stream only)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    llama = os.path.join(args.llamacpp, "llama.cpp")
    bench_bin = os.path.join(args.llamacpp, "build", "bin", "llama-bench")
    batched_bin = os.path.join(args.llamacpp, "build", "bin", "llama-batched-bench")
    for p in (bench_bin, batched_bin, os.path.join(llama, "convert_hf_to_gguf.py")):
        if not os.path.exists(p):
            raise SystemExit(f"{p} missing: run scripts/build_llamacpp.sh {args.llamacpp}")
    work = args.work or tempfile.mkdtemp(prefix="orion-llamacpp-")
    name = f"{args.family}-random"
    ckpt = os.path.join(work, name)

    if not os.path.exists(os.path.join(ckpt, "model.safetensors")):
        if args.family == "gpt2":
            write_checkpoint(ckpt, seed=0)
        else:
            write_llama_checkpoint(ckpt, seed=0, family=args.family)
    ggufs = {t: convert(llama, ckpt, t, os.path.join(work, f"{name}-{t}.gguf")) for t in ("f16", "q8_0")}
    int8 = args.family != "gpt2"             # orion compresses the Llama-style families' linears

    ck = load_weights(ckpt, use_cache=False)
    cfg, w16 = ck.config, ck.weights
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(0, cfg.vocab_size, args.prompt)] for _ in range(args.batch)]
    shape = {"gpt2": "GPT-2 124M", "llama": "Llama of GPT-2 124M's width and depth",
             "smollm": "SmolLM2-135M's shape"}[args.family]
    print(f"{shape} (d={cfg.d_model}, L={cfg.n_layers}, V={cfg.vocab_size}), random weights (seed 0); "
          f"prompt {args.prompt}, {args.tokens} generated, batch {args.batch}, {args.threads} threads; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)

    # Each round runs every measurement once, one after the other, so a change in the machine's load hits
    # all sides alike; the reported figure is the median over rounds of each round's median.
    orion.sim.set_compile_budget(10**6)
    orion._native.set_num_threads(args.threads)          # --threads holds for every side, orion's pool included
    Engine.skip_dead_columns = True
    rounds, identical, ours = [], True, None
    for i in range(args.rounds):
        r = {"load": os.getloadavg()[0]}
        ours = bench_orion(cfg, w16, prompts[0], args.tokens, args.device, "cpu", args.repeats)
        r["orion_pf"], r["orion_dc"] = args.prompt / ours["prefill_s"], 1.0 / ours["step_s"]
        if int8:
            q8 = bench_orion(cfg, w16, prompts[0], args.tokens, args.device, "cpu", args.repeats, quantize="int8")
            r["orion8_pf"], r["orion8_dc"] = args.prompt / q8["prefill_s"], 1.0 / q8["step_s"]
        if not args.no_batch:
            m = Model(cfg, w16, device=args.device, stop_tokens=[])
            ob = bench_batch.measure(m, prompts, args.tokens, args.batch)      # bench_batch.py's measurement
            m.release()
            identical &= ob["identical"]
            r["orion_b"], r["orion_b1"] = ob["batch_decode_tok_s"], ob["single_decode_tok_s"]
        for t, g in ggufs.items():
            lb = llama_bench(bench_bin, g, args.threads, args.prompt, args.tokens, args.repeats)
            r[f"{t}_pf"], r[f"{t}_dc"] = lb["prefill"], lb["decode"]
        hf1 = hf_generate(ckpt, prompts[:1], args.tokens, args.repeats, args.threads)
        r["hf_pf"], r["hf_dc"] = hf1["prefill"], hf1["decode"]
        h32 = hf_generate(ckpt, prompts[:1], args.tokens, args.repeats, args.threads, "fp32")
        r["hf32_pf"], r["hf32_dc"] = h32["prefill"], h32["decode"]
        if not args.no_batch:
            lbb = llama_batched(batched_bin, ggufs["f16"], args.threads, args.prompt, args.tokens, args.batch, 1)
            r["f16_b"], r["f16_b1"] = lbb[args.batch]["decode"], lbb[1]["decode"]
            hfb = hf_generate(ckpt, prompts, args.tokens, args.repeats, args.threads)
            h32b = hf_generate(ckpt, prompts, args.tokens, args.repeats, args.threads, "fp32")
            r["hf_b"], r["hf_b1"] = hfb["decode"], hf1["decode"]
            r["hf32_b"], r["hf32_b1"] = h32b["decode"], h32["decode"]
        rounds.append(r)
        print(f"round {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()), flush=True)
    med = {k: float(np.median([r[k] for r in rounds])) for k in rounds[0]}

    dev = resolve_device(args.device)
    rows = [(f"orion fp16 ({dev}, live columns)", "orion")]
    rows += [(f"orion int8 weights ({dev}, live columns)", "orion8")] if int8 else []
    rows += [("llama.cpp f16", "f16"), ("llama.cpp q8_0", "q8_0"),
            (f"transformers {hf1['version']} bf16 (generate)", "hf"),
            (f"transformers {hf1['version']} fp32 (generate)", "hf32")]
    print(f"\n| | prefill tok/s | decode tok/s | batch {args.batch}: aggregate decode tok/s | batch / one stream |")
    print("|---|---|---|---|---|")
    for name, k in rows:              # orion's decode: median per-step time; the others: tok/s of whole runs
        bd = med.get(k + "_b")
        b = f"{bd:.1f}" if bd else "–"
        ratio = f"{float(np.median([r[k + '_b'] / r[k + '_b1'] for r in rounds])):.2f}x" if bd else "–"
        print(f"| {name} | {med[k + '_pf']:.1f} | {med[k + '_dc']:.2f} | {b} | {ratio} |")
    print("(batch / one stream: each side's own single-stream figure from the same measurement - orion: "
          "bench_batch's prompts one at a time; llama.cpp: llama-batched-bench -npl 1; transformers: generate "
          "on one prompt)")
    def ratio(a, b):
        return float(np.median([r[a] / r[b] for r in rounds]))
    print(f"\norion / llama.cpp f16: decode {ratio('orion_dc', 'f16_dc'):.2f}x (target >= 1.0), prefill "
          f"{ratio('orion_pf', 'f16_pf'):.2f}x (target > 1)")
    print(f"orion / llama.cpp q8_0: decode {ratio('orion_dc', 'q8_0_dc'):.2f}x, prefill "
          f"{ratio('orion_pf', 'q8_0_pf'):.2f}x")
    if int8:
        print(f"orion int8 / llama.cpp q8_0: decode {ratio('orion8_dc', 'q8_0_dc'):.2f}x (target >= 1.0), prefill "
              f"{ratio('orion8_pf', 'q8_0_pf'):.2f}x")
    if not args.no_batch:
        print(f"orion batch {args.batch} / one stream: {ratio('orion_b', 'orion_b1'):.2f}x (target >= 8); identical "
              f"outputs: {identical}")
        print(f"orion batch {args.batch} / llama-batched-bench: {ratio('orion_b', 'f16_b'):.2f}x; / transformers "
              f"bf16 batch: {ratio('orion_b', 'hf_b'):.2f}x; / transformers fp32 batch: "
              f"{ratio('orion_b', 'hf32_b'):.2f}x")
    if int8:
        print(f"orion int8 / orion fp16: decode {ratio('orion8_dc', 'orion_dc'):.2f}x (target >= 1.0)")
    print(f"orion / transformers: decode {ratio('orion_dc', 'hf_dc'):.2f}x bf16, {ratio('orion_dc', 'hf32_dc'):.2f}x fp32")
    print("(ratios: median over rounds of the same round's ratio)")
    loads = ", ".join(f"{r['load']:.2f}" for r in rounds)
    print(f"orion: {ours['compiles']} programs compiled in {ours['compile_s']:.1f} s per round (not timed); "
          f"1-minute load average at each round's start: {loads}, at the end {os.getloadavg()[0]:.2f}")
    print(f"checkpoint and GGUFs: {work}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
