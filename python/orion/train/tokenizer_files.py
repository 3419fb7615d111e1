"""The tokenizer files a trained model carries (checkpoint folders and exports), in the form
:func:`orion.models.tokenizers.find_tokenizer` and transformers' ``AutoTokenizer`` pick up.

- a SentencePiece model (trained on the fly or given with ``--tokenizer x.model``): ``tokenizer.model``, the
  same tokenizer as ``tokenizer.json`` and a ``tokenizer_config.json`` with its special tokens;
- a tokenizer that came with ``--init`` (HF folder, llama2.c file): the files it was read from.
"""

from __future__ import annotations

import json
import os

from ..fileio import write_bytes_atomic

# what an HF folder's tokenizer consists of (copied from an --init folder as they are)
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                      "generation_config.json")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def sentencepiece_files(model_bytes: bytes) -> dict[str, bytes]:
    """``tokenizer.model``, the same tokenizer as a ``tokenizer.json`` (transformers and ``tokenizers`` load
    it as it is; converting the .model would need protobuf) and a ``tokenizer_config.json`` naming the
    class that takes tokenizer.json as written (``PreTrainedTokenizerFast``, transformers 4 and 5).
    Documents in the training stream start with BOS, so the tokenizer adds it (post-processor,
    add_bos_token), as for a Hugging Face user's default. A model tokenizer.json cannot express (Unigram,
    see :func:`~orion.models.tokenizers.spm_to_json.spm_tokenizer_json`) keeps the LlamaTokenizer config."""
    import sentencepiece as spm  # start-up: sentencepiece (~8 ms) only for a .model tokenizer
    from ..models.tokenizers.spm_to_json import spm_tokenizer_json  # start-up: orion.models.tokenizers (~14 ms)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model_bytes)

    def piece(i: int):
        return sp.id_to_piece(i) if 0 <= i < sp.vocab_size() else None

    tj = spm_tokenizer_json(model_bytes, add_bos=True)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast" if tj is not None else "LlamaTokenizer",
           "bos_token": piece(sp.bos_id()), "eos_token": piece(sp.eos_id()),
           "unk_token": piece(sp.unk_id()), "pad_token": None, "add_bos_token": True, "add_eos_token": False,
           "legacy": False, "clean_up_tokenization_spaces": False, "sp_model_kwargs": {}}
    files = {"tokenizer.model": bytes(model_bytes)}
    if tj is not None:
        files["tokenizer.json"] = tj.encode()
    files["tokenizer_config.json"] = (json.dumps(cfg, indent=2) + "\n").encode()
    return files


def tokenizer_files(tokenizer, source: str | None = None) -> dict[str, bytes]:
    """File name -> bytes of ``tokenizer`` (the run's tokenizer object): a SentencePiece model as
    :func:`sentencepiece_files`; a tokenizer read from a Hugging Face folder (``source``, the --init
    folder, or the folder of its tokenizer.json) as that folder's tokenizer files; a llama2.c
    tokenizer.bin as it is. {} when there is nothing to carry (pretokenized data without a tokenizer)."""
    mb = getattr(tokenizer, "model_bytes", None)
    if mb is not None:
        return sentencepiece_files(mb)
    path = getattr(tokenizer, "path", None)
    path = path if isinstance(path, str) and os.path.isfile(path) else None
    folders = [source] if source and os.path.isdir(source) else []
    if path and os.path.basename(path) == "tokenizer.json":
        folders.append(os.path.dirname(os.path.abspath(path)))
    for d in folders:
        found = {n: _read(os.path.join(d, n)) for n in HF_TOKENIZER_FILES if os.path.isfile(os.path.join(d, n))}
        if found:
            return found
    if path and path.endswith(".model"):
        return sentencepiece_files(_read(path))
    if path:
        return {"tokenizer.bin" if path.endswith(".bin") else os.path.basename(path): _read(path)}
    return {}


def write_beside_bin(bin_path: str, files: dict[str, bytes]) -> str | None:
    """Writes the tokenizer of ``files`` (:func:`tokenizer_files`) beside a llama2.c ``.bin`` export as
    ``<stem>.tokenizer.model`` (SentencePiece) or ``<stem>.tokenizer.bin`` (llama2.c), the names ``orion
    generate`` looks for beside a ``.bin``; returns the path, or None when the tokenizer is only a Hugging
    Face tokenizer.json (which needs its own folder: ``--export-hf``)."""
    stem = os.path.splitext(os.path.abspath(bin_path))[0]
    for name in ("tokenizer.model", "tokenizer.bin"):
        if name in files:
            out = f"{stem}.{name}"
            write_bytes_atomic(out, files[name])
            return out
    return None
