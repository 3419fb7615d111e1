"""Hugging Face ``tokenizer.json`` through the ``tokenizers`` library, set up the way transformers'
``AutoTokenizer`` (``TokenizersBackend``) sets it up from ``tokenizer_config.json``:

* added tokens: ``added_tokens_decoder`` entries and the named special tokens (bos/eos/unk/pad/...,
  ``additional_special_tokens`` / ``extra_special_tokens``) that ``tokenizer.json`` does not already hold
  are added (the legacy ``special_tokens_map.json`` fills in when the config has no ``added_tokens_decoder``);
* special tokens at encode: the post-processor of ``tokenizer.json`` decides alone (none: no special
  tokens). transformers 5 drops ``add_bos_token`` / ``add_eos_token`` of the config when a tokenizer.json
  is present (``from_pretrained``), so they are not read here either;
* ``split_special_tokens`` and ``clean_up_tokenization_spaces`` (not applied to BPE models, like transformers).

``encode(text)`` adds no special tokens unless ``add_special_tokens=True`` (the interface every orion
tokenizer shares); :attr:`adds_special_tokens` says whether the post-processor adds any.
"""

from __future__ import annotations

import hashlib
import os
import re

from ...errors import ModelFormatError
from ...fileio import read_json
from ..families.hf_keys import ConfigReader
from .template_sandbox import MAX_TEMPLATE_CHARS

__all__ = ["HFTokenizer", "NAMED_SPECIAL_TOKENS"]

NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


# Sizes checked before any work: the largest real files are ~35 MB (tokenizer.json) and ~1.5 MB
# (tokenizer_config.json, ~6,400 added tokens); added tokens are short markers.
MAX_TOKENIZER_JSON_BYTES = 256 << 20
MAX_TOKENIZER_CONFIG_BYTES = 32 << 20
MAX_ADDED_TOKENS = 1 << 16
MAX_TOKEN_CHARS = 1024
_ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")
_TOKEN_ID = re.compile(r"[0-9]{1,10}")
_TOKEN_TYPE = "a token string or an AddedToken object {\"content\": string, flags true/false}"


def _content(tok) -> str | None:
    """A special token as written in tokenizer_config.json (checked by :func:`_check_token`)."""
    if tok is None:
        return None
    return tok["content"] if isinstance(tok, dict) else tok


def _added_token(spec, special: bool | None = None):
    from tokenizers import AddedToken  # start-up: tokenizers (~10 ms) only for a tokenizer.json
    if isinstance(spec, dict):
        kw = {k: spec[k] for k in _ADDED_TOKEN_FLAGS if k in spec}
        if special is not None:
            kw["special"] = special
        return AddedToken(spec["content"], **kw)
    return AddedToken(spec, special=True if special is None else special, normalized=False)


def _check_file_size(path: str, limit: int, what: str) -> None:
    size = os.path.getsize(path)
    if size > limit:
        raise ModelFormatError(f"{path}: {size:,} bytes, more than any real {what} (the limit is {limit:,}); "
                               f"not a {what}")


def _check_token(r: ConfigReader, key: str, tok, may_be_empty: bool = True) -> None:
    """``tok``, the value of ``key``: a token string or an AddedToken object (transformers' two spellings);
    an empty string is no token (except in added_tokens_decoder, which adds it)."""
    content = tok.get("content") if isinstance(tok, dict) else tok
    if not isinstance(content, str) or not (content or may_be_empty):
        raise r.error(f"config key {key!r} must be {_TOKEN_TYPE}, got {str(tok)[:80]}")
    if len(content) > MAX_TOKEN_CHARS:
        raise r.error(f"config key {key!r}: a token of {len(content):,} characters (the limit is {MAX_TOKEN_CHARS:,})")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as e:     # JSON can spell a lone surrogate ("\ud800"); no tokenizer can hold one
        raise r.error(f"config key {key!r}: the token is not valid Unicode (a lone surrogate at character "
                      f"{e.start})") from None
    bad = [f for f in _ADDED_TOKEN_FLAGS if isinstance(tok, dict) and f in tok and not isinstance(tok[f], bool)]
    if bad:
        raise r.error(f"config key {key!r}: {bad[0]!r} must be true or false, got {tok[bad[0]]!r}")


def _token_list(r: ConfigReader, key: str, allow_names: bool) -> list:
    """The special tokens listed under ``key`` (``extra_special_tokens`` may name them in an object)."""
    v = r.raw(key, None)
    if v is None:
        return []
    if allow_names and isinstance(v, dict):
        items = [(f"{key}.{name}", t) for name, t in v.items()]
    elif isinstance(v, list):
        items = [(f"{key}[{i}]", t) for i, t in enumerate(v)]
    else:
        kinds = "a list (or an object name -> token)" if allow_names else "a list"
        raise r.error(f"config key {key!r} must be {kinds} of tokens, got {str(v)[:80]}")
    if len(items) > MAX_ADDED_TOKENS:
        raise r.error(f"config key {key!r} lists {len(items):,} tokens (the limit is {MAX_ADDED_TOKENS:,})")
    for where, t in items:
        _check_token(r, where, t)
    return [t for _, t in items]


def _read_config(cfg, path: str) -> dict:
    """Every tokenizer_config.json (or special_tokens_map.json) key read here, typed as transformers types
    it (a number would become a special token "5", ``"false"`` would be true, a string of special tokens
    three tokens): a wrong type is a ModelFormatError naming the file, the key and the expected type. The
    keys read, without the nulls (null is absent)."""
    r = ConfigReader(cfg, path)
    out = {}
    for k in NAMED_SPECIAL_TOKENS:
        if r.has(k):
            _check_token(r, k, cfg[k])
            out[k] = cfg[k]
    for k, names in (("extra_special_tokens", True), ("additional_special_tokens", False)):
        if r.has(k):
            out[k] = _token_list(r, k, names)
    for k in ("split_special_tokens", "clean_up_tokenization_spaces"):
        if r.has(k):
            out[k] = r.bool(k)
    if r.has("added_tokens_decoder"):
        dec = cfg["added_tokens_decoder"]
        if not isinstance(dec, dict):
            raise r.error(f"config key 'added_tokens_decoder' must be an object token id -> AddedToken, got "
                          f"{str(dec)[:80]}")
        if len(dec) > MAX_ADDED_TOKENS:
            raise r.error(f"config key 'added_tokens_decoder' lists {len(dec):,} tokens (the limit is "
                          f"{MAX_ADDED_TOKENS:,})")
        for k, spec in dec.items():
            if not _TOKEN_ID.fullmatch(k):
                raise r.error(f"config key 'added_tokens_decoder' must be an object token id -> AddedToken; "
                              f"{k[:40]!r} is not a token id")
            if not isinstance(spec, dict) or "content" not in spec:
                raise r.error(f"config key 'added_tokens_decoder' entry {k} has no 'content' (expected an "
                              f"AddedToken object), got {str(spec)[:80]}")
            _check_token(r, f"added_tokens_decoder.{k}", spec, may_be_empty=False)
        out["added_tokens_decoder"] = dec
    if r.has("chat_template"):
        t = cfg["chat_template"]
        ok = isinstance(t, str) or isinstance(t, list) and all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("template"), str) for e in t)
        if not ok:
            raise r.error(f"config key 'chat_template' must be a string or a list of {{name, template}} strings, "
                          f"got {str(t)[:80]}")
        longest = max([len(t)] if isinstance(t, str) else [len(e["template"]) for e in t] or [0])
        if longest > MAX_TEMPLATE_CHARS:
            raise r.error(f"config key 'chat_template': a template of {longest:,} characters (the limit is "
                          f"{MAX_TEMPLATE_CHARS:,})")
        out["chat_template"] = t
    return out


class HFTokenizer:
    """``tokenizer.json`` (+ ``tokenizer_config.json`` beside it, when present)."""

    def __init__(self, path: str, config_path: str | None = None):
        try:
            from tokenizers import Tokenizer  # start-up: tokenizers (~10 ms) only for a tokenizer.json
        except ImportError:
            raise ModelFormatError(f"{path}: reading tokenizer.json needs the 'tokenizers' package "
                                   f"(pip install tokenizers)") from None
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise ModelFormatError(f"{self.path}: no such file")
        _check_file_size(self.path, MAX_TOKENIZER_JSON_BYTES, "tokenizer.json")
        folder = os.path.dirname(os.path.abspath(self.path))
        if config_path is None:
            cand = os.path.join(folder, "tokenizer_config.json")
            config_path = cand if os.path.isfile(cand) else None
        self.config_path = config_path
        cfg: dict = {}
        if config_path is not None:          # read and typed before tokenizer.json is parsed
            _check_file_size(config_path, MAX_TOKENIZER_CONFIG_BYTES, "tokenizer_config.json")
            self.config = read_json(config_path, ModelFormatError, invalid="not a tokenizer_config.json")
            cfg = _read_config(self.config, config_path)
        else:
            self.config = {}
        legacy = os.path.join(folder, "special_tokens_map.json")
        if "added_tokens_decoder" not in cfg and os.path.isfile(legacy):
            _check_file_size(legacy, MAX_TOKENIZER_CONFIG_BYTES, "special_tokens_map.json")
            smap = _read_config(read_json(legacy, ModelFormatError, invalid="not a special_tokens_map.json"), legacy)
            cfg = {**smap, **cfg}
        try:
            self.tk = Tokenizer.from_file(self.path)
        except Exception as e:  # noqa: BLE001 - the Rust library raises plain Exception subclasses
            raise ModelFormatError(f"{self.path}: not a tokenizers tokenizer.json ({str(e).strip()[:200]}); "
                                   f"re-save it with transformers or tokenizers") from None
        self.special_tokens = {k: _content(cfg[k]) for k in NAMED_SPECIAL_TOKENS if _content(cfg.get(k))}
        extra = cfg.get("extra_special_tokens") or cfg.get("additional_special_tokens") or []
        self._add_config_tokens(cfg, extra)
        self.extra_special_tokens = [_content(t) for t in extra if _content(t)]
        self.tk.encode_special_tokens = cfg.get("split_special_tokens", False)
        self._cleanup = cfg.get("clean_up_tokenization_spaces", False) and type(self.tk.model).__name__ != "BPE"
        vocab = self.tk.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1 if vocab else 0
        self.bos_id = self.token_id(self.special_tokens.get("bos_token"))
        self.eos_id = self.token_id(self.special_tokens.get("eos_token"))
        with open(self.path, "rb") as f:
            self.fingerprint = "hf:" + hashlib.sha256(f.read()).hexdigest()[:16]

    # -- set-up as transformers does it ----------------------------------------------------------
    def _add_config_tokens(self, cfg: dict, extra: list) -> None:
        have = {str(t.content): t for t in self.tk.get_added_tokens_decoder().values()}
        todo = []
        dec = cfg.get("added_tokens_decoder") or {}
        for _, spec in sorted(dec.items(), key=lambda kv: int(kv[0])):
            tok = _added_token(spec)
            if repr(have.get(tok.content)) != repr(tok):
                todo.append(tok)
        queued = {t.content for t in todo} | set(have)
        for spec in [cfg.get(k) for k in NAMED_SPECIAL_TOKENS] + list(extra):
            c = _content(spec)
            if c and c not in queued:
                todo.append(_added_token(spec, special=True))
                queued.add(c)
        special = [t for t in todo if t.special]
        normal = [t for t in todo if not t.special]
        if special:
            self.tk.add_special_tokens(special)
        if normal:
            self.tk.add_tokens(normal)

    # -- interface -------------------------------------------------------------------------------
    @property
    def adds_special_tokens(self) -> bool:
        """True when encoding with special tokens adds any (e.g. Llama 3's BOS); then the tokenizer, not
        the model, decides the prompt's special tokens."""
        return self.tk.num_special_tokens_to_add(False) > 0

    @property
    def chat_template(self) -> tuple[object, str] | None:
        """(template, file it came from): ``chat_template.jinja`` beside tokenizer.json takes priority over
        the ``chat_template`` of tokenizer_config.json (a string or a list of {name, template}), as in
        transformers; None when there is neither."""
        jinja = os.path.join(os.path.dirname(os.path.abspath(self.path)), "chat_template.jinja")
        if os.path.isfile(jinja):
            _check_file_size(jinja, 4 * MAX_TEMPLATE_CHARS, "chat template")        # UTF-8: <= 4 bytes a character
            try:
                with open(jinja, encoding="utf-8") as f:
                    return f.read(), jinja
            except UnicodeDecodeError as e:
                raise ModelFormatError(f"{jinja}: not UTF-8 text ({e})") from None
        t = self.config.get("chat_template")
        return None if t is None else (t, self.config_path)

    @property
    def special_ids(self) -> set[int]:
        """Ids of the added tokens marked special (what ``skip_special_tokens`` drops)."""
        return {i for i, t in self.tk.get_added_tokens_decoder().items() if t.special}

    def token_id(self, token: str | None) -> int | None:
        return None if token is None else self.tk.token_to_id(token)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tk.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        ids = [int(t) for t in ids]
        bad = [t for t in ids if t < 0]
        if bad:
            raise ModelFormatError(f"negative token id(s) {bad[:5]} (decoding with {self.path})")
        # ids past the tokenizer (padded embedding rows, e.g. Qwen's 151,665..151,935) have no text:
        # skipped, as tokenizers and transformers skip them
        text = self.tk.decode(ids, skip_special_tokens=skip_special_tokens)
        if self._cleanup:                     # transformers' clean_up_tokenization
            for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                         (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
                text = text.replace(a, b)
        return text
