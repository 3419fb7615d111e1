"""Tokenizers: GPT-2 byte-level BPE, SentencePiece ``tokenizer.model``, llama2.c ``tokenizer.bin``.

All share ``encode(text) -> list[int]`` (no special tokens unless asked), ``decode(ids) -> str``,
``vocab_size``, ``bos_id``, ``eos_id``."""

from __future__ import annotations

import os

from ...errors import ModelFormatError
from .gpt2_bpe import GPT2Tokenizer
from .llama2c_tok import Llama2cTokenizer
from .sentencepiece_tok import SentencePieceTokenizer

__all__ = ["GPT2Tokenizer", "Llama2cTokenizer", "SentencePieceTokenizer", "load_tokenizer", "find_tokenizer"]


def load_tokenizer(path: str, vocab_size: int | None = None):
    """By file: ``tokenizer.model`` (SentencePiece), ``*.bin`` (llama2.c), a folder or ``vocab.json`` with
    ``merges.txt`` beside it (GPT-2 BPE)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        for cand in ("tokenizer.model", "tokenizer.bin"):
            if os.path.isfile(os.path.join(path, cand)):
                return load_tokenizer(os.path.join(path, cand), vocab_size)
        if os.path.isfile(os.path.join(path, "vocab.json")):
            return GPT2Tokenizer(os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt"))
        raise ModelFormatError(f"{path}: no tokenizer.model, tokenizer.bin or vocab.json + merges.txt here")
    if not os.path.exists(path):
        raise ModelFormatError(f"{path}: no such tokenizer file")
    if path.endswith(".model"):
        return SentencePieceTokenizer(path)
    if path.endswith(".json"):
        base = os.path.basename(path)
        merges = os.path.join(os.path.dirname(path), base.replace("vocab.json", "merges.txt")) \
            if "vocab" in base else os.path.join(os.path.dirname(path), "merges.txt")
        return GPT2Tokenizer(path, merges)
    return Llama2cTokenizer(path, vocab_size)


def find_tokenizer(model_path: str, cfg):
    """The tokenizer stored with a checkpoint (HF folder: vocab.json + merges.txt or tokenizer.model;
    llama2.c .bin: tokenizer.bin / tokenizer.model beside it), if its vocabulary size matches; else None."""
    d = model_path if os.path.isdir(model_path) else os.path.dirname(os.path.abspath(model_path))
    stem = os.path.splitext(os.path.basename(model_path))[0]
    cands = []
    if cfg.family == "gpt2":
        for v, m in (("vocab.json", "merges.txt"), ("gpt2-vocab.json", "gpt2-merges.txt")):
            if os.path.isfile(os.path.join(d, v)) and os.path.isfile(os.path.join(d, m)):
                cands.append(lambda v=v, m=m: GPT2Tokenizer(os.path.join(d, v), os.path.join(d, m)))
    else:
        for name in (f"{stem}.tokenizer.bin", f"tok{cfg.vocab_size}.bin", "tokenizer.bin", "llama2c-tokenizer.bin"):
            if os.path.isfile(os.path.join(d, name)):
                cands.append(lambda name=name: Llama2cTokenizer(os.path.join(d, name), cfg.vocab_size))
        for name in ("tokenizer.model", f"tok{cfg.vocab_size}.model", "llama2-tokenizer.model"):
            if os.path.isfile(os.path.join(d, name)):
                cands.append(lambda name=name: SentencePieceTokenizer(os.path.join(d, name)))
    for make in cands:
        try:
            tok = make()
        except ModelFormatError:
            continue
        if tok.vocab_size == cfg.vocab_size:
            return tok
    return None
