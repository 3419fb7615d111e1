"""Independent checkpoint writers for the loader tests (byte layouts as the formats'
own writers produce them: HF GPT-2 and Llama tensor names and shapes, llama2.c export.py headers; no orion
loader code)."""

from __future__ import annotations

import json
import os
import struct

import numpy as np



def write_safetensors(path, tensors, metadata=None, bf16=False):
    """Plain safetensors writer (u64 header length, JSON header, raw little-endian data)."""
    names = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<f8"): "F64"}
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for k, a in tensors.items():
        a = np.ascontiguousarray(a)
        if bf16:
            raw = (np.asarray(a, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
            dt = "BF16"
        else:
            raw, dt = a.tobytes(), names[a.dtype]
        header[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _stack(w, cfg, key):
    return np.stack([np.asarray(w[f"layers.{i}.{key}"], np.float32) for i in range(cfg.n_layers)])


def write_llama2c_v0(path, cfg, w, shared=None, freq_cis=True):
    shared = cfg.tie_embeddings if shared is None else shared
    V = cfg.vocab_size if shared else -cfg.vocab_size
    hd = cfg.d_model // cfg.n_heads
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, V, cfg.n_ctx))
        f.write(np.asarray(w["tok_emb"], "<f4").tobytes())
        for key in ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"):
            f.write(_stack(w, cfg, key).astype("<f4").tobytes())
        f.write(np.asarray(w["rms_final"], "<f4").tobytes())
        if freq_cis:
            f.write(np.zeros(cfg.n_ctx * hd, "<f4").tobytes())
        if not shared:
            f.write(np.asarray(w["wcls"], "<f4").tobytes())


def _header(version, cfg, shared, group_size=None):
    h = struct.pack("<I", 0x616B3432) + struct.pack("<i", version)
    h += struct.pack("<7i", cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size, cfg.n_ctx)
    h += struct.pack("<B", int(shared))
    if group_size is not None:
        h += struct.pack("<i", group_size)
    return h + b"\0" * (256 - len(h))


def write_llama2c_v1(path, cfg, w):
    shared = cfg.tie_embeddings
    with open(path, "wb") as f:
        f.write(_header(1, cfg, shared))
        for key in ("rms_att", "rms_ffn"):
            f.write(_stack(w, cfg, key).astype("<f4").tobytes())
        f.write(np.asarray(w["rms_final"], "<f4").tobytes())
        f.write(np.asarray(w["tok_emb"], "<f4").tobytes())
        for key in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            f.write(_stack(w, cfg, key).astype("<f4").tobytes())
        if not shared:
            f.write(np.asarray(w["wcls"], "<f4").tobytes())


def q80(a, gs):
    """llama2.c export.py quantize_q80: symmetric int8 per group of gs values."""
    a = np.asarray(a, np.float32).reshape(-1, gs)
    scale = np.abs(a).max(axis=1) / 127.0
    q = np.round(a / np.where(scale == 0, 1, scale)[:, None]).astype(np.int8)
    return q, scale.astype(np.float32)


def write_llama2c_v2(path, cfg, w, group_size=64):
    gs = group_size
    while cfg.d_model % gs:
        gs //= 2
    shared = cfg.tie_embeddings
    deq = {}
    with open(path, "wb") as f:
        f.write(_header(2, cfg, shared, gs))
        for key in ("rms_att", "rms_ffn"):
            f.write(_stack(w, cfg, key).astype("<f4").tobytes())
        f.write(np.asarray(w["rms_final"], "<f4").tobytes())
        mats = [("tok_emb", w["tok_emb"])]
        for key in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            mats += [(f"layers.{i}.{key}", w[f"layers.{i}.{key}"]) for i in range(cfg.n_layers)]
        if not shared:
            mats.append(("wcls", w["wcls"]))
        for name, a in mats:
            q, s = q80(a, gs)
            f.write(q.tobytes())
            f.write(s.astype("<f4").tobytes())
            deq[name] = (q.astype(np.float32) * s[:, None]).reshape(np.shape(a))
    return deq


def hf_permute(wq, n_heads):
    """llama2.c export.py permute (Meta rows -> HF rotate-half rows)."""
    rows, cols = wq.shape
    return wq.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def write_hf_gpt2(directory, cfg, w, prefix=False, lm_head=False, extra_config=None, dtype=np.float32, bf16=False):
    os.makedirs(directory, exist_ok=True)
    pre = "transformer." if prefix else ""
    t = {pre + "wte.weight": w["wte"], pre + "wpe.weight": w["wpe"], pre + "ln_f.weight": w["ln_f.g"],
         pre + "ln_f.bias": w["ln_f.b"]}
    for i in range(cfg.n_layers):
        p, q = f"h.{i}.", f"{pre}h.{i}."
        t.update({q + "ln_1.weight": w[p + "ln1.g"], q + "ln_1.bias": w[p + "ln1.b"],
                  q + "attn.c_attn.weight": np.asarray(w[p + "wqkv"]).T, q + "attn.c_attn.bias": w[p + "bqkv"],
                  q + "attn.c_proj.weight": np.asarray(w[p + "wo"]).T, q + "attn.c_proj.bias": w[p + "bo"],
                  q + "ln_2.weight": w[p + "ln2.g"], q + "ln_2.bias": w[p + "ln2.b"],
                  q + "mlp.c_fc.weight": np.asarray(w[p + "wfc"]).T, q + "mlp.c_fc.bias": w[p + "bfc"],
                  q + "mlp.c_proj.weight": np.asarray(w[p + "wproj"]).T, q + "mlp.c_proj.bias": w[p + "bproj"],
                  q + "attn.bias": np.tril(np.ones((1, 1, cfg.n_ctx, cfg.n_ctx), np.float32))})
    if lm_head:
        t["lm_head.weight"] = w["wte"]
    write_safetensors(os.path.join(directory, "model.safetensors"),
                      {k: np.ascontiguousarray(v, dtype=dtype) for k, v in t.items()}, bf16=bf16)
    conf = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": cfg.vocab_size,
            "n_positions": cfg.n_ctx, "n_embd": cfg.d_model, "n_layer": cfg.n_layers, "n_head": cfg.n_heads,
            "n_inner": cfg.d_ff, "activation_function": "gelu_new", "layer_norm_epsilon": cfg.norm_eps}
    conf.update(extra_config or {})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(conf, f)
    return t


def hf_llama_tensors(cfg, w_meta):
    """HF-named tensors from canonical (Meta/llama2.c-layout) weights, q/k rows permuted."""
    t = {"model.embed_tokens.weight": w_meta["tok_emb"], "model.norm.weight": w_meta["rms_final"]}
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"model.layers.{i}."
        t.update({q + "input_layernorm.weight": w_meta[p + "rms_att"],
                  q + "self_attn.q_proj.weight": hf_permute(np.asarray(w_meta[p + "wq"]), cfg.n_heads),
                  q + "self_attn.k_proj.weight": hf_permute(np.asarray(w_meta[p + "wk"]), cfg.n_kv_heads),
                  q + "self_attn.v_proj.weight": w_meta[p + "wv"], q + "self_attn.o_proj.weight": w_meta[p + "wo"],
                  q + "post_attention_layernorm.weight": w_meta[p + "rms_ffn"],
                  q + "mlp.gate_proj.weight": w_meta[p + "w1"], q + "mlp.up_proj.weight": w_meta[p + "w3"],
                  q + "mlp.down_proj.weight": w_meta[p + "w2"]})
    if not cfg.tie_embeddings:
        t["lm_head.weight"] = w_meta["wcls"]
    return t


def write_hf_llama(directory, cfg, w_meta, extra_config=None, dtype=np.float32, shard=False):
    os.makedirs(directory, exist_ok=True)
    t = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in hf_llama_tensors(cfg, w_meta).items()}
    if shard:
        names = sorted(t)
        half = len(names) // 2
        parts = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
        wm = {}
        for fn, ns in parts.items():
            write_safetensors(os.path.join(directory, fn), {n: t[n] for n in ns})
            wm.update({n: fn for n in ns})
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
    else:
        write_safetensors(os.path.join(directory, "model.safetensors"), t)
    conf = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
            "max_position_embeddings": cfg.n_ctx, "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta,
            "tie_word_embeddings": cfg.tie_embeddings, "hidden_act": "silu"}
    conf.update(extra_config or {})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(conf, f)
    return t
