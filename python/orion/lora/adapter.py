"""An adapter's tensors (:class:`Adapter`), new adapters (:func:`init_adapter`), the base model's
fingerprint, and adapters as PEFT folders (:func:`load`, :func:`save`, through :mod:`.files`' layout)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Mapping

import numpy as np

from .config import LoraConfig
from .errors import AdapterFormatError, AdapterMismatch, AdapterShapeError
from .files import _DIM_KEYS, _dims, read_peft, write_peft
from .targets import _family_of, _kind, fused_groups, linear_shapes, model_config, module_path, resolve_targets


def base_fingerprint(cfg, weights: Mapping[str, np.ndarray]) -> str:
    """A short hash identifying the base model: its dimensions and a strided fp16 sample of every linear
    (fp32 master weights and their fp16 inference copies give the same value)."""
    h = hashlib.sha256(json.dumps(_dims(cfg), sort_keys=True).encode())
    for n in sorted(linear_shapes(cfg)):
        a = np.asarray(weights[n]).ravel()
        step = max(1, a.size // 4096)
        h.update(n.encode())
        h.update(np.ascontiguousarray(a[::step], dtype="<f2").tobytes())
    return h.hexdigest()[:32]


# ----------------------------------------------------------------------------------------- adapter
class Adapter:
    """LoRA tensors for one model configuration: ``A[name]`` ``[r, in]``, ``B[name]`` ``[out, r]`` (float32,
    canonical names and orion layouts), the :class:`LoraConfig`, and optionally the base model's fingerprint.

    ``params()`` is a flat dict view (``<name>.lora_A`` / ``<name>.lora_B``) of the same arrays — what the
    trainer's optimizer updates in place."""

    def __init__(self, config: LoraConfig, model, A: Mapping[str, np.ndarray], B: Mapping[str, np.ndarray], *,
                 name: str | None = None, base: str | None = None, source: str | None = None):
        self.config = config
        self.model_config = model_config(model)
        self.family = _family_of(self.model_config)
        self.name = name
        self.base = base
        self.A = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in A.items()}
        self.B = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in B.items()}
        self._validate(source or name or "adapter")

    def _validate(self, source: str) -> None:
        shapes = linear_shapes(self.model_config)
        if set(self.A) != set(self.B):
            odd = sorted(set(self.A) ^ set(self.B))
            raise AdapterFormatError(f"{source}: lora_A and lora_B must come in pairs; unpaired: {odd[:4]}")
        if not self.A:
            raise AdapterFormatError(f"{source}: the adapter has no tensors")
        for n in self.A:
            if n not in shapes:
                raise AdapterMismatch(f"{source}: {n!r} is not a linear of this {_kind(self.model_config)} model "
                                      f"({self.model_config.n_layers} layers)")
            out, inp = shapes[n]
            a, b = self.A[n], self.B[n]
            if a.ndim != 2 or b.ndim != 2:
                raise AdapterShapeError(f"{source}: {n}: lora_A {list(a.shape)} and lora_B {list(b.shape)} must be "
                                        f"matrices")
            if a.shape[1] != inp or b.shape[0] != out:
                raise AdapterShapeError(f"{source}: {module_path(self.model_config, n)}: lora_A {list(a.shape)} / "
                                        f"lora_B {list(b.shape)} do not fit the linear [out={out}, in={inp}] "
                                        f"(expected lora_A [r, {inp}], lora_B [{out}, r]) — an adapter for "
                                        f"another model?")
            if a.shape[0] != b.shape[1]:
                raise AdapterShapeError(f"{source}: {module_path(self.model_config, n)}: rank mismatch: lora_A has "
                                        f"{a.shape[0]} rows, lora_B {b.shape[1]} columns")
            want = self.config.rank_for(module_path(self.model_config, n))
            if a.shape[0] != want:
                raise AdapterShapeError(f"{source}: {module_path(self.model_config, n)}: rank mismatch: the config "
                                        f"says r={want}, the tensors have rank {a.shape[0]}")
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                raise AdapterFormatError(f"{source}: {n}: NaN/inf in the adapter tensors")
        self.A = {n: self.A[n] for n in shapes if n in self.A}     # canonical order
        self.B = {n: self.B[n] for n in self.A}

    # -- description ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.A)

    @property
    def rank(self) -> int:
        return max(a.shape[0] for a in self.A.values())

    def scale(self, name: str) -> float:
        return self.config.scale_for(self.A[name].shape[0], module_path(self.model_config, name))

    def __repr__(self) -> str:
        keys = sorted({n.rsplit(".", 1)[-1] for n in self.A})
        return (f"<orion.lora.Adapter {self.name or ''} {_kind(self.model_config)}: r={self.rank} alpha={self.config.alpha:g} "
                f"on {len(self.A)} linears ({', '.join(keys)})>")

    def params(self) -> dict[str, np.ndarray]:
        out = {}
        for n in self.A:
            out[n + ".lora_A"] = self.A[n]
            out[n + ".lora_B"] = self.B[n]
        return out

    def copy(self, name: str | None = None) -> "Adapter":
        return Adapter(self.config, self.model_config, {k: v.copy() for k, v in self.A.items()},
                       {k: v.copy() for k, v in self.B.items()}, name=name or self.name, base=self.base)

    def delta(self, name: str, dtype=np.float64) -> np.ndarray:
        """``scale · B A`` ``[out, in]`` of one linear."""
        return (self.scale(name) * (self.B[name].astype(dtype) @ self.A[name].astype(dtype))).astype(dtype)

    def check_model(self, model, weights: Mapping[str, np.ndarray] | None = None, *,
                    fingerprint: str | None = None) -> None:
        """Raises :class:`AdapterMismatch` unless this adapter fits ``model`` (dimensions and, when both are
        known, the base weights' fingerprint; ``fingerprint``: the base's, when already computed)."""
        cfg = model_config(model)
        mine, theirs = _dims(self.model_config), _dims(cfg)
        diff = [f"{k} {mine[k]} vs {theirs[k]}" for k in _DIM_KEYS if mine[k] != theirs[k]]
        if not diff:
            shapes = linear_shapes(cfg)
            diff = [f"{n} {list(self.A[n].shape[1:]) + list(self.B[n].shape[:1])} vs {list(shapes.get(n, ()))[::-1]} "
                    f"(in, out)" for n in self.A if shapes.get(n) != (self.B[n].shape[0], self.A[n].shape[1])][:3]
        if diff:
            raise AdapterMismatch(f"adapter {self.name or ''} was made for another model: {', '.join(diff)} "
                                  f"(adapter vs model)")
        if self.base and (weights is not None or fingerprint is not None):
            fp = fingerprint or base_fingerprint(cfg, weights)
            if fp != self.base:
                raise AdapterMismatch(f"adapter {self.name or ''} was trained on other base weights (fingerprint "
                                      f"{self.base[:12]}, this model {fp[:12]}); pass check_base=False to use it "
                                      f"anyway")

    # -- fused modules ------------------------------------------------------------------------------
    @property
    def tied(self) -> list[tuple[str, ...]]:
        """Groups of linears whose lora_A a PEFT file holds once (the parts of a fused module, e.g. Phi-3's
        wq/wk/wv in ``qkv_proj``); :meth:`save` needs each group's A equal."""
        return [g for g in fused_groups(self.model_config, self.names) if len(g) > 1]

    def tie_gradients(self, grads: dict) -> None:
        """Replaces the ``<name>.lora_A`` gradients of every :attr:`tied` group by their sum, in place: with
        equal starting values, an optimizer stepping each copy then keeps them equal — the gradient of the
        one shared lora_A of the fused module."""
        for g in self.tied:
            keys = [n + ".lora_A" for n in g if n + ".lora_A" in grads]
            if len(keys) > 1:
                total = sum(np.asarray(grads[k], np.float64) for k in keys)
                for k in keys:
                    grads[k] = total.astype(np.asarray(grads[k]).dtype)

    # -- files --------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, dtype=np.float32) -> str:
        return save(self, path, dtype=dtype)


def init_adapter(model, config: LoraConfig | str | None = None, *, seed: int = 0, base: Mapping | None = None,
                 b_std: float = 0.0, name: str | None = None) -> Adapter:
    """A new adapter as PEFT initialises one: A ~ U(-1/sqrt(in), 1/sqrt(in)) (Kaiming-uniform, a = sqrt 5),
    B = 0 (so the adapted model starts as the base model). ``b_std`` > 0 draws B ~ N(0, b_std) instead
    (tests, demos). ``base``: the base weights, recorded as a fingerprint."""
    cfg = model_config(model)
    if config is None:
        config = LoraConfig()
    elif isinstance(config, str):
        config = LoraConfig.parse(config)
    names = resolve_targets(cfg, config.targets, config.layers)
    shapes = linear_shapes(cfg)
    rng = np.random.default_rng(seed)
    tied = {n: g[0] for g in fused_groups(cfg, names) for n in g}
    A, B = {}, {}
    for n in names:
        out, inp = shapes[n]
        r = config.rank_for(module_path(cfg, n))
        bound = 1.0 / math.sqrt(inp)
        if tied.get(n, n) in A:                  # a fused module has one lora_A (a copy per part)
            A[n] = A[tied[n]].copy()
        else:
            A[n] = rng.uniform(-bound, bound, (r, inp)).astype(np.float32)
        B[n] = (rng.standard_normal((out, r)) * b_std).astype(np.float32) if b_std else np.zeros((out, r), np.float32)
    fp = base_fingerprint(cfg, base) if base is not None else None
    return Adapter(config, cfg, A, B, name=name, base=fp)


def save(adapter: Adapter, path: str | os.PathLike, dtype=np.float32, base_model: str | None = None) -> str:
    """Writes ``adapter`` as a PEFT adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``),
    each file atomically; returns the folder. Tensors use Hugging Face module paths and row orders (a fused
    module: one adapter, :attr:`Adapter.tied`)."""
    return write_peft(path, adapter.config, adapter.model_config, adapter.names, adapter.A, adapter.B,
                      name=adapter.name, base=adapter.base, dtype=dtype, base_model=base_model)


def load(path: str | os.PathLike, model, weights: Mapping[str, np.ndarray] | None = None, *,
         check_base: bool = True, name: str | None = None) -> Adapter:
    """Reads a PEFT adapter (a folder with ``adapter_config.json`` + ``adapter_model.safetensors``, or the
    ``.safetensors`` file inside one) for ``model`` (a Model, or a model configuration; a Model also
    supplies the base weights for the fingerprint check). Raises :class:`AdapterFormatError` (missing or
    corrupt files, unsupported PEFT features), :class:`AdapterMismatch` (another family, dimensions or
    base), :class:`AdapterShapeError` (rank/shape mismatch), :class:`AdapterConfigError`."""
    if weights is None and getattr(model, "weights", None) is not None and getattr(model, "config", None) is not None:
        weights = model.weights
    peft = read_peft(path, model)
    ad = Adapter(peft.config, peft.model_config, peft.A, peft.B, name=name or peft.name, base=peft.base,
                 source=peft.source)
    if check_base:
        ad.check_model(peft.model_config, weights)
    return ad
