"""GPT-2 byte-level BPE, exact to OpenAI's ``encoder.py``.

Pre-tokenizer: the regex ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
implemented as a hand-written scanner with the same leftmost-alternative semantics (Python's ``re`` has
no ``\\p{..}``; the scanner avoids a dependency on the ``regex`` package). Character classes: ``\\p{L}``
= Unicode general category L*, ``\\p{N}`` = N* (from the running Python's ``unicodedata``), ``\\s`` =
the Unicode White_Space property (what ``regex`` uses: ``str.isspace()`` minus U+001C..U+001F).
Characters assigned in Unicode versions newer than this Python's tables are classified as unassigned
(they fall in the "other" class), as an older ``regex`` would.

BPE: per pre-token, UTF-8 bytes → byte symbols, repeatedly merge the adjacent pair with the lowest
merge rank (every occurrence, left to right), then look the symbols up in ``vocab.json``.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from ...errors import ModelFormatError
from ...fileio import read_json

__all__ = ["GPT2Tokenizer", "bytes_to_unicode", "pretokenize"]


def bytes_to_unicode() -> dict[int, str]:
    """Byte → printable character: 33–126, 161–172, 174–255 map to themselves, the other 68 bytes in
    increasing order to U+0100, U+0101, ..."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


_WS_EXTRA_NOT = {"\x1c", "\x1d", "\x1e", "\x1f"}


@lru_cache(maxsize=4096)
def _cls(c: str) -> str:
    """'L' letter, 'N' number, 'S' whitespace, 'O' other."""
    if c.isspace() and c not in _WS_EXTRA_NOT:
        return "S"
    cat = unicodedata.category(c)
    if cat[0] == "L":
        return "L"
    if cat[0] == "N":
        return "N"
    return "O"


_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def pretokenize(text: str) -> list[str]:
    """The GPT-2 regex, alternative by alternative, leftmost first."""
    out = []
    i, n = 0, len(text)
    cls = [_cls(c) for c in text]
    while i < n:
        c = text[i]
        # 1. contractions
        if c == "'":
            m = None
            for suf in _CONTRACTIONS:
                if text.startswith(suf, i + 1):
                    m = suf
                    break
            if m is not None:
                out.append(text[i:i + 1 + len(m)])
                i += 1 + len(m)
                continue
        # 2-4. ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` (the optional space is a literal U+0020)
        j = i + 1 if (c == " " and i + 1 < n and cls[i + 1] != "S") else i
        k = cls[j]
        if k != "S":
            e = j + 1
            while e < n and cls[e] == k:
                e += 1
            out.append(text[i:e])
            i = e
            continue
        # 5. `\s+(?!\S)`  6. `\s+`
        if cls[i] == "S":
            e = i + 1
            while e < n and cls[e] == "S":
                e += 1
            if e == n:
                out.append(text[i:e])
                i = e
            elif e - i >= 2:
                out.append(text[i:e - 1])       # leave one whitespace to attach to the next token
                i = e - 1
            else:
                out.append(text[i:e])           # `\s+` (the lookahead failed for a single char)
                i = e
            continue
    return out


class GPT2Tokenizer:
    """``encode(text) -> ids``, ``decode(ids) -> text`` (invalid UTF-8 replaced with U+FFFD)."""

    def __init__(self, vocab_path: str, merges_path: str):
        self.path = vocab_path
        enc = read_json(vocab_path, ModelFormatError, invalid="not a GPT-2 vocab.json")
        if not isinstance(enc, dict) or not all(isinstance(v, int) for v in enc.values()):
            raise ModelFormatError(f"{vocab_path}: expected a JSON object mapping token strings to integer ids")
        try:
            with open(merges_path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            raise ModelFormatError(f"{merges_path}: no such file") from None
        except UnicodeDecodeError as e:
            raise ModelFormatError(f"{merges_path}: not UTF-8 text ({e})") from None
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        ranks = {}
        for ln, line in enumerate(lines):
            if not line:
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ModelFormatError(f"{merges_path}: line {ln + 2}: expected two symbols separated by one space, "
                                       f"got {line!r}")
            ranks.setdefault((parts[0], parts[1]), len(ranks))
        self.encoder: dict[str, int] = enc
        self.decoder: dict[int, str] = {v: k for k, v in enc.items()}
        self.ranks = ranks
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        missing = [s for s in self.byte_encoder.values() if s not in enc]
        if missing:
            raise ModelFormatError(f"{vocab_path}: missing byte symbols {missing[:5]} (not a byte-level BPE vocab)")
        self.vocab_size = max(enc.values()) + 1
        self.eos_id = enc.get("<|endoftext|>")
        self.bos_id = self.eos_id
        self._cache: dict[str, tuple[int, ...]] = {}

    def _bpe(self, token: str) -> tuple[str, ...]:
        word = tuple(token)
        ranks = self.ranks
        while len(word) > 1:
            best, best_rank = None, None
            for pair in zip(word, word[1:]):
                r = ranks.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            a, b = best
            new = []
            i = 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == a and word[i + 1] == b:
                    new.append(a + b)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = tuple(new)
        return word

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        be = self.byte_encoder
        for piece in pretokenize(text):
            hit = self._cache.get(piece)
            if hit is None:
                sym = "".join(be[b] for b in piece.encode("utf-8"))
                try:
                    hit = tuple(self.encoder[s] for s in self._bpe(sym))
                except KeyError as e:
                    raise ModelFormatError(f"{self.path}: BPE symbol {e.args[0]!r} is not in the vocabulary "
                                           f"(vocab.json and merges.txt do not belong together)") from None
                if len(self._cache) < 100_000:
                    self._cache[piece] = hit
            ids.extend(hit)
        return ids

    def decode(self, ids) -> str:
        bd = self.byte_decoder
        out = bytearray()
        for t in ids:
            s = self.decoder.get(int(t))
            if s is None:
                raise ModelFormatError(f"token id {t} is not in the vocabulary ({self.vocab_size} tokens)")
            if s == "<|endoftext|>":
                out += s.encode()
                continue
            out += bytes(bd[c] for c in s)
        return out.decode("utf-8", errors="replace")
