"""``Model._repr_html_``: the configuration, tokenizer, programs compiled so far, fp16 plan and adapter. Reads
what exists; never builds the engine (that compiles programs and measures the fp16 plan)."""

from __future__ import annotations

from .. import _html


def _config_rows(cfg) -> list[tuple[str, object]]:
    keys = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size", "n_ctx", "norm_eps",
            "tie_embeddings", "rope_theta", "sliding_window")
    rows = [("family / model_type", f"{cfg.family} / {cfg.model_type}")]
    for k in keys:
        v = getattr(cfg, k, None)
        if v is not None:
            rows.append((k, v))
    return rows


def model_html(model) -> str:
    cfg = model.config
    tok = model.tokenizer
    tok_text = "none (pass token ids, or load with tokenizer=PATH)" if tok is None else (
        f"{type(tok).__name__}, {getattr(tok, 'vocab_size', '?')} tokens"
        + (f", {getattr(tok, 'path')}" if getattr(tok, "path", None) else ""))
    eng = model._engine
    if eng is None:
        progs = "none yet (compiled at the first generation)"
        fp16 = "not measured yet (at the first generation)"
    else:
        sets = ", ".join(f"S={s} T={t}" for s, t in sorted(eng.sets))
        progs = (f"{eng.compiles} compiled in {eng.compile_seconds:.1f} s on {eng.device}"
                 + (f" (stage sets {sets})" if sets else "") + f"; classifier on {eng.classifier}")
        p = eng.compile_plan()
        progs += (f"; plan: {p['per_set']} per program set ({p['layers']} layers), a generation {p['generate']}, "
                  f"a batch +{p['batch']}")
        fp16 = (f"residual stream scale {eng.fp16.scale:g}, stable norms {eng.fp16.stable_norms}"
                if eng.fp16.scale != 1.0 or eng.fp16.stable_norms else "plain (no scaling needed)")
    ad = model.adapter
    ad_text = "none (base model)" if ad is None else (
        f"{ad.name or 'LoRA'}: r={ad.config.r}, alpha={ad.config.alpha:g}, {len(ad.names)} linears")
    rows = _config_rows(cfg) + [("tokenizer", tok_text), ("stop tokens", model.stop_tokens),
                                ("device", model.device), ("programs", progs), ("fp16 plan", fp16),
                                ("adapter", ad_text)]
    return _html.title("orion.models.Model", model.name) + _html.items(rows)
