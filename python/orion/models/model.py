"""The ``Model`` facade (encode, generate, stream, chat, logits, LoRA adapters) and :func:`load` (paths,
names searched locally, Hub repository ids)."""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Iterable, Sequence

import numpy as np

from ..errors import InputError, ModelFormatError
from ..lora import set_adapter
from ..quant.activations import ActivationScales
from ..run_folder import is_run_pointer, latest_step
from .batch import generate_batch
from .engine import DECODE_S, Engine
from .fp16_safety import calibration_ids
from .loaders import cache_dir, load_weights
from .quantize import W8A8_WARNING, ExperimentalWarning, activation_scales, check_w8a8, quantize_model
from .sampling import SamplingParams
from .speculative import generate_speculative
from .stream import Generation, TokenStream

__all__ = ["Model", "load", "resolve_model_path"]


class Model:
    """A loaded language model on ANE programs.

    >>> m = orion.models.load("stories260K.bin")
    >>> for tok in m.stream([1], max_tokens=20): print(tok.id)

    ``quantize``: a scheme of :data:`~orion.models.quantize.MODEL_SCHEMES` for the layers' linears (and then the
    CPU classifier int8 unless ``classifier_weights="fp16"``: :mod:`orion.models.classifier`);
    ``weights_cache``: the weight cache entry ``weights`` came from (:func:`load` passes it), beside which the
    compressed weights are kept and memory-mapped (:func:`~orion.models.quantize.quantize_model`).
    """

    def __init__(self, config, weights: dict, tokenizer=None, *, device: str = "auto", profile=None,
                 name: str | None = None, stop_tokens: Iterable[int] | None = None, add_bos: bool | None = None,
                 quantize: str | None = None, activations: str | None = None, calibration=None,
                 calibration_method: str = "max", weights_cache: str | None = None, **engine_options):
        self.quantization = None     # orion.quant.WeightReport of the compressed linears, None when fp16
        self.activation_scales = None  # W8A8: orion.quant.activations.ActivationScales, None for fp16 inputs
        fp16_weights = weights
        if activations is not None or calibration is not None:
            check_w8a8(quantize, activations, calibration)
        if quantize is not None:
            weights, self.quantization = quantize_model(weights, quantize, cache_file=weights_cache)
            engine_options.setdefault("classifier_weights", "int8")   # models/classifier.py says why
        self.config, self.weights, self.tokenizer = config, weights, tokenizer
        self.name = name or config.family
        self.device, self.profile = device, profile
        if tokenizer is not None and getattr(tokenizer, "vocab_size", config.vocab_size) > config.vocab_size:
            raise ModelFormatError(f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary is "
                                   f"{config.vocab_size}")
        if stop_tokens is None:
            stop_tokens = getattr(config, "eos_ids", None) or ([config.eos_id] if config.eos_id is not None else [])
        self.stop_tokens = [int(t) for t in stop_tokens]
        self.add_bos = (config.family == "llama") if add_bos is None else add_bos
        self._engine_options = engine_options
        self._engine: Engine | None = None
        self._lock = threading.Lock()          # one generation at a time owns the engine (KV cache, surfaces)
        self._owner: int | None = None
        if activations is not None:
            warnings.warn(W8A8_WARNING, ExperimentalWarning, stacklevel=3)
            self.activation_scales = activation_scales(self, fp16_weights, calibration, calibration_method)

    def __repr__(self) -> str:
        c = self.config
        plan = ""
        if self._engine is not None:               # the repr builds nothing: the plan once an engine exists
            p = self._engine.compile_plan()
            plan = (f" compiles: {p['per_set']} per program set ({p['layers']} layers), generate {p['generate']}, "
                    f"batch +{p['batch']}, {p['compiled']} so far")
        return (f"<orion.models.Model {self.name}: {c.family} d={c.d_model} L={c.n_layers} H={c.n_heads} "
                f"V={c.vocab_size} ctx={c.n_ctx} tokenizer={type(self.tokenizer).__name__ if self.tokenizer else None}"
                f"{plan}>")

    def compile_plan(self) -> dict:
        """How many compiles each use of the model costs, known before compiling (the engine's
        :meth:`~orion.models.engine.Engine.compile_plan`: lowering only, no compile budget charged)."""
        with self.exclusive():
            return self.engine.compile_plan()

    def _repr_html_(self) -> str:  # notebooks: config, tokenizer, programs, fp16 plan, adapter (display.py)
        from .display import model_html  # start-up: orion.models.display loads only for a notebook repr
        return model_html(self)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            opts = dict(self._engine_options)
            if self.config.family == "llama" and opts.get("residual_scale", "auto") == "auto":
                # the fp16 probe: this tokenizer's specials too
                opts.setdefault("probe_ids", calibration_ids(self.config, self.tokenizer))
            self._engine = Engine(self.config, self.weights, device=self.device, profile=self.profile, **opts)
            if getattr(self, "_lora_slots", None) is not None:      # adapter inputs survive release()
                self._engine.graph_options["lora"] = self._lora_slots
            if self.activation_scales is not None:                  # W8A8: int8 inputs of the int8 linears
                self._engine.graph_options["activations"] = self.activation_scales
        return self._engine

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weight files (MILBlob) of the model's stage programs: what its programs hold, the
        compressed payloads of a quantized model included (one program set; every bucket bakes the same
        weights). Compiles the first decode set when nothing is compiled yet."""
        with self.exclusive():
            eng = self.engine
            stages = next(iter(eng.sets.values()), None) or eng.program_set(DECODE_S, eng.ctx_buckets[0])
            return sum(int(cp.stats["weight_bytes"]) for st in stages for cp in st.programs)

    @contextlib.contextmanager
    def exclusive(self):
        """Owns the model's programs and KV cache for a block: calls from other threads wait their turn
        (a Model is safe to share between threads; its work is serialised), a second generation started
        in the thread that holds it (an unfinished stream) is an :class:`InputError`."""
        me = threading.get_ident()
        if not self._lock.acquire(blocking=False):
            if self._owner == me:
                raise InputError(f"model {self.name!r} is busy with an unfinished stream in this thread: exhaust or "
                                 f"close() it first, or load a second Model for concurrent generations")
            self._lock.acquire()
        self._owner = me
        try:
            yield self
        finally:
            self._owner = None
            self._lock.release()

    def release(self) -> None:
        with self.exclusive():
            if self._engine is not None:
                self._engine.release()
                self._engine = None

    # -- LoRA ------------------------------------------------------------------------------------
    def set_adapter(self, adapter, **options) -> None:
        """Generate with a LoRA ``adapter`` (an :class:`orion.lora.Adapter`, a PEFT folder path, or None for
        the base model) from the next evaluation on; swaps within the programs' adapter slots cost zero
        compiles and zero loads. Options (``rank``, ``targets``, ``check_base``): :func:`orion.lora.set_adapter`."""
        with self.exclusive():
            set_adapter(self, adapter, **options)

    def memory(self) -> dict:
        """Where this model's memory is, in bytes: ``weights`` (the host weights as stored: fp16 arrays, and
        compressed weights at their compressed size - they are decoded only where a program or CPU path
        reads them, and dropped after), ``weights_compressed`` (the compressed part of ``weights``),
        ``weights_resident`` (the part of ``weights`` in this process's memory now: weights read from the
        weight cache are views of its mapped file, whose pages go back to the OS once programs hold them),
        ``layer_weight_surfaces`` (shared layer programs: each layer's weights in the program's
        input layout, every input as large as the largest, C12 - but the few-KB inputs written into the
        program's own surface before each eval, at their own size), ``layer_weights_streamed`` (shared layer
        programs with compressed weights, ``stream_weights``: each layer's weights kept compressed in the
        kernels' form, read in place by the simulator's GEMMs or decoded into the program's own surfaces before each
        eval), ``kv_cache`` (a shared layer: a host array of its cache's size, copied into the program's own
        surface before each eval, or one C12-sized surface for its keys and values when the cache is as big as
        the program's inputs), ``program_surfaces``
        (the programs' other inputs and outputs; the program sets' shared programs share theirs),
        ``classifier_panels`` (the CPU classifier's copy). Surfaces count as resident: on the simulator a big
        surface's pages never written (the padding past a small input, C12) are not;
        ``counted`` (weights_resident and the program-side kinds), ``process_rss`` and ``other`` - the resident
        set minus what was counted: the native programs' baked weights and packed panels, scratch, the
        interpreter (None where the resident set cannot be read). Counts only what exists: programs are
        compiled at the first generation."""
        from .memory import memory_report  # start-up: orion.models.memory loads only for a memory report
        return memory_report(self)

    @property
    def adapter(self):
        """The current LoRA adapter (None: the base model)."""
        return getattr(self, "_lora_adapter", None)

    # -- text ------------------------------------------------------------------------------------
    def encode(self, prompt) -> list[int]:
        """Prompt (str or token ids) -> ids. Special tokens: a tokenizer.json decides through its
        post-processor, as transformers does (Llama 3 adds BOS, Qwen nothing); other tokenizers
        (SentencePiece, llama2.c) get the config's BOS when ``add_bos`` (Llama-family models)."""
        ids = self.tokens(prompt)
        if len(ids) > self.config.n_ctx:
            raise InputError(f"the prompt has {len(ids)} tokens but the context of {self.name!r} is "
                             f"{self.config.n_ctx}")
        return ids

    def tokens(self, prompt) -> list[int]:
        """:meth:`encode` without the context limit (texts processed in windows: calibration)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InputError(f"model {self.name!r} has no tokenizer; pass token ids, or load it with "
                                 f"tokenizer=PATH")
            bos = self.config.bos_id
            if hasattr(self.tokenizer, "adds_special_tokens"):
                ids = list(self.tokenizer.encode(prompt, add_special_tokens=True))
            else:
                ids = list(self.tokenizer.encode(prompt))
                if self.add_bos and bos is not None:
                    ids = [bos] + ids
            if not ids and bos is not None:
                ids = [bos]
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise InputError("the prompt is empty (and the model has no BOS token to start from)")
        V = self.config.vocab_size
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise InputError(f"prompt token id(s) {bad[:5]} outside the vocabulary [0, {V})")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return " ".join(str(int(t)) for t in ids)
        return self.tokenizer.decode(list(ids))

    # -- generation ------------------------------------------------------------------------------
    def stream(self, prompt, max_tokens: int = 64, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
               repetition_penalty: float = 1.0, seed: int | None = None, stop_tokens: Iterable[int] | None = None,
               keep_logits: bool = False) -> TokenStream:
        """``for tok in model.stream("Once upon a time"): print(tok.text, end="")``"""
        params = SamplingParams(max_tokens, temperature, top_k, top_p, repetition_penalty, seed,
                                None if stop_tokens is None else list(stop_tokens))
        params.validate()
        return TokenStream(self, self.encode(prompt), params, keep_logits)

    def generate(self, prompt, speculative=None, draft_k: int | None = None, **kw) -> Generation:
        """Same options as :meth:`stream`; returns the finished :class:`Generation`.

        ``speculative``: ``"prompt-lookup"`` (drafts from n-grams of the prompt and the generated text, 4
        in the first eval, doubling up to 15 while all are accepted, halving at a rejection) or a draft
        :class:`Model` of the same tokenizer (``draft_k`` tokens proposed per round, 1..15, default 4);
        the target verifies each round's drafts in one decode eval. Greedy: the same tokens as without;
        sampling: the same distribution (speculative sampling's acceptance rule). Returns a
        :class:`~orion.models.speculative.SpeculativeGeneration` (acceptance rate, tokens per eval)."""
        if speculative is not None:
            if not (speculative == "prompt-lookup" or isinstance(speculative, Model)):
                raise InputError(f"speculative must be None, 'prompt-lookup' or a draft Model, got {speculative!r}")
            if kw.get("keep_logits"):
                raise InputError("keep_logits is not available with speculative decoding")
            kw.pop("keep_logits", None)
            params = SamplingParams(**{k: v for k, v in kw.items() if k != "stop_tokens"},
                                    stop_tokens=None if kw.get("stop_tokens") is None else list(kw["stop_tokens"]))
            params.validate()
            draft = speculative if isinstance(speculative, Model) else None
            if draft_k is not None and draft is None:
                raise InputError("draft_k is the number of tokens a draft model proposes: give speculative=<draft "
                                 "Model> with it (prompt lookup drafts up to 15 tokens on its own)")
            return generate_speculative(self, self.encode(prompt), params, draft=draft,
                                        draft_k=4 if draft_k is None else draft_k)
        if draft_k is not None:
            raise InputError("draft_k needs speculative=<draft Model>")
        s = self.stream(prompt, **kw)
        for _ in s:
            pass
        return s.result

    def generate_batch(self, prompts, *, max_batch: int = 16, stats=None, **kw) -> list[Generation]:
        """Generates every prompt, up to ``max_batch`` (<= 16) sequences sharing each decode eval, a finished
        sequence's column going to the next waiting prompt (see :mod:`orion.models.batch`). Options as
        :meth:`stream`, each either one value for all or a list with one per prompt. Each result equals the
        prompt generated alone (greedy: token for token). ``stats``: a :class:`~orion.models.batch.BatchStats`
        to fill (aggregate tokens, evals, seconds)."""
        prompts = list(prompts)
        names = ("max_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed", "stop_tokens")
        bad = sorted(set(kw) - set(names))
        if bad:
            raise InputError(f"generate_batch got unknown option(s) {bad}; options: {', '.join(names)}")
        defaults = SamplingParams()
        params = []
        for i in range(len(prompts)):
            vals = {}
            for k in names:
                v = kw.get(k, getattr(defaults, k))
                per_prompt = isinstance(v, (list, tuple)) and not (k == "stop_tokens" and v and not
                                                                   isinstance(v[0], (list, tuple, type(None))))
                if per_prompt and len(v) != len(prompts):
                    raise InputError(f"{k}: {len(v)} values for {len(prompts)} prompts")
                vals[k] = v[i] if per_prompt else v
            p = SamplingParams(**{k: (None if vals[k] is None else list(vals[k])) if k == "stop_tokens" else vals[k]
                                  for k in names})
            p.validate()
            params.append(p)
        return generate_batch(self, [self.encode(p) for p in prompts], params, max_batch=max_batch, stats=stats)

    def chat(self, messages, *, add_generation_prompt: bool = True, stream: bool = False,
             template_kwargs: dict | None = None, **generate_kw):
        """Answers ``messages`` (``[{"role": "user", "content": "Hi"}, ...]``) through the tokenizer's chat
        template (rendered as transformers renders it, tokenized without added special tokens) and
        stops at end-of-turn: the model's stop tokens, the tokenizer's eos and the token the template
        ends an answer with, unless ``stop_tokens`` is given. Options as :meth:`stream`; returns a
        :class:`Generation` (``stream=True``: the :class:`TokenStream`). ``template_kwargs``: extra
        template variables (e.g. enable_thinking)."""
        from .tokenizers import chat_prompt_ids, end_of_turn_ids  # start-up: orion.models.tokenizers (~14 ms)
        ids = chat_prompt_ids(self.tokenizer, messages, add_generation_prompt, **(template_kwargs or {}))
        if generate_kw.get("stop_tokens") is None:
            eos = getattr(self.tokenizer, "eos_id", None)
            stops = self.stop_tokens + ([eos] if eos is not None else []) + end_of_turn_ids(self.tokenizer)
            generate_kw["stop_tokens"] = list(dict.fromkeys(stops))
        s = self.stream(ids, **generate_kw)
        if not stream:
            for _ in s:
                pass
            return s.result
        return s

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits ``[n, V]`` of every position of ``ids`` (one prefill through the programs)."""
        ids = self.encode(list(ids))
        with self.exclusive():
            eng = self.engine
            eng.reset(len(ids))
            return eng.prefill(ids, all_logits=True)


def _search_dirs() -> list[str]:
    dirs = [d for d in os.environ.get("ORION_MODEL_PATH", "").split(os.pathsep) if d]
    dirs += [os.path.join(cache_dir(), "models"), os.getcwd()]
    return dirs


def _latest_checkpoint(p: str) -> str:
    """An ``orion train`` run folder means its latest checkpoint (a step folder, itself an HF folder)."""
    return latest_step(p, ModelFormatError) if is_run_pointer(p) else p


def resolve_model_path(path_or_name: str) -> str:
    """A path as given; a bare name in $ORION_MODEL_PATH, ~/.cache/orion/models, the current folder; a
    Hub repo id (``Qwen/Qwen3-0.6B``) that is not a local path through :mod:`orion.models.hub`."""
    p = os.path.expanduser(os.fspath(path_or_name))
    if os.path.exists(p):
        return _latest_checkpoint(p)
    if os.sep not in p and "/" not in p:
        for d in _search_dirs():
            for cand in (p, p + ".bin"):
                full = os.path.join(d, cand)
                if os.path.exists(full):
                    return full
    from .hub import is_repo_id, resolve_repo  # start-up: orion.models.hub loads only for a Hub name
    if is_repo_id(p):
        return resolve_repo(p)
    raise ModelFormatError(f"{path_or_name}: no such model file or folder (searched the path as given and "
                           f"$ORION_MODEL_PATH, ~/.cache/orion/models, the current folder; Hugging Face Hub names "
                           f"look like org/name)")


def load(path_or_name, *, tokenizer=None, device: str = "auto", profile=None, cache: str | None = None,
         use_cache: bool = True, **options) -> Model:
    """Loads a model: a Hugging Face folder (config.json + model.safetensors, GPT-2 or Llama) or a llama2.c
    ``.bin``; by path, by name (searched in $ORION_MODEL_PATH, ~/.cache/orion/models and the current
    folder) or by Hub repo id (``Qwen/Qwen3-0.6B``: the Hugging Face cache, else downloaded unless
    HF_HUB_OFFLINE). Weights are converted to fp16 once and cached (``cache``: folder, default ~/.cache/orion).
    ``tokenizer``: a tokenizer object or file path (default: found next to the checkpoint).
    ``quantize``: a scheme of :data:`~orion.models.quantize.MODEL_SCHEMES` (``"int8"``, ``"lut4"``...) compresses
    the layers' linear weights at load (:mod:`orion.models.quantize`; ``Model.quantization`` reports the bytes).
    ``activations="int8"`` (experimental, with ``quantize="int8"``: W8A8) quantizes the inputs of those
    linears with static scales calibrated on ``calibration`` (a text or token ids; an
    :class:`~orion.quant.activations.ActivationScales`; omitted: the scales saved with the model,
    ``activation_scales.json``); ``calibration_method``: "max" (default) or "percentile"."""
    from .tokenizers import find_tokenizer, load_tokenizer, stop_token_ids  # start-up: orion's tokenizers (~14 ms)
    path = resolve_model_path(path_or_name)
    ck = load_weights(path, cache=cache, use_cache=use_cache)
    if isinstance(tokenizer, (str, os.PathLike)):
        tok = load_tokenizer(os.fspath(tokenizer), vocab_size=ck.config.vocab_size)
    elif tokenizer is None:
        tok = find_tokenizer(path, ck.config)
    else:
        tok = tokenizer
    # fewer tokens than embedding rows is normal (Qwen pads 151,665 to 151,936); more is a mismatch
    if tok is not None and tok.vocab_size > ck.config.vocab_size:
        raise ModelFormatError(f"tokenizer {getattr(tok, 'path', tok)!r} has {tok.vocab_size} tokens, the model "
                               f"{path} has only {ck.config.vocab_size}")
    name = os.path.basename(os.path.normpath(path))
    stop = options.pop("stop_tokens", None)
    if stop is None and ck.kind.startswith("llama2c"):
        stop = [1, 2]          # run.c stops at BOS (1), the separator its Stories data use; EOS (2) too
    elif stop is None:         # end-of-text and end-of-turn (<|eot_id|>, <|im_end|>, <end_of_turn>, <|end|>)
        stop = stop_token_ids(path, tok) or None
    if options.get("activations") is not None and options.get("calibration") is None:
        check_w8a8(options.get("quantize"), options["activations"], None)
        options["calibration"] = ActivationScales.load(path)
    return Model(ck.config, ck.weights, tok, device=device, profile=profile, name=name, stop_tokens=stop,
                 weights_cache=ck.cache_file, **options)
