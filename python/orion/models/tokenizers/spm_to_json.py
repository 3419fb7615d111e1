"""A SentencePiece BPE ``tokenizer.model`` as a Hugging Face ``tokenizer.json``, so transformers and the
``tokenizers`` library load it directly: transformers 5 otherwise converts the ``.model`` itself, which
needs ``protobuf`` (without it it falls back to tiktoken and fails).

Built as transformers 5 builds it from the model's own settings (``SpmConverter.build_tokenizer_from_spm_proto``,
legacy=False), so it encodes like ``SentencePieceProcessor.encode``: BPE with merges ranked by piece score,
the model's byte fallback, extra-whitespace removal, the dummy prefix (Metaspace, first chunk only), the
precompiled normalization rules; control and unknown pieces as special added tokens; a post-processor adding
BOS. Where it differs from transformers' own conversion it follows SentencePiece: the dummy prefix after
leading spaces, a literal "▁", decoding (control pieces to nothing, the unknown one to " ⁇ "). No protobuf and no transformers: the few ``ModelProto`` fields
needed are read by :func:`_fields`.
"""

from __future__ import annotations

import base64
import json
import re

from ...errors import ModelFormatError

__all__ = ["spm_tokenizer_json", "spm_settings"]

# SentencePiece types (sentencepiece_model.proto)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
BPE_MODEL = 2
# field numbers: ModelProto.{pieces=1, trainer_spec=2, normalizer_spec=3}; SentencePiece.{piece=1, type=3};
# TrainerSpec.{model_type=3, treat_whitespace_as_suffix=24, byte_fallback=35, unk_surface=44, unk_piece=45};
# NormalizerSpec.{precompiled_charsmap=2, add_dummy_prefix=3, remove_extra_whitespaces=4, escape_whitespaces=5}


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def _fields(b: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes, fixed
    32/64-bit as raw bytes."""
    out, i = [], 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
            if i > len(b):
                raise ValueError("truncated field")
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((num, v))
    return out


def spm_settings(model_bytes: bytes) -> dict:
    """The settings of a serialized SentencePiece ModelProto that decide how it encodes (proto2 defaults
    for absent fields), and the type of each piece."""
    s = {"model_type": 1, "treat_whitespace_as_suffix": False, "byte_fallback": False, "unk_piece": "<unk>",
         "unk_surface": " \u2047 ",
         "precompiled_charsmap": b"", "add_dummy_prefix": True, "remove_extra_whitespaces": True,
         "escape_whitespaces": True, "types": []}
    try:
        for num, v in _fields(model_bytes):
            if num == 1:
                s["types"].append(dict(_fields(v)).get(3, NORMAL))
            elif num == 2:
                t = dict(_fields(v))
                s["model_type"] = t.get(3, 1)
                s["treat_whitespace_as_suffix"] = bool(t.get(24, 0))
                s["byte_fallback"] = bool(t.get(35, 0))
                s["unk_piece"] = t[45].decode() if 45 in t else "<unk>"
                if 44 in t:
                    s["unk_surface"] = t[44].decode()
            elif num == 3:
                n = dict(_fields(v))
                s["precompiled_charsmap"] = n.get(2, b"")
                for k, f in (("add_dummy_prefix", 3), ("remove_extra_whitespaces", 4), ("escape_whitespaces", 5)):
                    s[k] = bool(n.get(f, 1))
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise ModelFormatError(f"not a SentencePiece model ({e})") from None
    return s


def spm_tokenizer_json(model_bytes: bytes, add_bos: bool = True) -> str | None:
    """``tokenizer.json`` text for a SentencePiece BPE model (``add_bos``: the post-processor puts BOS first);
    None for what it cannot express exactly: Unigram/word/char models, whitespace as suffix or unescaped."""
    import sentencepiece as spm  # start-up: sentencepiece (~8 ms) only for a .model tokenizer
    s = spm_settings(model_bytes)
    if s["model_type"] != BPE_MODEL or s["treat_whitespace_as_suffix"] or not s["escape_whitespaces"]:
        return None
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(bytes(model_bytes))
    n = sp.get_piece_size()
    if len(s["types"]) != n:
        raise ModelFormatError(f"SentencePiece model: {len(s['types'])} pieces in the proto, {n} loaded")
    pieces = [sp.id_to_piece(i) for i in range(n)]
    vocab = {p: i for i, p in enumerate(pieces)}
    # merges: every split of a normal piece into two normal pieces, highest score first (SentencePiece merges
    # the adjacent pair whose union scores best), ties by id
    normal = {p: (sp.get_score(i), i) for i, p in enumerate(pieces) if s["types"][i] == NORMAL}
    ranked = sorted((-sc, i, p[:k], p[k:]) for p, (sc, i) in normal.items() for k in range(1, len(p))
                    if p[:k] in normal and p[k:] in normal)
    user_defined = [p for i, p in enumerate(pieces) if s["types"][i] == USER_DEFINED]
    model = {"type": "BPE", "dropout": None, "unk_token": s["unk_piece"], "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": s["byte_fallback"],
             "ignore_merges": bool(user_defined), "vocab": vocab, "merges": [[a, b] for _, _, a, b in ranked]}

    norms = []
    if s["precompiled_charsmap"]:
        norms.append({"type": "Precompiled",
                      "precompiled_charsmap": base64.b64encode(s["precompiled_charsmap"]).decode()})
    # SentencePiece prefixes "▁" to every non-empty text, even one that starts with "▁"; Metaspace adds it
    # only to a text that does not, and only while the normalized text still starts at offset 0
    double = {"type": "Replace", "pattern": {"Regex": r"\A▁"}, "content": "▁▁"}
    if s["remove_extra_whitespaces"]:       # spaces only: SentencePiece leaves newlines and tabs alone
        # with a dummy prefix, leading spaces become one space, which escaped is the prefix
        lead = "" if s["add_dummy_prefix"] else r"\A +|"
        # trailing: after escaping for SentencePiece, so a literal "▁" goes too
        norms += [{"type": "Replace", "pattern": {"Regex": lead + r"[ ▁]+\z"}, "content": ""},
                  {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
        if s["add_dummy_prefix"]:
            norms.append(double)            # before escaping: a literal "▁" only
    norms.append({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
    if s["add_dummy_prefix"] and not s["remove_extra_whitespaces"]:
        norms.append(double)                # every leading "▁", escaped spaces included
    pre = []
    if s["add_dummy_prefix"]:
        pre.append({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False})
    if user_defined:                        # emitted whole, never merged
        pat = "|".join(re.escape(p) for p in sorted(user_defined, key=len, reverse=True))
        pre.append({"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False})
    # decoding as SentencePiece: control pieces as "", the unknown one as its surface (" ⁇ "; a piece that is
    # part of another stays as it is), bytes, then the first pieces without one leading "▁" each while the text
    # is still empty: with extra whitespace removed every leading "▁" goes (the text had none), else one
    dec = []
    for i, p in enumerate(pieces):
        t = s["types"][i]
        if t in (CONTROL, UNKNOWN) and not any(p in q for j, q in enumerate(pieces) if j != i):
            surface = "" if t == CONTROL else s["unk_surface"]
            dec.append({"type": "Replace", "pattern": {"String": p}, "content": surface})
    if s["byte_fallback"]:
        dec.append({"type": "ByteFallback"})
    dec.append({"type": "Fuse"})
    if s["remove_extra_whitespaces"] or s["add_dummy_prefix"]:
        dec.append({"type": "Strip", "content": "▁", "start": 1 << 30 if s["remove_extra_whitespaces"] else 1,
                    "stop": 0})
    dec.append({"type": "Replace", "pattern": {"String": "▁"}, "content": " "})

    bos = sp.bos_id()
    post = None
    if add_bos and 0 <= bos < n:
        b = pieces[bos]
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": b, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {b: {"id": b, "ids": [bos], "tokens": [b]}}}
    added = [{"id": i, "content": pieces[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in range(n) if s["types"][i] in (UNKNOWN, CONTROL)]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": {"type": "Sequence", "normalizers": norms},
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre} if pre else None,
          "post_processor": post, "decoder": {"type": "Sequence", "decoders": dec}, "model": model}
    return json.dumps(tj, ensure_ascii=False, indent=2) + "\n"
