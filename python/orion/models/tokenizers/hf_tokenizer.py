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

from ...errors import ModelFormatError
from ...fileio import read_json

__all__ = ["HFTokenizer", "NAMED_SPECIAL_TOKENS"]

NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _content(tok) -> str | None:
    """A special token as written in tokenizer_config.json: a string or an AddedToken dict."""
    if tok is None:
        return None
    if isinstance(tok, dict):
        return tok.get("content")
    return str(tok)


def _added_token(spec, special: bool | None = None):
    from tokenizers import AddedToken
    if isinstance(spec, dict):
        kw = {k: spec[k] for k in ("single_word", "lstrip", "rstrip", "normalized", "special") if k in spec}
        if special is not None:
            kw["special"] = special
        return AddedToken(spec["content"], **kw)
    return AddedToken(str(spec), special=True if special is None else special, normalized=False)


def _check_config(cfg: dict, path: str | None) -> None:
    """The tokenizer_config.json keys read here have the types transformers gives them: a special token is
    a string or an AddedToken object (a number would become a new special token "5"), a chat template a
    string or a list of {name, template}."""
    for k in NAMED_SPECIAL_TOKENS:
        v = cfg.get(k)
        if v is not None and not isinstance(v, str) and not (isinstance(v, dict) and isinstance(v.get("content"), str)):
            raise ModelFormatError(f"{path}: {k} must be a token string or an AddedToken object with a 'content' "
                                   f"string, got {v!r}")
    t = cfg.get("chat_template")
    if t is not None and not isinstance(t, str) and not (
            isinstance(t, list) and all(isinstance(e, dict) and isinstance(e.get("name"), str) and
                                        isinstance(e.get("template"), str) for e in t)):
        raise ModelFormatError(f"{path}: chat_template must be a string or a list of {{name, template}} strings, "
                               f"got {str(t)[:80]}")


class HFTokenizer:
    """``tokenizer.json`` (+ ``tokenizer_config.json`` beside it, when present)."""

    def __init__(self, path: str, config_path: str | None = None):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ModelFormatError(f"{path}: reading tokenizer.json needs the 'tokenizers' package "
                                   f"(pip install tokenizers)") from None
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise ModelFormatError(f"{self.path}: no such file")
        try:
            self.tk = Tokenizer.from_file(self.path)
        except Exception as e:  # noqa: BLE001 - the Rust library raises plain Exception subclasses
            raise ModelFormatError(f"{self.path}: not a tokenizers tokenizer.json ({str(e).strip()[:200]}); "
                                   f"re-save it with transformers or tokenizers") from None
        folder = os.path.dirname(os.path.abspath(self.path))
        if config_path is None:
            cand = os.path.join(folder, "tokenizer_config.json")
            config_path = cand if os.path.isfile(cand) else None
        self.config_path = config_path
        cfg = {}
        if config_path is not None:
            cfg = read_json(config_path, ModelFormatError, invalid="not a tokenizer_config.json")
            if not isinstance(cfg, dict):
                raise ModelFormatError(f"{config_path}: expected a JSON object")
        self.config = cfg
        _check_config(cfg, config_path)
        legacy = os.path.join(folder, "special_tokens_map.json")
        if "added_tokens_decoder" not in cfg and os.path.isfile(legacy):
            smap = read_json(legacy, ModelFormatError, invalid="not a special_tokens_map.json")
            if isinstance(smap, dict):
                cfg = {**smap, **{k: v for k, v in cfg.items() if v is not None}}
        self.special_tokens = {k: _content(cfg.get(k)) for k in NAMED_SPECIAL_TOKENS if _content(cfg.get(k))}
        extra = cfg.get("extra_special_tokens") or cfg.get("additional_special_tokens") or []
        if isinstance(extra, dict):            # model-specific names (e.g. image_token): also special tokens
            extra = list(extra.values())
        self._add_config_tokens(cfg, extra)
        self.extra_special_tokens = [_content(t) for t in extra if _content(t)]
        self.tk.encode_special_tokens = bool(cfg.get("split_special_tokens", False))
        self._cleanup = bool(cfg.get("clean_up_tokenization_spaces", False)) and \
            type(self.tk.model).__name__ != "BPE"
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
        if not isinstance(dec, dict) or not all(str(k).isdigit() for k in dec):
            raise ModelFormatError(f"{self.config_path}: added_tokens_decoder must be an object token id -> token")
        for _, spec in sorted(dec.items(), key=lambda kv: int(kv[0])):
            if not isinstance(spec, dict) or "content" not in spec:
                raise ModelFormatError(f"{self.config_path}: added_tokens_decoder entry {spec!r} has no 'content'")
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
