"""What ``orion train`` does with no arguments: the ``tiny`` Llama on the shipped story corpus, with a
SentencePiece tokenizer trained on the fly, sized to finish in a few minutes on 2 cores in the simulator.
"""

from __future__ import annotations

import os

DEFAULT_PRESET = "tiny"
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "stories.txt")
DEFAULT_CKPT_DIR = "orion-train-run"
SAMPLE_PROMPT = "Once upon a time"

# Training settings of the default run (any CLI option overrides them).
DEFAULTS = dict(
    preset=DEFAULT_PRESET,
    steps=300,
    batch=8,
    accum=1,
    lr=2e-3,
    warmup=20,
    min_lr_ratio=0.1,
    weight_decay=0.1,
    clip=1.0,
    loss_scale=256.0,
    seed=1337,
    strategy="dynamic",
    device="auto",
    val_fraction=0.05,
    eval_interval=100,
    eval_batches=4,
    ckpt_interval=100,
    keep=2,
)

# Training window of ``--init`` runs without --seq-len (at most the model's context).
INIT_SEQ_LEN = 512

# What ``--lora`` changes (adapters start at B = 0 and learn faster than a whole model; no weight decay
# on them, as PEFT's usual recipes).
LORA_DEFAULTS = dict(
    lr=5e-3,
    weight_decay=0.0,
    warmup=10,
)


def default_corpus() -> str:
    return CORPUS
