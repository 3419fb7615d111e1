"""Reading a Hugging Face ``config.json`` without ever guessing.

:class:`ConfigReader` hands out typed values and remembers which keys were read. A family's reader
asks for every key that changes the math; :meth:`ConfigReader.finish` then refuses any key that was
neither read nor known to be harmless (bookkeeping such as ``transformers_version`` or dropout
rates, which do not act at inference). So a key we do not implement is a :class:`ModelFormatError`
naming it — never a silent default (a transformers-5 ``rope_parameters`` object was once ignored and
gave wrong logits). A missing key takes the default transformers itself uses for that model type.

RoPE keys come in two spellings: transformers >= 5 writes ``rope_parameters`` (for Gemma 3 one object
per layer type), older files ``rope_theta`` + ``rope_scaling`` (+ ``rope_local_base_freq``) at the top
level. :meth:`ConfigReader.rope` reads both and refuses a file where they disagree.
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import ModelFormatError
from ..rope import ROPE_TYPES, Rope

__all__ = ["ConfigReader", "HARMLESS_KEYS"]

_MISSING = object()

# Keys of transformers' PretrainedConfig and common bookkeeping that never change a causal LM's
# inference math (dropouts are identity at inference; orion's training uses none either).
HARMLESS_KEYS = frozenset({
    "transformers_version", "architectures", "model_type", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "attention_dropout", "resid_pdrop", "embd_pdrop", "hidden_dropout", "dropout",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "output_hidden_states", "output_attentions",
    "return_dict", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "id2label", "label2id",
    "problem_type", "_name_or_path", "name_or_path", "tokenizer_class", "prefix", "task_specific_params",
    "finetuning_task", "torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "tie_encoder_decoder",
    "cross_attention_hidden_size", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "pretraining_tp", "cache_implementation", "max_window_layers",
    "_sliding_window_pattern", "sliding_window_pattern", "_attn_implementation_autoset", "attn_implementation",
    "unsloth_fixed", "unsloth_version", "keys_to_ignore_at_inference",
})


class ConfigReader:
    """Typed, tracked access to one ``config.json`` dict (``source``: its path, for messages)."""

    def __init__(self, d: dict, source: str, defaults: dict | None = None):
        if not isinstance(d, dict):
            raise ModelFormatError(f"{source}: expected a JSON object, got {type(d).__name__}")
        self.d, self.source, self.defaults = d, source, dict(defaults or {})
        self.read: set[str] = set()

    def error(self, msg: str) -> ModelFormatError:
        return ModelFormatError(f"{self.source}: {msg}")

    def has(self, key: str) -> bool:
        return key in self.d and self.d[key] is not None

    def alias(self, *keys: str) -> str:
        """The first of ``keys`` present in the file (else the first): for keys with older spellings."""
        other = [k for k in keys if self.has(k)]
        self.read.update(keys)
        return other[0] if other else keys[0]

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self.read.add(key)
        if key in self.d and self.d[key] is not None:
            return self.d[key]
        if default is not _MISSING:
            return default
        if key in self.defaults:
            return self.defaults[key]
        raise self.error(f"missing config key {key!r}")

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> int | None:
        v = self.raw(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.error(f"config key {key!r} must be an integer >= {minimum}, got {v!r}")
        return v

    def float(self, key: str, default: Any = _MISSING, positive: bool = True) -> float | None:
        v = self.raw(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
            raise self.error(f"config key {key!r} must be a {'positive ' if positive else ''}finite number, got {v!r}")
        return float(v)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        v = self.raw(key, default)
        if not isinstance(v, bool):
            raise self.error(f"config key {key!r} must be true or false, got {v!r}")
        return v

    def str(self, key: str, default: Any = _MISSING) -> str:
        v = self.raw(key, default)
        if not isinstance(v, str):
            raise self.error(f"config key {key!r} must be a string, got {v!r}")
        return v

    def ids(self, key: str, default: Any = _MISSING) -> list[int]:
        """A token id or a list of them (``eos_token_id`` may be either)."""
        v = self.raw(key, default)
        if v is None:
            return []
        vals = v if isinstance(v, list) else [v]
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in vals):
            raise self.error(f"config key {key!r} must be a token id or a list of token ids, got {v!r}")
        return list(vals)

    def require(self, key: str, allowed: tuple, what: str = "") -> None:
        """``key`` (absent = its default) must be one of ``allowed``: otherwise the feature is not implemented."""
        v = self.raw(key, self.defaults.get(key))
        if v not in allowed:
            raise self.error(f"config key {key!r} = {v!r} is not implemented by orion{what} "
                             f"(supported: {', '.join(map(repr, allowed))})")

    # -- RoPE ----------------------------------------------------------------------------------------
    def rope(self, layer_type: str | None = None, default_theta: float = 10000.0) -> Rope:
        """The RoPE of the model (or of ``layer_type`` for per-layer-type ``rope_parameters``)."""
        self.read.update(("rope_parameters", "rope_scaling", "rope_theta"))
        params = self.d.get("rope_parameters")
        legacy_scaling = self.d.get("rope_scaling")
        legacy_theta = self.d.get("rope_theta")
        # the legacy keys are checked even beside rope_parameters (which wins): a wrong type is a broken file
        if legacy_scaling is not None and not isinstance(legacy_scaling, dict):
            raise self.error(f"config key 'rope_scaling' must be an object or null, got {legacy_scaling!r}")
        if legacy_theta is not None and (isinstance(legacy_theta, bool) or not isinstance(legacy_theta, (int, float))):
            raise self.error(f"config key 'rope_theta' must be a number, got {legacy_theta!r}")
        if params is not None:
            if not isinstance(params, dict):
                raise self.error(f"config key 'rope_parameters' must be an object, got {params!r}")
            if layer_type is not None and layer_type in params:
                params = params[layer_type]
                where = f"rope_parameters[{layer_type!r}]"
                if not isinstance(params, dict):
                    raise self.error(f"config key {where} must be an object, got {params!r}")
            elif any(isinstance(v, dict) for v in params.values()):
                raise self.error(f"config key 'rope_parameters' has per-layer-type entries "
                                 f"{sorted(k for k, v in params.items() if isinstance(v, dict))} but none for "
                                 f"{layer_type!r}")
            else:
                where = "rope_parameters"
            rope = self._rope_from(params, where, default_theta)
            if legacy_theta is not None and layer_type in (None, "full_attention") and \
                    float(legacy_theta) != rope.theta:
                raise self.error(f"'rope_theta' = {legacy_theta!r} disagrees with {where}.rope_theta = {rope.theta!r}")
            return rope
        merged = dict(legacy_scaling) if isinstance(legacy_scaling, dict) else {}
        if legacy_scaling is not None and not isinstance(legacy_scaling, dict):
            raise self.error(f"config key 'rope_scaling' must be an object or null, got {legacy_scaling!r}")
        if "rope_theta" in merged and legacy_theta is not None and merged["rope_theta"] != legacy_theta:
            raise self.error("'rope_theta' and 'rope_scaling.rope_theta' disagree")
        if legacy_theta is not None:
            merged["rope_theta"] = legacy_theta
        if not merged.get("rope_type") and not merged.get("type"):
            merged["rope_type"] = "default"
        return self._rope_from(merged, "rope_scaling", default_theta)

    def _rope_from(self, p: dict, where: str, default_theta: float) -> Rope:
        known = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
                 "original_max_position_embeddings", "partial_rotary_factor"}
        rtype = p.get("rope_type") or p.get("type") or "default"
        if rtype not in ROPE_TYPES:
            raise self.error(f"{where}: rope type {rtype!r} is not implemented by orion (supported: "
                             f"{', '.join(ROPE_TYPES)})")
        unknown = sorted(set(p) - known)
        if unknown:
            raise self.error(f"{where}: key(s) {unknown} are not implemented by orion")
        prf = p.get("partial_rotary_factor", 1.0)
        if prf != 1.0:
            raise self.error(f"{where}: partial_rotary_factor {prf!r} is not implemented by orion (only 1.0)")
        kw: dict = {"type": rtype}
        theta = p.get("rope_theta", default_theta)
        for key, val in (("rope_theta", theta), ("factor", p.get("factor")), ("low_freq_factor", p.get("low_freq_factor")),
                         ("high_freq_factor", p.get("high_freq_factor"))):
            if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float)) or
                                    not math.isfinite(val) or val <= 0):
                raise self.error(f"{where}.{key} must be a positive number, got {val!r}")
        kw["theta"] = float(theta)
        if rtype in ("linear", "llama3"):
            if p.get("factor") is None:
                raise self.error(f"{where}: rope type {rtype!r} needs 'factor'")
            kw["factor"] = float(p["factor"])
        if rtype == "llama3":
            for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                if p.get(key) is None:
                    raise self.error(f"{where}: rope type 'llama3' needs {key!r}")
            omp = p["original_max_position_embeddings"]
            if isinstance(omp, bool) or not isinstance(omp, int) or omp < 1:
                raise self.error(f"{where}.original_max_position_embeddings must be a positive integer, got {omp!r}")
            kw.update(low_freq_factor=float(p["low_freq_factor"]), high_freq_factor=float(p["high_freq_factor"]),
                      original_max_position_embeddings=omp)
        try:
            return Rope(**kw)
        except ValueError as e:
            raise self.error(f"{where}: {e}") from None

    # -- the end ---------------------------------------------------------------------------------
    def finish(self, harmless: frozenset | set = frozenset()) -> None:
        """Refuses every key that was not read and is not known to be harmless."""
        left = sorted(k for k in self.d if k not in self.read and k not in HARMLESS_KEYS and k not in harmless)
        if left:
            raise self.error(f"config key(s) {left} are not implemented by orion; they may change the model's "
                             f"math, so the checkpoint is refused rather than run with them ignored")
