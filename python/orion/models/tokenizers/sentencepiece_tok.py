"""SentencePiece ``tokenizer.model`` (Llama-2 and friends) through the ``sentencepiece`` package."""

from __future__ import annotations

import os

from ...errors import ModelFormatError

__all__ = ["SentencePieceTokenizer"]


class SentencePieceTokenizer:
    def __init__(self, path: str):
        self.path = path
        try:
            import sentencepiece as spm  # start-up: sentencepiece (~8 ms) only for a .model tokenizer
        except ImportError:
            raise ModelFormatError(f"{path}: reading SentencePiece models needs the 'sentencepiece' package "
                                   f"(pip install sentencepiece)") from None
        if not os.path.isfile(path):
            raise ModelFormatError(f"{path}: no such file")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=path)
        except (RuntimeError, OSError) as e:
            raise ModelFormatError(f"{path}: not a SentencePiece model ({str(e).strip()[:200]})") from None
        self.vocab_size = self.sp.vocab_size()
        self.bos_id = self.sp.bos_id() if self.sp.bos_id() >= 0 else None
        self.eos_id = self.sp.eos_id() if self.sp.eos_id() >= 0 else None

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        ids = list(self.sp.encode(text))
        if bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids) -> str:
        ids = [int(t) for t in ids]
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ModelFormatError(f"token id(s) {bad[:5]} not in the vocabulary ({self.vocab_size} tokens)")
        return self.sp.decode(ids)

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))
