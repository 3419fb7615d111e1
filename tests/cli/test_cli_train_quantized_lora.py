"""``orion train --lora ... --quantize lut4``: adapters trained on a compressed frozen base (QLoRA-style).
The per-layer programs bake the base linears as constexpr ops; the run records the scheme and a resume
re-applies it; --quantize without --lora is a usage error (exit 2)."""

from __future__ import annotations

import numpy as np

from orion.cli.train import main

from conftest import TRAIN_FAST as FAST


def test_lora_on_a_lut4_base(tmp_path, capsys, micro_base_run):
    run = str(tmp_path / "qlora")
    assert main(FAST[2:] + ["--model", micro_base_run, "--lora", "r=4,alpha=8,targets=q,v,w2", "--quantize", "lut4", "--steps",
                            "3", "--ckpt-dir", run, "--sample-tokens", "0"]) == 0
    out = capsys.readouterr().out
    assert "LoRA r=4 alpha=8" in out and "compiles 0 loads 0 during training" in out
    from orion.train.checkpoint import read_state
    assert read_state(run)["lora_quantize"] == "lut4"
    assert main(["--resume", run, "--steps", "4", "--no-progress", "--sample-tokens", "0"]) == 0
    assert "steps 3->4" in capsys.readouterr().out


def test_quantize_needs_lora(capsys):
    assert main(FAST + ["--quantize", "lut4", "--steps", "1", "--no-ckpt"]) == 2
    assert "needs --lora" in capsys.readouterr().err


def test_lora_programs_bake_the_compressed_base():
    import orion
    from orion.models.quantize import quantize_model
    from orion.train.model import PRESETS, init_params
    from orion.train.programs import build_graph, layer_weights
    cfg = PRESETS["micro"]
    params, _ = quantize_model(init_params(cfg, 0), "lut4")
    r = 4
    lora = {"w2": (np.zeros((r, cfg.d_ff), np.float32), np.zeros((cfg.d_model, r), np.float32))}
    for kind in ("ffn_fwd", "ffn_bwd"):
        g = build_graph(kind, cfg, 64, layer_weights(kind, params, 0), lora=lora)
        mil = orion.compile(g, device="sim").mil
        assert "constexpr_lut_to_dense" in mil, kind
