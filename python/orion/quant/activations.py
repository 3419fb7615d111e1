"""Static int8 activation scales for W8A8 (experimental).

A W8A8 model runs every quantized linear (int8 weights, :func:`orion.quant.quantize_int8`) on an int8
input: ``x -> quantize(int8, s) -> dequantize(s) -> linear``, the MIL ``quantize`` / ``dequantize`` pair
(iOS17) with one static fp16 scale ``s`` per linear input (per tensor, symmetric, no zero point).

Arithmetic (what the simulator computes and :func:`fake_quant` reproduces bit for bit):
``q = clip(round_half_even(x / s), -128, 127)`` as coremltools documents and constant-folds ``quantize``
(``clip(round(input / scale) + zero_point)``, ``np.around``); the quotient of two fp16 values is never within
half an fp32 ulp of a rounding tie unless it is one, so dividing in fp32 or exactly gives the same ``q``;
NaN -> 0 (the simulator's choice; the hardware's is unknown). ``dequantize``: ``fp16(q * s)``, an exact
product rounded once. The linear then multiplies those fp16 values like any fp16 input.

Calibration (:func:`orion.models.calibration.calibrate`): the scales come from running the fp16 model's definition in float64 on
the host (:class:`orion.models.host_run.HostRun`, tapping every linear's input) on calibration tokens.
``method="max"`` (the default): ``s`` is the smallest fp16 value with ``127 s >= max|x|``, so no calibration
value is clipped. Why max-abs by default: LLM activations carry a few large outlier features the model
depends on (LLM.int8(), Dettmers et al. 2022), which a percentile clips; max-abs is also the statistic
that needs no tuning. ``method="percentile"``: the ``percentile``-th percentile of ``|x|`` (default 99.99)
instead: a finer step for the bulk, the tail saturates. Measured side by side in
benchmarks/RESULTS.md ("W8A8 (experimental)"): on the small trained model there the percentile gives the
lower KL; such small models have no outlier features to protect, so that does not settle larger ones.

The scales are saved as ``activation_scales.json`` in a model folder (``<file>.activation_scales.json``
next to a checkpoint file) and read back with every field checked (:meth:`ActivationScales.load`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, ModelFormatError
from ..fileio import read_json, write_bytes_atomic

__all__ = ["ACTIVATION_DTYPES", "METHODS", "SCALES_FILE", "ActivationScales", "fake_quant", "quantize_activation",
           "dequantize_activation", "scales_path"]

ACTIVATION_DTYPES = ("int8",)
METHODS = ("max", "percentile")
SCALES_FILE = "activation_scales.json"
_FORMAT = "orion.activation_scales"
_VERSION = 1
QMAX = 127
_FIELDS = {"format": str, "version": int, "dtype": str, "method": str, "percentile": (float, int, type(None)),
           "calibration_tokens": int, "scales": dict}


def scales_path(model_path) -> str:
    """Where a model's activation scales live: ``FOLDER/activation_scales.json`` for a model folder,
    ``FILE.activation_scales.json`` next to a single-file checkpoint (llama2.c ``.bin``)."""
    p = os.fspath(model_path)
    return os.path.join(p, SCALES_FILE) if os.path.isdir(p) else p + "." + SCALES_FILE


def _fp16_scale(v, where: str, error=ModelFormatError) -> float:
    """``v`` as a Python float when it is a positive finite value exactly representable in fp16."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)):
        raise error(f"{where}: a scale must be a number, got {v!r}")
    try:
        f = float(v)
    except OverflowError:                       # an integer beyond float range (JSON has no bound)
        f = math.inf
    if not (math.isfinite(f) and f > 0):
        raise error(f"{where}: a scale must be a positive finite number, got {v!r:.40}")
    with np.errstate(over="ignore"):
        f16 = float(np.float16(f))
    if f16 != f:
        # the programs hold the scale as fp16: only a value fp16 stores exactly keeps the host reference equal
        if f > 65504.0:
            near = "the largest fp16 value is 65504"
        elif f16 == 0.0:
            near = f"the smallest positive fp16 value is 2**-24 = {2.0 ** -24!r}"
        else:
            near = f"the nearest fp16 value is {f16!r}"
        pow2 = 2.0 ** min(15, max(-24, round(math.log2(f))))
        raise error(f"{where}: a scale must be exactly representable in fp16 (the programs hold it as fp16), and "
                    f"{f!r} is not: {near} (a power of two such as {pow2!r} always is)")
    return f


@dataclass(frozen=True)
class ActivationScales:
    """One static fp16 scale per quantized linear's input (canonical weight name -> scale), and how
    they were calibrated."""

    scales: dict                 #: ``layers.0.wq`` (the linear's weight name) -> fp16 scale as a float
    dtype: str = "int8"
    method: str = "max"
    percentile: float | None = None
    calibration_tokens: int = 0

    def __post_init__(self):
        if self.dtype not in ACTIVATION_DTYPES:
            raise InputError(f"activation dtype must be one of {', '.join(ACTIVATION_DTYPES)}, got {self.dtype!r}")
        if self.method not in METHODS:
            raise InputError(f"calibration method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not isinstance(self.scales, dict) or not self.scales:
            raise InputError("activation scales: at least one linear's scale is needed")
        object.__setattr__(self, "scales", {str(k): _fp16_scale(v, f"activation scale of {k}", InputError)
                                            for k, v in self.scales.items()})

    def __getitem__(self, name: str) -> float:
        return self.scales[name]

    def check_names(self, names, where: str) -> None:
        """Raises :class:`ModelFormatError` unless the scales name exactly the linears ``names``."""
        want, have = set(names), set(self.scales)
        if want - have:
            raise ModelFormatError(f"{where}: no activation scale for the quantized linear(s) "
                                   f"{sorted(want - have)[:5]}; calibrate again for this model")
        if have - want:
            raise ModelFormatError(f"{where}: activation scales for {sorted(have - want)[:5]}, which are not "
                                   f"quantized linears of this model; were they calibrated for another model?")

    def input_scale(self, name: str, gain: float = 1.0) -> np.float16:
        """The fp16 scale of the int8 input of the linear ``name`` (a graph's ``dequantize(quantize(x, int8, s),
        s)``); ``gain`` (a power of two): ``x`` is the calibrated activation times it (a scaled residual
        stream's sublayer), so the scale is too and the int8 values are the same."""
        if name not in self.scales:
            raise InputError(f"W8A8: no activation scale for the linear {name!r}")
        return np.float16(self.scales[name] * gain)

    def reference_input(self, name: str, x: np.ndarray) -> np.ndarray:
        """The same quantize -> dequantize in float64 (a ``linear_input`` hook of the float reference)."""
        if name not in self.scales:
            return x
        s = self.scales[name]
        with np.errstate(invalid="ignore"):
            return np.clip(np.rint(np.asarray(x, np.float64) / s), -128, QMAX) * s

    # -- files ---------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"format": _FORMAT, "version": _VERSION, "dtype": self.dtype, "method": self.method,
                "percentile": self.percentile, "calibration_tokens": int(self.calibration_tokens),
                "scales": dict(sorted(self.scales.items()))}

    def save(self, model_path) -> str:
        """Writes the scales for the model at ``model_path`` (see :func:`scales_path`); returns the file."""
        path = scales_path(model_path)
        write_bytes_atomic(path, (json.dumps(self.to_json(), indent=1) + "\n").encode("utf-8"))
        return path

    @classmethod
    def from_json(cls, obj, where: str) -> "ActivationScales":
        if not isinstance(obj, dict):
            raise ModelFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        for k in obj:
            if k not in _FIELDS:
                raise ModelFormatError(f"{where}: unknown field {k!r} (known: {', '.join(_FIELDS)})")
        for k, t in _FIELDS.items():
            if k not in obj:
                raise ModelFormatError(f"{where}: field {k!r} is missing")
            if isinstance(obj[k], bool) or not isinstance(obj[k], t):
                raise ModelFormatError(f"{where}: field {k!r} has the wrong type ({type(obj[k]).__name__})")
        if obj["format"] != _FORMAT or obj["version"] != _VERSION:
            raise ModelFormatError(f"{where}: format {obj['format']!r} version {obj['version']!r} is not "
                                   f"{_FORMAT!r} version {_VERSION}")
        if obj["dtype"] not in ACTIVATION_DTYPES:
            raise ModelFormatError(f"{where}: field 'dtype' is {obj['dtype']!r}; known: {', '.join(ACTIVATION_DTYPES)}")
        if obj["method"] not in METHODS:
            raise ModelFormatError(f"{where}: field 'method' is {obj['method']!r}; known: {', '.join(METHODS)}")
        if (obj["method"] == "percentile") != (obj["percentile"] is not None):
            raise ModelFormatError(f"{where}: field 'percentile' must be a number exactly when method is "
                                   f"'percentile', got {obj['percentile']!r} with method {obj['method']!r}")
        if obj["calibration_tokens"] < 1:
            raise ModelFormatError(f"{where}: field 'calibration_tokens' must be >= 1, got {obj['calibration_tokens']}")
        if not obj["scales"]:
            raise ModelFormatError(f"{where}: field 'scales' is empty")
        scales = {k: _fp16_scale(v, f"{where}: scales[{k!r}]") for k, v in obj["scales"].items()}
        return cls(scales, obj["dtype"], obj["method"], obj["percentile"], obj["calibration_tokens"])

    @classmethod
    def load(cls, path) -> "ActivationScales":
        """Reads a scales file (or the one of a model: a folder / checkpoint path, see :func:`scales_path`)."""
        p = os.fspath(path)
        if not p.endswith(".json"):
            p = scales_path(p)
        obj = read_json(p, ModelFormatError, missing="no activation scales; calibrate them (calibration=TEXT or "
                        "token ids, or orion ... --calibration FILE) and save them with ActivationScales.save",
                        invalid="cannot read the activation scales")
        return cls.from_json(obj, p)


# -- the arithmetic, in numpy --------------------------------------------------------------------

def quantize_activation(x, scale) -> np.ndarray:
    """int8 ``clip(round_half_even(x / s), -128, 127)`` of fp16 ``x`` (NaN -> 0), as the simulator's
    ``quantize`` computes it; the float64 quotient of two fp16 values rounds like the exact one."""
    x = np.asarray(x, np.float16).astype(np.float64)
    with np.errstate(invalid="ignore"):
        q = np.rint(x / float(np.float16(scale)))
    return np.clip(np.nan_to_num(q, nan=0.0), -128, QMAX).astype(np.int8)


def dequantize_activation(q, scale) -> np.ndarray:
    """fp16 ``q * s`` (exact in fp32: 8 + 11 significant bits, then one rounding to fp16)."""
    return (np.asarray(q, np.float32) * np.float32(np.float16(scale))).astype(np.float16)


def fake_quant(x, scale) -> np.ndarray:
    """quantize -> dequantize of fp16 ``x``: the fp16 values a W8A8 linear multiplies."""
    return dequantize_activation(quantize_activation(x, scale), scale)
