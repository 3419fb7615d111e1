#!/usr/bin/env python3
"""Fuzz harness for Hugging Face tokenizer folders (orion.models.tokenizers.HFTokenizer).

    PYTHONPATH=python:<build dir> python fuzz/fuzz_tokenizer_files.py --seconds 120 --seed 1
    PYTHONPATH=python:<build dir> python fuzz/fuzz_tokenizer_files.py --atheris -max_total_time=600

Each case is a folder made from a real fixture (tests/fixtures/models/*): tokenizer_config.json with keys
replaced by values of every JSON type (huge, empty, nested, negative, unicode digits), deleted or added
(added_tokens_decoder entries, extra/additional special tokens, flags, chat templates), sometimes a
special_tokens_map.json or chat_template.jinja beside it, and tokenizer.json edited the same way or
damaged byte-wise (truncated, garbage spliced in). The folder is loaded, and what loads is used:
encode/decode, the chat prompt, the end-of-turn probe. The run prints one JSON line of counts and exits
1 on any finding:

- crash: anything but a ModelFormatError (ChatTemplateError included), e.g. a bare TypeError or a Rust panic;
- hang: a case longer than --hang seconds;
- changed: a file of the folder differs after the case (loading must never write);
- accepted: a folder that loads although a key orion reads has the wrong type (the types transformers gives
  them, checked here independently of orion's reader).
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "models")

import harness  # noqa: E402 - fuzz/, this script's folder
from orion.errors import ModelFormatError
from orion.models.tokenizers import chat_prompt_ids, end_of_turn_ids, load_tokenizer

NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")
CONFIG_KEYS = NAMED + ("added_tokens_decoder", "extra_special_tokens", "additional_special_tokens",
                       "split_special_tokens", "clean_up_tokenization_spaces", "chat_template")


def _fixtures() -> list[str]:
    out = []
    for name in sorted(os.listdir(FIXTURES)) if os.path.isdir(FIXTURES) else []:
        d = os.path.join(FIXTURES, name)
        if os.path.isfile(os.path.join(d, "tokenizer.json")) and os.path.isfile(os.path.join(d, "tokenizer_config.json")):
            out.append(d)
    return out


FOLDERS = _fixtures()


def value(rng: random.Random, depth: int = 0):
    """A JSON value of any type, hostile ones often."""
    k = rng.randrange(14)
    if k == 0:
        return None
    if k == 1:
        return rng.choice([True, False])
    if k == 2:
        return rng.choice([0, 1, -1, 5, 2**31, 2**63, 10**30, 128000])
    if k == 3:
        return rng.choice([0.5, -0.0, 1e308, 3.0])
    if k in (4, 5, 6):
        return rng.choice(["", "a", "abc", "<s>", "</s>", "<|im_end|>", "false", "true", "0", "²", "١٢",
                           "x" * rng.choice([100, 2000, 300_000]), "\x00", "\ud800x", "{{ 1 }}", "🙂" * 3])
    if k in (7, 8) and depth < 3:
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if k in (9, 10) and depth < 3:
        return added_token(rng, depth + 1)
    if k == 11 and depth < 3:
        return {str(value(rng, 3)): value(rng, depth + 1) for _ in range(rng.randrange(3))}
    if k == 12:
        return [rng.choice(["a", "<x>", 1])] * rng.choice([1, 70_000])
    return "[" * 50 + "]" * 50


def added_token(rng: random.Random, depth: int = 0):
    t = {"content": rng.choice(["<s>", "<|x|>", "</s>", "<|im_start|>"]) if rng.random() < 0.7 else value(rng, depth)}
    for f in FLAGS:
        if rng.random() < 0.5:
            t[f] = rng.choice([True, False]) if rng.random() < 0.8 else value(rng, depth)
    if rng.random() < 0.1:
        del t["content"]
    return t


def mutate_config(rng: random.Random, cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    for _ in range(rng.randrange(1, 4)):
        key = rng.choice(CONFIG_KEYS + ("model_max_length", "tokenizer_class", "zzz"))
        op = rng.randrange(6)
        if op == 0:
            cfg.pop(key, None)
        elif op == 1 and key == "added_tokens_decoder":
            dec = cfg.setdefault("added_tokens_decoder", {})
            if isinstance(dec, dict):
                tid = rng.choice(["0", "1", "128000", "-1", "abc", "²", "9" * 30, str(rng.randrange(600))])
                dec[tid] = added_token(rng)
        elif op == 2 and key in ("extra_special_tokens", "additional_special_tokens"):
            cfg[key] = rng.choice([[value(rng) for _ in range(3)], {"image_token": value(rng)}, "abc",
                                   [added_token(rng)]])
        elif op == 3 and key == "chat_template":
            cfg[key] = rng.choice([[{"name": "default", "template": value(rng)}], value(rng),
                                   "{% for m in messages %}{{ m.content * 1000000000 }}{% endfor %}"])
        else:
            cfg[key] = value(rng)
    return cfg


def mutate_tokenizer_json(rng: random.Random, tj: dict) -> dict:
    tj = copy.deepcopy(tj)
    k = rng.randrange(4)
    if k == 0:
        tj["added_tokens"] = [dict(added_token(rng), id=value(rng)) for _ in range(rng.randrange(3))]
    elif k == 1:
        tj["model"][rng.choice(["vocab", "merges", "type", "unk_token", "byte_fallback"])] = value(rng)
    elif k == 2:
        tj[rng.choice(["normalizer", "pre_tokenizer", "post_processor", "decoder", "truncation", "padding"])] = value(rng)
    else:
        tj.pop(rng.choice(list(tj)), None)
    return tj


def damage(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    k = rng.randrange(3)
    if k == 0:
        return data[:i]
    if k == 1:
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16))) + data[i:]
    return data[:i] + data[i + rng.randrange(1, 64):]


def wrong_types(cfg) -> list[str]:
    """Keys orion reads whose type transformers would not give them (independent of orion's reader)."""
    if not isinstance(cfg, dict):
        return ["<not an object>"]
    bad = []

    def token_ok(t):
        if isinstance(t, str):
            return True
        return isinstance(t, dict) and isinstance(t.get("content"), str) and \
            all(isinstance(t[f], bool) for f in FLAGS if f in t)

    for k in NAMED:
        if cfg.get(k) is not None and not token_ok(cfg[k]):
            bad.append(k)
    for k in ("split_special_tokens", "clean_up_tokenization_spaces"):
        if cfg.get(k) is not None and not isinstance(cfg[k], bool):
            bad.append(k)
    for k in ("extra_special_tokens", "additional_special_tokens"):
        v = cfg.get(k)
        items = list(v.values()) if isinstance(v, dict) and k == "extra_special_tokens" else v
        if v is not None and (not isinstance(items, list) or not all(token_ok(t) for t in items)):
            bad.append(k)
    dec = cfg.get("added_tokens_decoder")
    if dec is not None and (not isinstance(dec, dict) or not all(
            k.isascii() and k.isdigit() and token_ok(t) and t.get("content") for k, t in dec.items())):
        bad.append("added_tokens_decoder")
    t = cfg.get("chat_template")
    if t is not None and not isinstance(t, str) and not (isinstance(t, list) and all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("template"), str) for e in t)):
        bad.append("chat_template")
    return bad


class Stats:
    def __init__(self):
        self.counts = {"cases": 0, "loaded": 0, "typed_errors": 0, "chat_rendered": 0, "crashes": 0, "hangs": 0,
                       "changed": 0, "accepted": 0, "slowest_s": 0.0}
        self.findings: list[str] = []

    def finding(self, kind: str, detail: str) -> None:
        self.counts[kind] += 1
        if len(self.findings) < 5:
            self.findings.append(f"{kind}: {detail[:600]}")


def _snapshot(d: str) -> dict:
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def one_case(rng: random.Random, stats: Stats, hang: float, work: str) -> None:
    src = rng.choice(FOLDERS)
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    files = {}
    k = rng.randrange(10)
    if k < 6:
        cfg = mutate_config(rng, cfg)
    elif k < 8:
        tj = mutate_tokenizer_json(rng, tj)
    files["tokenizer_config.json"] = json.dumps(cfg).encode("utf-8", "surrogatepass")
    files["tokenizer.json"] = json.dumps(tj).encode()
    if k == 8:
        name = rng.choice(["tokenizer_config.json", "tokenizer.json"])
        files[name] = damage(rng, files[name])
    if rng.random() < 0.15:
        smap = mutate_config(rng, {k: cfg[k] for k in NAMED if k in cfg}) if isinstance(cfg, dict) else [1]
        files["special_tokens_map.json"] = json.dumps(smap).encode("utf-8", "surrogatepass")
    if rng.random() < 0.1:
        files["chat_template.jinja"] = rng.choice([b"{{ messages[0].content }}", b"\xff\xfe", b"{% for %}",
                                                   b"{% for i in range(10**9) %}{{ i }}{% endfor %}"])
    d = os.path.join(work, f"case{stats.counts['cases']}")
    os.mkdir(d)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    before = _snapshot(d)
    stats.counts["cases"] += 1
    t0 = time.perf_counter()
    try:
        tok = load_tokenizer(d)
        stats.counts["loaded"] += 1
        bad = wrong_types(cfg) if k < 6 else []
        if bad:
            stats.finding("accepted", f"{bad} in {json.dumps(cfg)[:400]}")
        ids = tok.encode("Hello <s> <|im_end|> 🙂")
        tok.decode(ids)
        tok.decode(ids, skip_special_tokens=True)
        try:
            chat_prompt_ids(tok, [{"role": "user", "content": "Hi"}])
            stats.counts["chat_rendered"] += 1
        except ModelFormatError:
            pass
        end_of_turn_ids(tok)
    except ModelFormatError:
        stats.counts["typed_errors"] += 1
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        stats.finding("crashes", f"{type(e).__name__}: {e} (case {k}, config {json.dumps(cfg)[:300]})")
    elapsed = time.perf_counter() - t0
    stats.counts["slowest_s"] = max(stats.counts["slowest_s"], round(elapsed, 3))
    if elapsed > hang:
        stats.finding("hangs", f"{elapsed:.2f} s (case {k})")
    if _snapshot(d) != before:
        stats.finding("changed", f"files of {d} changed")
    shutil.rmtree(d)


def run(seconds: float, seed: int, hang: float, max_cases: int | None = None) -> Stats:
    stats = Stats()
    with tempfile.TemporaryDirectory(prefix="fuzz_tok_") as work:
        return harness.loop(lambda rng: one_case(rng, stats, hang, work), stats, seconds, seed, hang, max_cases)


def main() -> int:
    args, rest = harness.parse(__doc__.splitlines()[0])
    if not FOLDERS:
        print("no fixtures with tokenizer.json + tokenizer_config.json under tests/fixtures/models", file=sys.stderr)
        return 2
    if args.atheris:
        stats, work = Stats(), tempfile.mkdtemp(prefix="fuzz_tok_")
        return harness.under_atheris(lambda rng: one_case(rng, stats, args.hang, work), stats, rest)
    return harness.report(run(args.seconds, args.seed, args.hang, args.max_cases),
                          ("crashes", "hangs", "changed", "accepted"))


if __name__ == "__main__":
    sys.exit(main())
