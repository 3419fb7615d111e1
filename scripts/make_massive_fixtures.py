#!/usr/bin/env python3
"""Generate tests/fixtures/models/massive/: bf16 checkpoints with "massive activations".

Run from the repository root (needs torch and transformers 5.x; no network):

    python scripts/make_massive_fixtures.py

Each family fixture of tests/fixtures/models (llama3, qwen2, qwen3, mistral, phi3, gemma3) is edited so
that ONE projection of layer 0 - the attention output (o_proj) or the MLP output (down_proj) - reaches a
target peak (2e5 or 6e5: beyond fp16's 65,504, as bf16-trained Qwen2/Llama checkpoints do at a few
hidden dimensions) at one trigger token of the prompt only, and saved in bf16 as such checkpoints are.

The edit (HF tensor names, layer 0; channel C carries the trigger, channel C2 receives the peak):
  * ``embed_tokens[:, C] = 0`` except the trigger token's row (a large value): after the input norm only
    the trigger token has a component along C;
  * mlp: the gate and up rows of intermediate unit J read only channel C (so every other token's unit J
    is exactly 0), ``o_proj[C, :] = 0`` (attention does not write into C), ``down_proj[C2, J] = w``;
  * attn: the value row JV reads only channel C (every other token's value there is 0), one query
    head's column of ``o_proj`` row C2 (the head that reads JV) is ``w``;
  w is solved so that the projection's peak over the prompt (measured with a forward hook in fp32 on the
bf16 weights) hits the target; the peak reached is recorded.

Each folder: config.json + model.safetensors (bf16) + the base fixture's tokenizer files + reference.npz
with ``ids`` (the base prompt's first 24 ids with the trigger at position 9), ``trigger``, ``site``,
``peak`` (the projection's measured max |output|), ``logits`` (fp32 compute on the bf16 weights, every
position), ``logits_bf16`` (bf16 compute), ``greedy`` (8 greedy ids, fp32 compute, EOS stop disabled).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "tests/fixtures/models"
OUT = BASE / "massive"
FAMILIES = ("llama3", "qwen2", "qwen3", "mistral", "phi3", "gemma3")
SITES = ("attn", "mlp")
TARGETS = {"2e5": 2e5, "6e5": 6e5}
C, C2, J, JV = 3, 5, 7, 2          # trigger channel, peak channel, MLP unit, value row (kv head 0)
TRIGGER_AT = 9
N_IDS = 24
N_GREEDY = 8
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def load(folder: Path, dtype):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()


def _mlp_rows(sd, p, ff):
    """(gate rows, up rows) views of layer p's MLP (Phi-3 fuses them as gate_up_proj: gate first)."""
    if p + "mlp.gate_up_proj.weight" in sd:
        gu = sd[p + "mlp.gate_up_proj.weight"]
        return gu[:ff], gu[ff:]
    return sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]


def _v_rows(sd, p, qd, kvd):
    if p + "self_attn.qkv_proj.weight" in sd:
        return sd[p + "self_attn.qkv_proj.weight"][qd + kvd:]
    return sd[p + "self_attn.v_proj.weight"]


def edit(model, site: str, trigger: int, w: float) -> None:
    """Applies the edit of the module docstring in place (fp32 parameters)."""
    cfg = model.config
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    qd, kvd = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    sd = dict(model.named_parameters())
    p = "model.layers.0."
    with torch.no_grad():
        emb = sd["model.embed_tokens.weight"]
        emb[:, C] = 0.0
        emb[trigger, C] = 4.0 * float(emb.abs().max())
        if site == "mlp":
            gate, up = _mlp_rows(sd, p, cfg.intermediate_size)
            for rows in (gate, up):
                rows[J] = 0.0
                rows[J, C] = 4.0
            sd[p + "self_attn.o_proj.weight"][C] = 0.0
            sd[p + "mlp.down_proj.weight"][C2, J] = w
        else:
            v = _v_rows(sd, p, qd, kvd)
            v[JV] = 0.0
            v[JV, C] = 256.0          # a large value: the o_proj weight stays far inside fp16
            kvh, r = divmod(JV, hd)
            sd[p + "self_attn.o_proj.weight"][C2, kvh * group * hd + r] = w


def projection_out(model, site: str, ids: torch.Tensor) -> np.ndarray:
    """The layer-0 projection's output [n, d] (fp32)."""
    mod = model.model.layers[0].mlp.down_proj if site == "mlp" else model.model.layers[0].self_attn.o_proj
    seen = []
    h = mod.register_forward_hook(lambda m, i, o: seen.append(o[0].float().numpy().copy()))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        h.remove()
    return seen[0]


def greedy_ids(model, ids: torch.Tensor) -> np.ndarray:
    gc = model.generation_config
    gc.eos_token_id = None
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GREEDY, do_sample=False,
                         eos_token_id=None, pad_token_id=gc.pad_token_id if gc.pad_token_id is not None else 0,
                         generation_config=gc)
    return out[0, ids.shape[1]:].numpy().astype(np.int64)


def make(family: str, site: str, tname: str) -> dict:
    base = BASE / family
    folder = OUT / f"{family}_{site}_{tname}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    ids0 = np.load(base / "reference.npz")["ids"][:N_IDS].astype(np.int64)
    vocab = load(base, torch.float32).config.vocab_size
    # the trigger: the highest id found nowhere else in the prompt
    trigger = int(next(t for t in range(vocab - 1, 0, -1) if t not in set(ids0.tolist())))
    ids = ids0.copy()
    ids[TRIGGER_AT] = trigger
    t = torch.from_numpy(ids[None])
    # w: the peak channel's output is affine in w (one weight feeds it); solved from two probes
    probes = []
    for w in (0.0, 1.0):
        m = load(base, torch.float32)
        edit(m, site, trigger, w)
        probes.append(projection_out(m.to(torch.bfloat16).to(torch.float32), site, t)[:, C2])
    a, b = probes[0], probes[1] - probes[0]
    at = int(np.argmax(np.abs(b)))
    w = float((np.sign(b[at]) * TARGETS[tname] - a[at]) / b[at])
    m = load(base, torch.float32)
    edit(m, site, trigger, w)
    m = m.to(torch.bfloat16)
    m.config.dtype = torch.bfloat16
    m.save_pretrained(folder, safe_serialization=True)
    for f in TOKENIZER_FILES:
        if (base / f).exists():
            shutil.copy(base / f, folder / f)
    m32 = load(folder, torch.float32)
    peak = float(np.abs(projection_out(m32, site, t)).max())
    with torch.no_grad():
        logits = m32(t).logits[0].float().numpy()
        greedy = greedy_ids(m32, t)
        m16 = load(folder, torch.bfloat16)
        logits_bf16 = m16(t).logits[0].float().numpy()
    assert np.isfinite(logits).all() and np.isfinite(logits_bf16).all()
    assert peak > 0.9 * TARGETS[tname], (folder.name, peak)
    np.savez_compressed(folder / "reference.npz", ids=ids, trigger=np.int64(trigger), site=np.array(site),
                        peak=np.float64(peak), logits=logits.astype(np.float32),
                        logits_bf16=logits_bf16.astype(np.float32), greedy=greedy)
    return dict(w=round(float(w), 3), peak=round(peak), maxabs=float(np.abs(logits).max()),
                kb=sum(p.stat().st_size for p in folder.iterdir()) // 1024)


def main(argv: list[str]) -> int:
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    families = argv or FAMILIES
    for fam in families:
        for site in SITES:
            for tname in TARGETS:
                print(fam, site, tname, json.dumps(make(fam, site, tname)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
