"""What the int8 CPU classifier costs in quality, beside what the layers' compression costs: the fp16 model's greedy
continuation of BOS (120 tokens) as the text, then KL, correlation, top-1 and perplexity of the quantized model
with the fp16 and with the int8 classifier against the fp16 model's logits, for int8 and lut4 layers.

    PYTHONPATH=python:BUILD python scripts/classifier_quality.py MODEL   (e.g. ../shared/data/stories260K.bin)
"""

from __future__ import annotations

import sys

import numpy as np

from orion.models import load
from orion.quant.quality import quality_report


def logits(m, ids) -> np.ndarray:
    eng = m.engine
    eng.reset(len(ids) + 16)
    return np.asarray(eng.prefill(ids, all_logits=True), np.float64)


def main() -> None:
    path = sys.argv[1]
    base = load(path, device="sim")
    ids = [1] + list(base.generate([1], max_tokens=120, temperature=0).tokens)
    ref = logits(base, ids)
    for scheme in ("int8", "lut4"):
        for cls in ("fp16", "int8"):
            r = quality_report(ref[:-1], logits(load(path, device="sim", quantize=scheme, classifier_weights=cls),
                                                ids)[:-1], ids[1:])
            print(f"{scheme} layers, {cls} classifier: KL {r.kl_divergence:.3g} corr {r.correlation:.5f} top-1 "
                  f"{r.top1_match:.3f} perplexity {r.perplexity_ref:.3f} -> {r.perplexity_test:.3f}")


if __name__ == "__main__":
    main()
