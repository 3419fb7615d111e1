"""Current model families at real sizes: a Qwen3-0.6B-shaped and a Llama-3.2-1B-shaped random model, orion
on the simulator next to HF transformers (bf16 and fp32, the CPU build of torch) in the same run.

For each shape a random checkpoint is written once with transformers (bf16 safetensors, as the Hub ships
them). Then each system runs in its own process, so that peak RSS is its own:

* orion: ``orion.models.load`` (conversion to fp16 + weight cache), compile of the prefill and decode
  program sets (reported separately), prefill of a 64-token prompt, 32 greedy decode steps;
* transformers: ``AutoModelForCausalLM.from_pretrained(dtype=...)``, eager attention, a forward over the
  prompt with the cache, then 31 single-token steps with ``past_key_values`` under ``inference_mode``.

Medians over ``--repeats``; ratios are orion / transformers (higher tok/s is better). Needs torch and
transformers (not dependencies of orion):

    PYTHONPATH=python:BUILD python benchmarks/bench_families.py [--shapes qwen3-0.6b llama3.2-1b]
        [--prompt 64] [--tokens 32] [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

SHAPES = {
    "qwen3-0.6b": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024,
                   "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
                   "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
                   "bos_token_id": 151643, "eos_token_id": 151645},
    "llama3.2-1b": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
                    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                    "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072,
                    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
                    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                    "bos_token_id": 128000, "eos_token_id": 128001},
}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0      # Linux: KiB


def make_checkpoint(shape: str, folder: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    d = dict(SHAPES[shape])
    cfg = AutoConfig.for_model(d.pop("model_type"), **{k: v for k, v in d.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)


def run_orion(folder: str, prompt: list[int], n: int, repeats: int, cache: str) -> dict:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    from orion.models import load
    t = time.perf_counter()
    m = load(folder, device="sim", cache=cache)
    eng = m.engine
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    eng.prepare(len(prompt), len(prompt) + n)
    compile_s = time.perf_counter() - t
    prefill, steps, toks = [], [], []
    for _ in range(repeats):
        eng.reset(len(prompt) + n)
        t = time.perf_counter()
        logits = eng.prefill(prompt)
        prefill.append(time.perf_counter() - t)
        toks = [int(np.argmax(logits))]
        for _ in range(n - 1):
            t = time.perf_counter()
            logits = eng.step(toks[-1])
            steps.append(time.perf_counter() - t)
            toks.append(int(np.argmax(logits)))
    return dict(load_s=load_s, compile_s=compile_s, compiles=eng.compiles, prefill_s=float(np.median(prefill)),
                step_s=float(np.median(steps)), tokens=toks, fp16_plan=str(eng.fp16), rss_mb=_peak_rss_mb())


def run_hf(folder: str, prompt: list[int], n: int, repeats: int, dtype: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(os.cpu_count() or 1)
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype), attn_implementation="eager")
    model.eval()
    load_s = time.perf_counter() - t
    ids = torch.tensor([prompt])
    prefill, steps, toks = [], [], []
    with torch.inference_mode():
        for _ in range(repeats):
            t = time.perf_counter()
            out = model(ids, use_cache=True)
            prefill.append(time.perf_counter() - t)
            past = out.past_key_values
            toks = [int(out.logits[0, -1].argmax())]
            for _ in range(n - 1):
                t = time.perf_counter()
                out = model(torch.tensor([[toks[-1]]]), past_key_values=past, use_cache=True)
                steps.append(time.perf_counter() - t)
                past = out.past_key_values
                toks.append(int(out.logits[0, -1].argmax()))
    return dict(load_s=load_s, prefill_s=float(np.median(prefill)), step_s=float(np.median(steps)), tokens=toks,
                rss_mb=_peak_rss_mb(), threads=torch.get_num_threads())


def _child(args) -> None:
    prompt = json.loads(args.prompt_ids)
    if args.system == "orion":
        r = run_orion(args.folder, prompt, args.tokens, args.repeats, args.cache)
    else:
        r = run_hf(args.folder, prompt, args.tokens, args.repeats, args.system.split("-")[1])
    print("RESULT " + json.dumps(r))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--systems", nargs="+", default=["orion", "hf-bfloat16", "hf-float32"])
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-ids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    results = {}
    with tempfile.TemporaryDirectory(prefix="orion-bench-families-") as tmp:
        for shape in args.shapes:
            folder = os.path.join(tmp, shape)
            t = time.perf_counter()
            make_checkpoint(shape, folder)
            print(f"# {shape}: random bf16 checkpoint written in {time.perf_counter() - t:.0f} s", flush=True)
            V = SHAPES[shape]["vocab_size"]
            prompt = np.random.default_rng(0).integers(0, V, args.prompt).tolist()
            for system in args.systems:
                cmd = [sys.executable, os.path.abspath(__file__), "--child", "--system", system, "--folder", folder,
                       "--cache", os.path.join(tmp, "cache"), "--prompt-ids", json.dumps(prompt),
                       "--tokens", str(args.tokens), "--repeats", str(args.repeats)]
                out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
                line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    raise SystemExit(f"{shape}/{system} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
                results[(shape, system)] = json.loads(line[7:])
                r = results[(shape, system)]
                print(f"  {system:12s} prefill {args.prompt / r['prefill_s']:8.1f} tok/s  decode "
                      f"{1 / r['step_s']:6.2f} tok/s  load {r['load_s']:.1f} s  "
                      + (f"compile {r['compile_s']:.1f} s ({r['compiles']} programs)  " if "compile_s" in r else "")
                      + f"peak RSS {r['rss_mb']:.0f} MB", flush=True)
            o = results.get((shape, "orion"))
            for system in args.systems:
                if system == "orion" or o is None:
                    continue
                h = results[(shape, system)]
                same = sum(a == b for a, b in zip(o["tokens"], h["tokens"]))
                print(f"  orion / {system}: prefill x{h['prefill_s'] / o['prefill_s']:.2f}, decode "
                      f"x{h['step_s'] / o['step_s']:.2f}; greedy ids equal {same}/{len(o['tokens'])}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({f"{k[0]}/{k[1]}": v for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
