"""A trained model in the Hugging Face layout of its family: config.json and model.safetensors, as the writers
of a checkpoint step folder and of ``--export-hf`` both produce them."""

from __future__ import annotations

import json

import numpy as np

from ..models.families import family_module
from ..models.loaders import canonical_to_hf
from ..native import safetensors as st


def hf_model_files(cfg, params: dict) -> tuple[dict, dict]:
    """({file name: writer(f)} for config.json (the family's :func:`hf_config`) and model.safetensors (fp32, HF
    names, rotate-half q/k rows, fused tensors re-fused, Gemma's norm offset subtracted), the HF tensors)."""
    t = canonical_to_hf(cfg, {k: np.asarray(v, np.float32) for k, v in params.items()})
    t = {k: np.ascontiguousarray(v, np.float32) for k, v in t.items()}
    hc = family_module(cfg.model_type).hf_config(cfg)
    hc["torch_dtype"] = "float32"
    body = (json.dumps(hc, indent=2) + "\n").encode()
    return {"model.safetensors": lambda f: st.write(f, t, {"format": "pt"}),
            "config.json": lambda f: f.write(body)}, t
