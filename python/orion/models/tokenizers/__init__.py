"""Tokenizers: Hugging Face ``tokenizer.json`` (through the ``tokenizers`` library), GPT-2 byte-level BPE,
SentencePiece ``tokenizer.model``, llama2.c ``tokenizer.bin``.

All share ``encode(text) -> list[int]`` (no special tokens unless asked), ``decode(ids) -> str``,
``vocab_size``, ``bos_id``, ``eos_id``. :func:`find_tokenizer` is the one discovery rule every command
uses; :func:`stop_token_ids` the end-of-text / end-of-turn ids a checkpoint folder declares."""

from __future__ import annotations

import os

from ...errors import ModelFormatError
from ...fileio import read_json
from .chat import ChatTemplate, ChatTemplateError, chat_prompt_ids, end_of_turn_ids
from .gpt2_bpe import GPT2Tokenizer
from .hf_tokenizer import HFTokenizer
from .llama2c_tok import Llama2cTokenizer
from .sentencepiece_tok import SentencePieceTokenizer

__all__ = ["GPT2Tokenizer", "HFTokenizer", "Llama2cTokenizer", "SentencePieceTokenizer", "ChatTemplate",
           "ChatTemplateError", "chat_prompt_ids", "end_of_turn_ids", "load_tokenizer", "find_tokenizer", "stop_token_ids"]


def load_tokenizer(path: str, vocab_size: int | None = None):
    """By file: ``tokenizer.json`` (Hugging Face, with tokenizer_config.json beside it), ``tokenizer.model``
    (SentencePiece), ``*.bin`` (llama2.c), ``vocab.json`` with ``merges.txt`` beside it (GPT-2 BPE); a
    folder: the first of these present, in that order."""
    path = os.fspath(path)
    if os.path.isdir(path):
        for cand in ("tokenizer.json", "tokenizer.model", "tokenizer.bin"):
            if os.path.isfile(os.path.join(path, cand)):
                return load_tokenizer(os.path.join(path, cand), vocab_size)
        if os.path.isfile(os.path.join(path, "vocab.json")):
            return GPT2Tokenizer(os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt"))
        raise ModelFormatError(f"{path}: no tokenizer.json, tokenizer.model, tokenizer.bin or vocab.json + "
                               f"merges.txt here")
    if not os.path.exists(path):
        raise ModelFormatError(f"{path}: no such tokenizer file")
    if path.endswith(".model"):
        return SentencePieceTokenizer(path)
    if path.endswith("tokenizer.json"):
        return HFTokenizer(path)
    if path.endswith(".json"):
        base = os.path.basename(path)
        merges = os.path.join(os.path.dirname(path), base.replace("vocab.json", "merges.txt")) \
            if "vocab" in base else os.path.join(os.path.dirname(path), "merges.txt")
        return GPT2Tokenizer(path, merges)
    return Llama2cTokenizer(path, vocab_size)


def find_tokenizer(model_path: str, cfg):
    """The tokenizer stored with a checkpoint, or None. ``cfg``: anything with ``vocab_size`` (and
    ``family``). HF folder: ``tokenizer.json`` first (a Hugging Face tokenizer, preferred when present),
    else vocab.json + merges.txt (GPT-2) or tokenizer.model; llama2.c ``.bin``: tokenizer.bin /
    tokenizer.model beside it. A tokenizer may have fewer tokens than the model (embeddings padded, e.g.
    Qwen: 151,665 tokens for 151,936 rows), never more: a tokenizer.json that is larger or unreadable is
    an error; other candidates that do not fit are skipped."""
    model_path = os.fspath(model_path)
    d = model_path if os.path.isdir(model_path) else os.path.dirname(os.path.abspath(model_path))
    stem = os.path.splitext(os.path.basename(model_path))[0]
    V = int(cfg.vocab_size)
    hf = os.path.join(d, "tokenizer.json")
    if not model_path.endswith(".bin") and os.path.isfile(hf):      # HF checkpoints, not llama2.c files
        tok = HFTokenizer(hf)
        if tok.vocab_size > V:
            raise ModelFormatError(f"{hf}: {tok.vocab_size} tokens but the model's vocab_size is {V}; the "
                                   f"tokenizer does not belong to this checkpoint")
        return tok
    cands = []
    if getattr(cfg, "family", "llama") == "gpt2":
        for v, m in (("vocab.json", "merges.txt"), ("gpt2-vocab.json", "gpt2-merges.txt")):
            if os.path.isfile(os.path.join(d, v)) and os.path.isfile(os.path.join(d, m)):
                cands.append(lambda v=v, m=m: GPT2Tokenizer(os.path.join(d, v), os.path.join(d, m)))
    else:
        for name in (f"{stem}.tokenizer.bin", f"tok{V}.bin", "tokenizer.bin", "llama2c-tokenizer.bin"):
            if os.path.isfile(os.path.join(d, name)):
                cands.append(lambda name=name: Llama2cTokenizer(os.path.join(d, name), V))
        for name in (f"{stem}.tokenizer.model", "tokenizer.model", f"tok{V}.model", "llama2-tokenizer.model"):
            if os.path.isfile(os.path.join(d, name)):
                cands.append(lambda name=name: SentencePieceTokenizer(os.path.join(d, name)))
    for make in cands:
        try:
            tok = make()
        except ModelFormatError:
            continue
        if tok.vocab_size <= V:
            return tok
    return None


def _ids(value, source: str) -> list[int]:
    if value is None:
        return []
    vals = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vals):
        raise ModelFormatError(f"{source}: eos_token_id must be a token id or a list of them, got {value!r}")
    return list(vals)


def stop_token_ids(model_path: str, tokenizer=None) -> list[int]:
    """End-of-text and end-of-turn ids a checkpoint declares: ``eos_token_id`` of config.json and of
    generation_config.json (an id or a list: Llama 3 instruct lists <|eot_id|>, Gemma 3 <end_of_turn>)
    and the tokenizer's eos token (tokenizer_config.json: Qwen's <|im_end|>), in that order, unique."""
    d = model_path if os.path.isdir(model_path) else os.path.dirname(os.path.abspath(model_path))
    out: list[int] = []
    for name in ("config.json", "generation_config.json"):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            j = read_json(p, ModelFormatError)
            if isinstance(j, dict):
                out += _ids(j.get("eos_token_id"), p)
    eos = getattr(tokenizer, "eos_id", None)
    if eos is not None:
        out.append(int(eos))
    return list(dict.fromkeys(out))
