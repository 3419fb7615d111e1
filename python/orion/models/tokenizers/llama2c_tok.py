"""llama2.c ``tokenizer.bin`` with ``run.c``'s encode algorithm.

File: u32 ``max_token_length``, then per token: f32 score, i32 length, ``length`` UTF-8 bytes. The number
of tokens is not stored (it is the model's vocab size); without it, tokens are read to the end of file.

encode (run.c): optional BOS; a dummy-prefix token for ``" "`` when the text is non-empty; one token per
UTF-8 code point, or its bytes as byte tokens (id = byte + 3) when the code point is not in the
vocabulary; then repeatedly merge the adjacent pair whose concatenation is a token with the highest
score (ties: leftmost); optional EOS. Like the C code, text stops at the first NUL character. The merge
loop runs on a heap (same result as run.c's quadratic scan: highest score, leftmost on ties).
"""

from __future__ import annotations

import heapq
import re
import struct

import numpy as np

from ...errors import ModelFormatError
from ...fileio import open_for_reading

__all__ = ["Llama2cTokenizer"]

_BYTE = re.compile(rb"^<0x([0-9A-Fa-f]{2})>$")


class Llama2cTokenizer:
    def __init__(self, path: str, vocab_size: int | None = None):
        self.path = path
        with open_for_reading(path, ModelFormatError, "no such file", "a llama2.c tokenizer.bin") as f:
            data = f.read()
        if len(data) < 4:
            raise ModelFormatError(f"{path}: truncated tokenizer.bin ({len(data)} bytes)")
        (self.max_token_length,) = struct.unpack_from("<I", data, 0)
        if not 0 < self.max_token_length < 1 << 16:
            raise ModelFormatError(f"{path}: not a llama2.c tokenizer.bin (max_token_length "
                                   f"{self.max_token_length})")
        off = 4
        pieces: list[bytes] = []
        scores: list[float] = []
        while (vocab_size is None and off < len(data)) or (vocab_size is not None and len(pieces) < vocab_size):
            if off + 8 > len(data):
                raise ModelFormatError(f"{path}: truncated at token {len(pieces)} (byte {off} of {len(data)}); "
                                       f"expected {vocab_size or 'more'} tokens")
            score, n = struct.unpack_from("<fi", data, off)
            off += 8
            if n < 0 or n > self.max_token_length or off + n > len(data):
                raise ModelFormatError(f"{path}: token {len(pieces)} has length {n} (max_token_length "
                                       f"{self.max_token_length}, {len(data) - off} bytes left): corrupt or truncated")
            pieces.append(data[off:off + n])
            scores.append(score)
            off += n
        if vocab_size is not None and off != len(data):
            raise ModelFormatError(f"{path}: {len(data) - off} trailing bytes after {vocab_size} tokens (does the "
                                   f"tokenizer belong to a model with vocab_size {vocab_size}?)")
        if len(pieces) < 259:
            raise ModelFormatError(f"{path}: only {len(pieces)} tokens; a llama2.c vocabulary has <unk>, BOS, EOS and "
                                   f"256 byte tokens first")
        self.pieces = pieces
        self.scores = np.asarray(scores, np.float32)
        self.vocab_size = len(pieces)
        self.bos_id, self.eos_id = 1, 2
        # str_lookup: run.c bsearches a sorted copy; with duplicate strings the first id in sorted order
        # (qsort by string, then by position here) is the deterministic choice.
        self.lookup: dict[bytes, int] = {}
        for i, p in enumerate(pieces):
            self.lookup.setdefault(p, i)
        self._space = self.lookup.get(b" ")
        self._byte_pieces = {}
        for i, p in enumerate(pieces):
            m = _BYTE.match(p)
            if m:
                self._byte_pieces[i] = bytes([int(m.group(1), 16)])

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        text = text.split("\0", 1)[0]
        raw = text.encode("utf-8")
        toks: list[int] = [1] if bos else []
        if raw:
            if self._space is None:
                raise ModelFormatError(f"{self.path}: the vocabulary has no ' ' token for the dummy prefix")
            toks.append(self._space)
        i = 0
        lookup = self.lookup
        while i < len(raw):
            j = i + 1
            while j < len(raw) and (raw[j] & 0xC0) == 0x80 and j - i < 4:
                j += 1
            cp = raw[i:j]
            t = lookup.get(cp)
            if t is not None:
                toks.append(t)
            else:
                toks.extend(b + 3 for b in cp)
            i = j
        toks = self._merge(toks)
        if eos:
            toks.append(2)
        return toks

    def _merge(self, toks: list[int]) -> list[int]:
        n = len(toks)
        if n < 2:
            return toks
        pieces, scores, lookup = self.pieces, self.scores, self.lookup
        ids = list(toks)
        nxt = list(range(1, n)) + [-1]
        prv = [-1] + list(range(n - 1))
        alive = [True] * n
        ver = [0] * n
        heap = []

        def push(a):
            b = nxt[a]
            if b < 0:
                return
            t = lookup.get(pieces[ids[a]] + pieces[ids[b]])
            if t is not None and scores[t] > -1e10:
                heapq.heappush(heap, (-float(scores[t]), a, ver[a], ver[b], b, t))

        for a in range(n - 1):
            push(a)
        while heap:
            _, a, va, vb, b, t = heapq.heappop(heap)
            if not (alive[a] and alive[b] and nxt[a] == b and ver[a] == va and ver[b] == vb):
                continue
            ids[a] = t
            ver[a] += 1
            alive[b] = False
            nxt[a] = nxt[b]
            if nxt[b] >= 0:
                prv[nxt[b]] = a
            if prv[a] >= 0:
                push(prv[a])
            push(a)
        out = []
        a = 0
        while a >= 0:
            out.append(ids[a])
            a = nxt[a]
        return out

    def piece_bytes(self, prev: int, t: int) -> bytes:
        """run.c decode: strip the leading space after BOS; ``<0xNN>`` becomes the raw byte."""
        if t in self._byte_pieces:
            return self._byte_pieces[t]
        p = self.pieces[t]
        if prev == 1 and p.startswith(b" "):
            p = p[1:]
        return p

    def decode(self, ids) -> str:
        out = bytearray()
        prev = -1
        for t in ids:
            t = int(t)
            if not 0 <= t < self.vocab_size:
                raise ModelFormatError(f"token id {t} is not in the vocabulary ({self.vocab_size} tokens)")
            if t not in (self.bos_id, self.eos_id):      # special tokens render as nothing (run.c never prints them)
                out += self.piece_bytes(prev, t)
            prev = t
        return out.decode("utf-8", errors="replace")
