"""Fine-tuning data as researchers keep it: JSON Lines files of examples (mlx-lm's layout: a folder with
``train.jsonl``, ``valid.jsonl`` and optionally ``test.jsonl``, or one ``.jsonl`` file split like text).

Each line is one example in one of three formats, detected per file (every line of a file must be the
same one; the first line that differs, or lacks a field, is refused with its line number):

* ``{"text": "..."}`` - plain text: BOS + text + EOS, every token a target;
* ``{"prompt": "...", "completion": "..."}`` - rendered as a user turn and an assistant turn with the
  tokenizer's chat template when it has one (as mlx-lm does), else BOS + prompt + completion + EOS;
* ``{"messages": [{"role": ..., "content": ...}, ...]}`` - rendered with the chat template (a tokenizer
  without one is refused).

``mask_prompt``: only the completion / the assistant turns are targets (their end-of-turn tokens
included: the model must learn to stop); everything else is context. An assistant turn is located by
rendering the conversation up to it (with the generation prompt) and through it: both token lists must
be prefixes of the whole conversation's, else the template rewrites earlier turns (it is refused, not
guessed).

**Padded, not packed**: each example is one window of ``seq_len + 1`` tokens, padded after its end with
targets that do not count (:data:`IGNORE`). The training programs' attention mask is compiled into them
(causal, or a sliding window), so several examples packed into one window would attend across their
boundaries; padding after an example is invisible to it under a causal mask, so each example is computed
exactly as alone. The cost is the padding's compute. Examples longer than the window are truncated (and
counted, :attr:`ExampleDataset.truncated`)."""

from __future__ import annotations

import hashlib
import os

import numpy as np

from ..fileio import iter_jsonl
from .data import ShuffledWindows
from .errors import DataError, VocabMismatch

IGNORE = -1                              # a target that does not count (context under mask_prompt, padding)
FORMATS = ("text", "completions", "chat")
SPLITS = ("train", "valid", "test")
MAX_LINE_BYTES = 1 << 24                 # one example; a longer line is not an example of any window we train
_FIELDS = {"text": ("text",), "completions": ("prompt", "completion"), "chat": ("messages",)}


# ------------------------------------------------------------------------------------ reading
def read_jsonl(path: str) -> list[tuple[int, dict]]:
    """``(line number, object)`` of every non-blank line of ``path`` (through :func:`orion.fileio.iter_jsonl`:
    each line bounded in size and nesting); a line that is not a JSON object is a :class:`DataError`
    naming the file and line."""
    out = []
    for no, obj in iter_jsonl(path, DataError, max_line_bytes=MAX_LINE_BYTES):
        if not isinstance(obj, dict):
            raise DataError(f"{path}, line {no}: each line must be a JSON object ({{\"text\": ...}}, "
                            f"{{\"prompt\", \"completion\"}} or {{\"messages\": [...]}}), got {type(obj).__name__}")
        out.append((no, obj))
    if not out:
        raise DataError(f"data {path}: no examples (the file is empty)")
    return out


def detect_format(obj: dict, where: str) -> str:
    """The format of one example (:data:`FORMATS`)."""
    found = [f for f, keys in _FIELDS.items() if any(k in obj for k in keys)]
    if len(found) != 1:
        raise DataError(f"{where}: an example has 'text', 'prompt' + 'completion' or 'messages'"
                        + (f"; this one has fields of several formats ({', '.join(found)})" if found else
                           f"; this one has {sorted(obj)[:6]}"))
    fmt = found[0]
    for key in _FIELDS[fmt]:
        if key not in obj:
            raise DataError(f"{where}: a {fmt} example needs {' and '.join(repr(k) for k in _FIELDS[fmt])}; "
                            f"{key!r} is missing")
    return fmt


def _text_field(obj: dict, key: str, where: str) -> str:
    v = obj[key]
    if not isinstance(v, str):
        raise DataError(f"{where}: {key!r} must be a string, got {type(v).__name__}")
    return v


def _messages(obj: dict, where: str) -> list[dict]:
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise DataError(f"{where}: 'messages' must be a non-empty list of {{\"role\", \"content\"}} objects")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(f"{where}: messages[{i}] must be an object with string 'role' and 'content'")
    if not any(m["role"] == "assistant" for m in msgs):
        raise DataError(f"{where}: the conversation has no assistant turn to train on")
    return msgs


# ------------------------------------------------------------------------------------ encoding
def _template(tok):
    return getattr(tok, "chat_template", None) or None


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _chat(tok, msgs: list[dict], mask_prompt: bool, where: str, stats: dict | None) -> tuple[list[int], list[bool]]:
    """Token ids of a conversation and, per token, whether it is a target. Under ``mask_prompt`` an
    assistant turn's tokens run from the end of the conversation rendered up to it (with the generation
    prompt, which must be a prefix of the whole) to where the conversation rendered through it stops
    agreeing with the whole (a template may end a conversation with a token it does not write between turns:
    Phi-3's <|endoftext|>). A turn the template renders differently once later turns follow (Mistral moves
    the system prompt into the last user turn) cannot be located: it stays context, counted in
    ``stats["unlocated_turns"]``; the last assistant turn must be located."""
    from ..models.tokenizers import ChatTemplateError, chat_prompt_ids  # start-up: orion.models.tokenizers (~14 ms)
    try:
        ids = chat_prompt_ids(tok, msgs, add_generation_prompt=False)
        if not mask_prompt:
            return ids, [True] * len(ids)
        counts = [False] * len(ids)
        turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        for i in turns:
            start = chat_prompt_ids(tok, msgs[:i], add_generation_prompt=True) if i else []
            stop = _common(chat_prompt_ids(tok, msgs[:i + 1], add_generation_prompt=False), ids)
            if ids[:len(start)] == start and stop > len(start):
                counts[len(start):stop] = [True] * (stop - len(start))
            elif i == turns[-1]:
                raise DataError(f"{where}: --mask-prompt cannot find the last assistant turn's tokens: the chat "
                                f"template renders the conversation up to it differently from the whole; train "
                                f"without --mask-prompt")
            elif stats is not None:
                stats["unlocated_turns"] = stats.get("unlocated_turns", 0) + 1
    except ChatTemplateError as e:
        raise DataError(f"{where}: {e}") from None
    return ids, counts


def encode_example(obj: dict, fmt: str, tok, mask_prompt: bool, where: str,
                   stats: dict | None = None) -> tuple[list[int], list[bool]]:
    """(ids, counts): the example's tokens and, per token, whether it is a target (predicted from the
    tokens before it); ``stats`` counts what masking could not locate (:func:`_chat`)."""
    bos = [tok.bos_id] if getattr(tok, "bos_id", None) is not None else []
    eos = [tok.eos_id] if getattr(tok, "eos_id", None) is not None else []
    if fmt == "text":
        ids = bos + list(tok.encode(_text_field(obj, "text", where))) + eos
        return ids, [True] * len(ids)
    if fmt == "completions":
        prompt, completion = _text_field(obj, "prompt", where), _text_field(obj, "completion", where)
        if _template(tok):
            return _chat(tok, [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}],
                         mask_prompt, where, stats)
        head = bos + list(tok.encode(prompt))
        tail = list(tok.encode(completion)) + eos
        return head + tail, [not mask_prompt] * len(head) + [True] * len(tail)
    if not _template(tok):
        raise DataError(f"{where}: 'messages' examples are rendered with the model's chat template, and this "
                        f"tokenizer has none; use {{\"prompt\", \"completion\"}} or {{\"text\"}} lines, or a chat "
                        f"model's tokenizer")
    return _chat(tok, _messages(obj, where), mask_prompt, where, stats)


# ------------------------------------------------------------------------------------ the dataset
def _windows(examples, seq_len: int, pad: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Tokens ``[n, seq_len + 1]`` and targets ``[n, seq_len]`` (IGNORE where not counted), one example per
    window; how many were truncated."""
    n, W = len(examples), seq_len + 1
    tokens = np.full((n, W), pad, np.int64)
    targets = np.full((n, seq_len), IGNORE, np.int64)
    cut = 0
    for i, (ids, counts) in enumerate(examples):
        if len(ids) > W:
            ids, counts, cut = ids[:W], counts[:W], cut + 1
        tokens[i, :len(ids)] = ids
        t = np.asarray(ids[1:], np.int64)
        targets[i, :len(t)] = np.where(np.asarray(counts[1:], bool), t, IGNORE)
    return tokens, targets, cut


class ExampleDataset(ShuffledWindows):
    """Windows of one example each (:func:`_windows`) in the shared training order (:class:`ShuffledWindows`):
    ``next_batch`` gives ``(inputs [B, S], targets [B, S])``,
    ``val_batches`` / ``test_batches`` the held-out ones in order."""

    def __init__(self, splits: dict, seq_len: int, vocab_size: int, seed: int = 0, source: str = "data",
                 pad_id: int = 0):
        if not splits.get("train"):
            raise DataError(f"{source}: no training examples")
        self.seq_len, self.seed, self.source = int(seq_len), int(seed), source
        self.truncated = 0
        self.unlocated_turns = 0                 # assistant turns --mask-prompt left as context (load_examples)
        self._split: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        h = hashlib.sha256()
        for name, examples in splits.items():
            if not examples:
                continue
            tok, tgt, cut = _windows(examples, self.seq_len, pad_id)
            mx = int(tok.max())
            if mx >= vocab_size:
                raise VocabMismatch(f"{source}: token id {mx} does not fit the model's vocabulary of {vocab_size} "
                                    f"(wrong tokenizer or model?)")
            if not (tgt != IGNORE).any(axis=1).all():
                i = int(np.flatnonzero(~(tgt != IGNORE).any(axis=1))[0])
                raise DataError(f"{source}: {name} example {i + 1} has no target token within the {self.seq_len}-token "
                                f"window (an empty completion without an end token, or a prompt that fills the "
                                f"window); shorten the prompt or raise --seq-len")
            self.truncated += cut
            self._split[name] = (tok, tgt)
            h.update(name.encode() + tok.tobytes() + tgt.tobytes())
        self.fingerprint = h.hexdigest()[:16]
        self.n_windows = len(self._split["train"][0])
        self.n_val_windows = len(self._split["valid"][0]) if "valid" in self._split else 0
        self.n_test_windows = len(self._split["test"][0]) if "test" in self._split else 0
        self.n_tokens = int(sum((t != IGNORE).sum() for _, t in self._split.values()))
        self._start_order()

    def next_batch(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        tok, tgt = self._split["train"]
        idx = [self._advance() for _ in range(batch)]
        return tok[idx, :-1], tgt[idx]

    def _batches(self, split: str, batch: int, max_batches: int | None):
        if split not in self._split:
            return
        tok, tgt = self._split[split]
        n = len(tok) if max_batches is None else min(len(tok), max_batches * batch)
        for start in range(0, n, batch):
            yield tok[start:min(n, start + batch), :-1], tgt[start:min(n, start + batch)]

    def val_batches(self, batch: int, max_batches: int | None = None):
        yield from self._batches("valid", batch, max_batches)

    def test_batches(self, batch: int, max_batches: int | None = None):
        yield from self._batches("test", batch, max_batches)


# ------------------------------------------------------------------------------------ files to a dataset
def is_jsonl_data(path: str) -> bool:
    """A ``.jsonl`` file, or a folder holding ``train.jsonl`` (mlx-lm's layout)."""
    return path.endswith(".jsonl") or (os.path.isdir(path) and os.path.isfile(os.path.join(path, "train.jsonl")))


def read_splits(path: str, val_fraction: float = 0.1) -> dict[str, list[tuple[str, dict]]]:
    """``{split: [(where, example), ...]}``: a folder's ``train.jsonl`` / ``valid.jsonl`` / ``test.jsonl``, or
    one file whose last ``val_fraction`` of examples is the validation split; each file one format."""
    if os.path.isdir(path):
        files = {s: os.path.join(path, f"{s}.jsonl") for s in SPLITS}
        files = {s: fn for s, fn in files.items() if os.path.isfile(fn)}
        if "train" not in files:
            raise DataError(f"data {path}: a folder of JSON Lines data needs train.jsonl (and valid.jsonl, "
                            f"optionally test.jsonl)")
        out = {s: [(f"{fn}, line {no}", obj) for no, obj in read_jsonl(fn)] for s, fn in files.items()}
    else:
        rows = [(f"{path}, line {no}", obj) for no, obj in read_jsonl(path)]
        n_val = int(len(rows) * val_fraction) if val_fraction > 0 else 0
        n_val = n_val if len(rows) - n_val >= 1 else 0
        out = {"train": rows[:len(rows) - n_val], "valid": rows[len(rows) - n_val:]}
    for rows in out.values():
        if rows:
            first = detect_format(rows[0][1], rows[0][0])
            for where, obj in rows[1:]:
                fmt = detect_format(obj, where)
                if fmt != first:
                    raise DataError(f"{where}: a {fmt} example in a file of {first} examples (as {rows[0][0]}); "
                                    f"one format per file")
    return out


def texts_of(splits: dict) -> list[str]:
    """The example texts (to train a SentencePiece tokenizer for a model trained from scratch)."""
    out = []
    for rows in splits.values():
        for _, obj in rows:
            for key in ("text", "prompt", "completion"):
                if isinstance(obj.get(key), str) and obj[key].strip():
                    out.append(obj[key])
            for m in obj.get("messages") or []:
                if isinstance(m, dict) and isinstance(m.get("content"), str):
                    out.append(m["content"])
    return out


WINDOW_MULTIPLE = 16                     # a default window is the longest example rounded up to this


def load_examples(path: str, tok, seq_len: int | None, vocab_size: int, mask_prompt: bool = False, seed: int = 0,
                  val_fraction: float = 0.1, splits: dict | None = None, max_seq_len: int | None = None
                  ) -> ExampleDataset:
    """An :class:`ExampleDataset` from JSON Lines data (``splits``: already read by :func:`read_splits`).
    ``seq_len`` None: the window fits the longest example (rounded up to :data:`WINDOW_MULTIPLE`, at most
    ``max_seq_len``): one example per window, so a longer window would only add padding to compute."""
    splits = read_splits(path, val_fraction) if splits is None else splits
    fmts = {detect_format(rows[0][1], rows[0][0]) for rows in splits.values() if rows}
    if mask_prompt and fmts == {"text"}:
        raise DataError(f"data {path}: --mask-prompt needs prompt/completion or messages examples; text examples "
                        f"have no prompt to mask")
    stats: dict = {}
    encoded = {s: [encode_example(obj, detect_format(obj, where), tok, mask_prompt, where, stats)
                   for where, obj in rows] for s, rows in splits.items()}
    pad = tok.eos_id if getattr(tok, "eos_id", None) is not None else 0
    if seq_len is None:
        longest = max(len(ids) for rows in encoded.values() for ids, _ in rows) - 1
        seq_len = -(-max(1, longest) // WINDOW_MULTIPLE) * WINDOW_MULTIPLE
        seq_len = seq_len if max_seq_len is None else min(seq_len, max_seq_len)
    ds = ExampleDataset(encoded, seq_len, vocab_size, seed, source=path, pad_id=pad)
    ds.unlocated_turns = stats.get("unlocated_turns", 0)
    return ds
