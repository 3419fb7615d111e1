"""Training data: plain text (tokenized with a given tokenizer, or a SentencePiece model trained on the
fly) or pretokenized uint16 ``.bin`` files (TinyStories convention: flat little-endian ids, each story
prefixed with BOS); a contiguous train/validation split; deterministic seeded batching whose position
(epoch, cursor) is saved in checkpoints so a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass

import numpy as np

from .errors import DataError, VocabMismatch
from .writes import atomic_write

TEXT_EXT = (".txt", ".text", ".md")


# ------------------------------------------------------------------------------------ tokenizers
class SentencePieceTokenizer:
    """A SentencePiece ``.model`` (Llama-2's ``tokenizer.model`` or one trained by :func:`train_sentencepiece`)."""

    def __init__(self, model: bytes | str):
        import sentencepiece as spm  # start-up: sentencepiece (~8 ms) only for a .model tokenizer
        if isinstance(model, str):
            try:
                with open(model, "rb") as f:
                    model = f.read()
            except OSError as e:
                raise DataError(f"tokenizer {model}: {e.strerror}") from None
        self.model_bytes = bytes(model)
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.LoadFromSerializedProto(self.model_bytes)
        except Exception as e:  # noqa: BLE001 - sentencepiece raises plain RuntimeError/OSError
            raise DataError(f"not a SentencePiece model ({e})") from None
        self.vocab_size = int(self.sp.vocab_size())
        self.bos_id = int(self.sp.bos_id())
        self.eos_id = int(self.sp.eos_id())
        self.fingerprint = "spm:" + hashlib.sha256(self.model_bytes).hexdigest()[:16]

    def encode(self, text: str) -> list[int]:
        return list(self.sp.encode(text))

    def decode(self, ids) -> str:
        return self.sp.decode([int(i) for i in ids])

    def save(self, path: str) -> None:
        with atomic_write(path) as f:
            f.write(self.model_bytes)


def train_sentencepiece(texts: list[str], vocab_size: int) -> SentencePieceTokenizer:
    """A BPE SentencePiece model trained in memory on ``texts`` (deterministic: one thread, no sampling).
    Byte fallback is on when the vocabulary has room for it (>= 1024)."""
    import sentencepiece as spm  # start-up: sentencepiece (~8 ms) only for a .model tokenizer
    lines = [ln for t in texts for ln in t.splitlines() if ln.strip()]
    if not lines:
        raise DataError("cannot train a tokenizer on empty text")
    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=buf, vocab_size=int(vocab_size), model_type="bpe",
            character_coverage=1.0, byte_fallback=vocab_size >= 1024, num_threads=1, unk_id=0, bos_id=1, eos_id=2,
            pad_id=-1, input_sentence_size=0, shuffle_input_sentence=False, normalization_rule_name="identity",
            max_sentence_length=1 << 16, minloglevel=2, hard_vocab_limit=False)
    except RuntimeError as e:
        raise DataError(f"SentencePiece training failed: {e}") from None
    return SentencePieceTokenizer(buf.getvalue())


def load_tokenizer(path: str):
    """A tokenizer from a file: SentencePiece ``.model``, or a llama2.c ``tokenizer.bin`` (through
    :mod:`orion.models.tokenizers`)."""
    if not os.path.exists(path):
        raise DataError(f"tokenizer {path}: no such file")
    if path.endswith(".bin"):
        try:
            from ..models import tokenizers as mt  # start-up: orion.models.tokenizers (~14 ms), not for --help
            tok = mt.load(path)   # type: ignore[attr-defined]
        except (ImportError, AttributeError):
            raise DataError(f"tokenizer {path}: llama2.c tokenizer.bin files need orion.models.tokenizers; "
                            f"pass the SentencePiece tokenizer.model instead") from None
        return _Wrapped(tok, path)
    return SentencePieceTokenizer(path)


class _Wrapped:
    def __init__(self, tok, path):
        self.tok = tok
        self.vocab_size = int(getattr(tok, "vocab_size"))
        self.bos_id = int(getattr(tok, "bos_id", 1))
        self.eos_id = int(getattr(tok, "eos_id", 2))
        with open(path, "rb") as f:
            self.fingerprint = "bin:" + hashlib.sha256(f.read()).hexdigest()[:16]

    def encode(self, text):
        return list(self.tok.encode(text))

    def decode(self, ids):
        return self.tok.decode(list(ids))


# ------------------------------------------------------------------------------------ loading
def read_texts(path: str) -> list[str]:
    """Documents of a text file or of every text file in a folder (documents = blank-line separated)."""
    if not os.path.exists(path):
        raise DataError(f"data {path}: no such file or folder")
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(r, n) for r, _, ns in os.walk(path) for n in ns if n.endswith(TEXT_EXT))
    if not files:
        raise DataError(f"data {path}: no text files ({', '.join(TEXT_EXT)}) found")
    docs = []
    for fn in files:
        try:
            with open(fn, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise DataError(f"data {fn}: {e.strerror}") from None
        docs += [d.strip() for d in text.replace("\r\n", "\n").split("\n\n") if d.strip()]
    if not docs:
        raise DataError(f"data {path}: the text is empty")
    return docs


def encode_documents(docs: list[str], tok) -> np.ndarray:
    """BOS + ids of every document, concatenated (llama2.c tinystories.py convention); tokenizers without
    a BOS (Qwen) separate documents with their end-of-text token instead."""
    sep = tok.bos_id if tok.bos_id is not None else tok.eos_id
    if sep is None:
        raise VocabMismatch("the tokenizer has neither a BOS nor an EOS token to separate documents; "
                            "pass pretokenized .bin data")
    out = []
    for d in docs:
        out.append(sep)
        out.extend(tok.encode(d))
    dtype = np.uint16 if tok.vocab_size <= 65536 else np.int32
    return np.asarray(out, dtype=dtype)


def read_token_bin(path: str) -> np.ndarray:
    """A pretokenized file: flat little-endian uint16 ids (memory-mapped)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        raise DataError(f"data {path}: no such file") from None
    if size % 2:
        raise DataError(f"data {path}: {size} bytes is not a whole number of uint16 tokens")
    if size == 0:
        raise DataError(f"data {path}: the file is empty")
    return np.memmap(path, dtype="<u2", mode="r")


def fingerprint_tokens(tokens: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(str(len(tokens)).encode())
    step = max(1, len(tokens) // 4096)
    h.update(np.ascontiguousarray(tokens[::step]).astype("<u4").tobytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------ batching
def inputs_targets(batch) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of a batch: :class:`TokenDataset`'s windows ``[B, S + 1]`` (targets: the inputs shifted
    by one), or the pair :class:`orion.train.examples.ExampleDataset` gives (targets with IGNORE)."""
    return batch if isinstance(batch, tuple) else (batch[:, :-1], batch[:, 1:])


@dataclass
class DataPosition:
    epoch: int = 0
    cursor: int = 0

    def as_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}


class ShuffledWindows:
    """The training order every dataset shares: ``n_windows`` training windows visited in a seeded random
    order per epoch, the position (epoch, cursor) saved in checkpoints, so a resumed run - on any dataset
    kind - sees exactly the batches it would have seen. Subclasses set ``seed``, ``n_windows``,
    ``fingerprint`` and ``n_tokens`` and call :meth:`_start_order`."""

    def _start_order(self) -> None:
        self.pos = DataPosition()
        self._perm_epoch = -1
        self._perm = None

    def _order(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_windows)
            self._perm_epoch = epoch
        return self._perm

    def _advance(self) -> int:
        """The next training window's index; advances the saved position."""
        if self.pos.cursor >= self.n_windows:
            self.pos = DataPosition(self.pos.epoch + 1, 0)
        w = int(self._order(self.pos.epoch)[self.pos.cursor])
        self.pos.cursor += 1
        return w

    def skip(self, n: int) -> None:
        """Advances past ``n`` windows exactly as ``next_batch`` would (the other ranks' share of a step)."""
        for _ in range(n):
            if self.pos.cursor >= self.n_windows:
                self.pos = DataPosition(self.pos.epoch + 1, 0)
            self.pos.cursor += 1

    def state(self) -> dict:
        return {"epoch": self.pos.epoch, "cursor": self.pos.cursor, "seed": self.seed, "fingerprint": self.fingerprint,
                "n_tokens": int(self.n_tokens)}

    def load_state(self, d: dict) -> None:
        self.pos = DataPosition(int(d["epoch"]), int(d["cursor"]))


class TokenDataset(ShuffledWindows):
    """Windows of ``seq_len + 1`` tokens (input = w[:-1], target = w[1:]) starting every ``seq_len``
    tokens; the training windows are visited in a seeded random order per epoch."""

    def __init__(self, tokens: np.ndarray, seq_len: int, vocab_size: int, val_fraction: float = 0.1, seed: int = 0,
                 source: str = "data"):
        n = len(tokens)
        need = seq_len + 1
        if n < need:
            raise DataError(f"{source}: {n} tokens is too short for one training sequence of {seq_len} tokens "
                            f"(needs at least {need})")
        mx = int(np.max(tokens))
        if mx >= vocab_size:
            raise VocabMismatch(f"{source}: token id {mx} does not fit the model's vocabulary of {vocab_size} "
                                f"(wrong tokenizer or model?)")
        n_val = int(n * val_fraction) if val_fraction > 0 else 0
        if n_val and n_val < need:
            n_val = need if n - need >= need else 0
        self.train = tokens[:n - n_val]
        self.val = tokens[n - n_val:] if n_val else tokens[:0]
        if len(self.train) < need:
            raise DataError(f"{source}: {len(self.train)} training tokens after the validation split is too short "
                            f"for one sequence of {seq_len} tokens")
        self.seq_len, self.seed, self.source = seq_len, int(seed), source
        self.n_windows = (len(self.train) - 1) // seq_len
        self.n_val_windows = (len(self.val) - 1) // seq_len if len(self.val) > seq_len else 0
        self.fingerprint = fingerprint_tokens(tokens)
        self.n_tokens = n
        self._start_order()

    def next_batch(self, batch: int) -> np.ndarray:
        """[batch, seq_len + 1] int64 token windows; advances the saved position."""
        S = self.seq_len
        out = np.empty((batch, S + 1), np.int64)
        for i in range(batch):
            w = self._advance()
            out[i] = self.train[w * S: w * S + S + 1]
        return out

    def val_batches(self, batch: int, max_batches: int | None = None):
        """Fixed validation windows in order (the same every time)."""
        S = self.seq_len
        n = self.n_val_windows if max_batches is None else min(self.n_val_windows, max_batches * batch)
        for start in range(0, n, batch):
            idx = range(start, min(n, start + batch))
            yield np.stack([np.asarray(self.val[w * S: w * S + S + 1], np.int64) for w in idx])
