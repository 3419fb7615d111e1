#!/usr/bin/env python3
"""Generate the tiny per-family reference checkpoints in tests/fixtures/models/.

Run from the repository root (needs torch, transformers 5.x and tokenizers; no network):

    . /work/venv/bin/activate
    python scripts/make_model_fixtures.py              # every family
    python scripts/make_model_fixtures.py qwen3 phi3   # only these folders

Everything is seeded: re-running rewrites byte-identical files (same library versions).
Each folder gets config.json + model.safetensors (save_pretrained), a tokenizer trained here on
python/orion/train/corpus/stories.txt (tokenizer.json, tokenizer_config.json with a chat_template),
reference.npz (ids, fp32 logits at every position, greedy ids, bf16 logits), tokenizer_cases.json and
chat_cases.json. Tests read these with numpy/json only; torch is needed by this script alone.
See tests/fixtures/models/README.md for what each fixture exercises.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "python/orion/train/corpus/stories.txt"
OUT = ROOT / "tests/fixtures/models"

HIDDEN = 32          # hidden 64 would not fit the 400 KB budget per folder in fp32 (see README)
INTERMEDIATE = 64
INIT_RANGE = 0.3     # large enough for peaky logits and varied greedy ids, far inside fp16 range
HEAD_SIGMA = 0.5     # spread of output-head row norms (log-normal): wider argmax margins
GEMMA_EMBED_SCALE = 0.2
N_GREEDY = 16

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

PROMPT = ("Once upon a time, a little fox named Tom found a shiny red ball near the old tree. "
          "He wanted to share it with his friend Sam, so he ran")

TEXTS = [
    "", "Hello", "Hello world", " Hello world", "Hello world ", "  two  spaces  here  ",
    "a    b", "line one\nline two", "\n\nleading newlines", "trailing newline\n", "tab\tseparated\tvalues",
    "crlf\r\nline", "1234567890", "3.14159 and 2,718", "Numbers 12 345 6789!",
    "Punctuation: (a), [b], {c}; 'quoted' \"double\" ... ?!", "don't won't I'm we'll they've",
    "café naïve résumé", "日本語のテキスト", "中文测试", "emoji 🦊🎈 end", "Ünïcödé ß ø å",
    "The <|im_end|> token appears literally", "<s>[INST] literal markers [/INST]</s>",
    "<start_of_turn>user\nhi<end_of_turn>", "Tom said, \"Look what I found!\" and smiled.",
]

CHATS = [
    ([{"role": "system", "content": "You are a kind storyteller."},
      {"role": "user", "content": "Tell me about a fox."}], True),
    ([{"role": "user", "content": "Hi there!"},
      {"role": "assistant", "content": "Hello! How can I help?"},
      {"role": "user", "content": "Write one line about a ball."}], True),
    ([{"role": "system", "content": "Answer briefly."},
      {"role": "user", "content": "What is red?"},
      {"role": "assistant", "content": "A ball."}], False),
]

# --- chat templates, short but in each family's real format -------------------------------------
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
CHATML_DEFAULT_SYSTEM = (  # Qwen2.5 / SmolLM2 style: a default system prompt when none is given
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- set content = message['content'] %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
MISTRAL_TEMPLATE = (  # v0.3 style: the system prompt is prepended to the last user message
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if loop.last and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
    "{%- else %}{{- ' ' + message['content'] + eos_token }}{%- endif %}"
    "{%- endfor %}"
)
GEMMA3_TEMPLATE = (  # system text goes into the first user turn; the assistant role is 'model'
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set first_user_prefix = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '')"
    " + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)
PHI3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] in ['system', 'user', 'assistant'] %}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- else %}{{- eos_token }}{%- endif %}"
)


# --- tokenizers ---------------------------------------------------------------------------------
def _corpus_lines() -> list[str]:
    return [ln for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]


def train_byte_level() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2/Llama-3 style byte-level BPE: 256 byte symbols + merges, pre-split by Llama 3's regex."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=384, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_corpus_lines(), trainer)
    return _vocab_and_merges(tok)


def train_sentencepiece_style() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Llama-2/Mistral/Gemma style BPE over '▁'-marked words; bytes are covered by <0xNN> fallback."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=150, limit_alphabet=80, show_progress=False)
    tok.train_from_iterator(_corpus_lines(), trainer)
    return _vocab_and_merges(tok)


def _vocab_and_merges(tok: Tokenizer) -> tuple[dict[str, int], list[tuple[str, str]]]:
    state = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    return dict(sorted(state["vocab"].items(), key=lambda kv: kv[1])), merges


def _ordered_vocab(front: list[str], body: list[str], back: list[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for t in front + body + back:
        if t not in vocab:
            vocab[t] = len(vocab)
    return vocab


def build_tokenizer(style: str, base, specials_front: list[AddedToken], specials_back: list[AddedToken],
                    family: str) -> Tokenizer:
    vocab, merges = base
    body = list(vocab)
    if style == "sp":  # byte-fallback pieces sit right after the control tokens, as in Llama-2/Gemma
        body = [f"<0x{i:02X}>" for i in range(256)] + body
    front = [t.content for t in specials_front]
    back = [t.content for t in specials_back]
    full = _ordered_vocab(front, body, back)
    if style == "sp":
        tok = Tokenizer(models.BPE(vocab=full, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    else:
        tok = Tokenizer(models.BPE(vocab=full, merges=merges, ignore_merges=(family == "llama3")))
    tok.add_special_tokens([t for t in specials_front + specials_back if t.special])
    tok.add_tokens([t for t in specials_front + specials_back if not t.special])

    if style == "byte":
        if family in ("qwen2", "qwen3"):
            tok.normalizer = normalizers.NFC()
            regex = QWEN_REGEX
        else:
            regex = LLAMA3_REGEX
        if family == "smollm2":  # GPT-2 regex with individual digits, as SmolLM2's tokenizer.json
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        else:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        if family == "llama3":
            tok.post_processor = processors.Sequence([
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                    special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])])
        else:
            tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        if family == "gemma3":  # Gemma: spaces become '▁', no dummy prefix, no pre-splitting
            tok.normalizer = normalizers.Replace(" ", "▁")
            tok.pre_tokenizer = None
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
            bos = "<bos>"
        else:  # Mistral/Llama-2: a '▁' prepended to the first word only
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(" ", 1, 0)])
            bos = "<s>"
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1", special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def _sp(content: str, **kw) -> AddedToken:
    return AddedToken(content, special=kw.pop("special", True), normalized=False, **kw)


def family_tokenizer(name: str, bases) -> tuple[PreTrainedTokenizerFast, dict]:
    """Returns the wrapped tokenizer and the token ids the model config needs."""
    if name in ("llama3", "llama_linear", "llama_legacy_keys"):
        back = [_sp("<|begin_of_text|>"), _sp("<|end_of_text|>"), _sp("<|reserved_special_token_0|>"),
                _sp("<|reserved_special_token_1|>"), _sp("<|start_header_id|>"), _sp("<|end_header_id|>"),
                _sp("<|eot_id|>")]
        tok = build_tokenizer("byte", bases["byte"], [], back, "llama3")
        kw = dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", chat_template=LLAMA3_TEMPLATE)
    elif name == "smollm2":
        front = [_sp("<|endoftext|>"), _sp("<|im_start|>"), _sp("<|im_end|>")]
        tok = build_tokenizer("byte", bases["byte"], front, [], "smollm2")
        tmpl = CHATML_DEFAULT_SYSTEM.replace(
            "default_system", "'You are a helpful AI assistant named SmolLM, trained by Hugging Face'")
        kw = dict(bos_token="<|im_start|>", eos_token="<|im_end|>", unk_token="<|endoftext|>",
                  pad_token="<|im_end|>", chat_template=tmpl,
                  additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    elif name in ("qwen2", "qwen3"):
        back = [_sp("<|endoftext|>"), _sp("<|im_start|>"), _sp("<|im_end|>")]
        if name == "qwen3":  # Qwen3 registers <think> tags as added but NOT special tokens
            back += [_sp("<think>", special=False), _sp("</think>", special=False)]
            tmpl = QWEN3_TEMPLATE
        else:
            tmpl = CHATML_DEFAULT_SYSTEM.replace(
                "default_system", "'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.'")
        tok = build_tokenizer("byte", bases["byte"], [], back, name)
        kw = dict(eos_token="<|im_end|>" if name == "qwen3" else "<|endoftext|>", pad_token="<|endoftext|>",
                  chat_template=tmpl, additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    elif name == "phi3":  # Phi-3's chat markers strip the whitespace to their right
        back = [_sp("<|endoftext|>"), _sp("<|assistant|>", rstrip=True), _sp("<|system|>", rstrip=True),
                _sp("<|end|>", rstrip=True), _sp("<|user|>", rstrip=True)]
        tok = build_tokenizer("byte", bases["byte"], [], back, "phi3")
        kw = dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                  chat_template=PHI3_TEMPLATE)
    elif name == "mistral":
        front = [_sp("<unk>"), _sp("<s>"), _sp("</s>"), _sp("[INST]"), _sp("[/INST]")]
        tok = build_tokenizer("sp", bases["sp"], front, [], "mistral")
        kw = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", chat_template=MISTRAL_TEMPLATE)
    elif name in ("gemma3", "gemma3_legacy_keys"):
        front = [_sp("<pad>"), _sp("<eos>"), _sp("<bos>"), _sp("<unk>"), _sp("<start_of_turn>"),
                 _sp("<end_of_turn>")]
        tok = build_tokenizer("sp", bases["sp"], front, [], "gemma3")
        kw = dict(bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>",
                  chat_template=GEMMA3_TEMPLATE, additional_special_tokens=["<start_of_turn>", "<end_of_turn>"])
    else:
        raise KeyError(name)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, **kw)
    ids = {k: wrapped.convert_tokens_to_ids(v) for k, v in kw.items() if k.endswith("_token")}
    return wrapped, ids


# --- models -------------------------------------------------------------------------------------
def _common(ntok: int, ids: dict, layers: int = 2) -> dict:
    return dict(vocab_size=ntok, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=layers,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                initializer_range=INIT_RANGE, rms_norm_eps=1e-5, bos_token_id=ids.get("bos_token"),
                eos_token_id=ids.get("eos_token"), pad_token_id=ids.get("pad_token"))


def make_config(name: str, ntok: int, ids: dict):
    from transformers import (Gemma3TextConfig, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config,
                              Qwen3Config)
    c = _common(ntok, ids)
    if name == "llama3":
        return LlamaConfig(**c, tie_word_embeddings=False, rope_parameters=dict(
            rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=256))  # head_dim 8: one frequency kept, one smoothed, two divided
    if name == "smollm2":
        return LlamaConfig(**c, tie_word_embeddings=True,
                           rope_parameters=dict(rope_type="default", rope_theta=100000.0))
    if name == "llama_linear":
        return LlamaConfig(**c, tie_word_embeddings=False,
                           rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0))
    if name == "llama_legacy_keys":
        return LlamaConfig(**c, tie_word_embeddings=False, rope_parameters=dict(
            rope_type="llama3", rope_theta=250000.0, factor=4.0, low_freq_factor=1.0, high_freq_factor=2.0,
            original_max_position_embeddings=200))
    if name == "qwen2":
        c["vocab_size"] = (ntok // 16 + 1) * 16  # padded above the tokenizer, like real Qwen heads
        return Qwen2Config(**c, tie_word_embeddings=True, rope_parameters=dict(rope_type="default",
                                                                              rope_theta=1000000.0))
    if name == "qwen3":
        return Qwen3Config(**c, head_dim=16, tie_word_embeddings=True,
                           rope_parameters=dict(rope_type="default", rope_theta=1000000.0))
    if name == "mistral":
        return MistralConfig(**c, sliding_window=8, tie_word_embeddings=False,
                             rope_parameters=dict(rope_type="default", rope_theta=1000000.0))
    if name == "gemma3":
        c.update(num_hidden_layers=4, num_key_value_heads=1, rms_norm_eps=1e-6)
        return Gemma3TextConfig(
            # the cap sits near max |logit| (about 2.5 here) so that it bends the logits measurably
            **c, head_dim=16, query_pre_attn_scalar=24, sliding_window=8, final_logit_softcapping=4.0,
            attn_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "default", "rope_theta": 200000.0}})
    if name == "gemma3_legacy_keys":  # as real Gemma 3 4B+ checkpoints: linear scaling on global layers only
        c.update(num_hidden_layers=4, num_key_value_heads=1, rms_norm_eps=1e-6)
        return Gemma3TextConfig(
            **c, head_dim=16, query_pre_attn_scalar=24, sliding_window=8, final_logit_softcapping=None,
            attn_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}})
    if name == "phi3":
        return Phi3Config(**c, tie_word_embeddings=False, hidden_act="silu", original_max_position_embeddings=256,
                          rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=1.0))
    raise KeyError(name)


def randomize_extras(model, name: str, ntok: int, gen: torch.Generator) -> None:
    """Norm weights random around their neutral value (1, or 0 for Gemma's (1+w)); biases random."""
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters()):
            if "norm" in pname:
                noise = 0.2 * torch.randn(p.shape, generator=gen)
                p.copy_(noise if name.startswith("gemma3") else 1.0 + noise)
            elif pname.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        # rows of the output head with log-normal norms: a few tokens dominate, so argmax margins are wide
        head = model.get_output_embeddings().weight
        head.mul_(torch.exp(HEAD_SIGMA * torch.randn(head.shape[0], 1, generator=gen)))
        if name.startswith("gemma3"):
            # Gemma multiplies embeddings by sqrt(hidden): at full size the tied token dominates the residual
            # stream and greedy decoding locks onto one repeated token
            head.mul_(GEMMA_EMBED_SCALE)
        # rows past the tokenizer (Qwen's padded head) stay small, as untrained rows: never the argmax
        head[ntok:] *= 0.05


def to_legacy_config(path: Path, eos_extra: int | None = None) -> None:
    """Rewrite config.json in the pre-transformers-5 form: rope_theta and rope_scaling at top level.

    Gemma 3 (as its hub checkpoints): rope_theta/rope_scaling for global layers, rope_local_base_freq for
    sliding ones, sliding_window_pattern instead of layer_types, torch_dtype, eos_token_id as a list."""
    cfg = json.loads(path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    if "full_attention" in rope:
        local, rope = rope["sliding_attention"], dict(rope["full_attention"])
        assert local["rope_type"] == "default", local
        cfg["rope_local_base_freq"] = local["rope_theta"]
        types = cfg.pop("layer_types")
        cfg.pop("_sliding_window_pattern", None)
        cfg["sliding_window_pattern"] = types.index("full_attention") + 1
        cfg["torch_dtype"] = cfg.pop("dtype")
        cfg["eos_token_id"] = [cfg["eos_token_id"], eos_extra]
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# --- references ---------------------------------------------------------------------------------
def load(folder: Path, dtype):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()


def greedy_ids(model, ids: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
    """New token ids of greedy generate() (KV-cache path) and the raw logits it chose each one from."""
    gc = model.generation_config
    gc.eos_token_id = None  # no early stop: always N_GREEDY new tokens
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GREEDY, do_sample=False,
                         eos_token_id=None, pad_token_id=gc.pad_token_id if gc.pad_token_id is not None else 0,
                         generation_config=gc, output_logits=True, return_dict_in_generate=True)
    step_logits = torch.cat(out.logits).float().numpy()
    return out.sequences[0, ids.shape[1]:], step_logits


def prompt_for(tok) -> str:
    """The shortest word prefix of PROMPT that encodes to at least 42 tokens (tokenizers differ)."""
    words = PROMPT.split(" ")
    for k in range(1, len(words) + 1):
        text = " ".join(words[:k])
        if len(tok(text)["input_ids"]) >= 42:
            return text
    raise AssertionError("PROMPT too short for this tokenizer")


def write_reference(folder: Path, tok, name: str) -> dict:
    prompt = prompt_for(tok)
    ids = tok(prompt)["input_ids"]
    assert 40 <= len(ids) <= 48, (name, len(ids))
    t = torch.tensor([ids])
    m32 = load(folder, torch.float32)
    with torch.no_grad():
        logits = m32(t).logits[0].float().numpy()
        greedy, greedy_logits = greedy_ids(m32, t)
        # greedy must be the argmax of a full (cache-free) forward at every step
        full = m32(torch.cat([t[0], greedy])[None]).logits[0, len(ids) - 1:-1].argmax(-1)
        assert torch.equal(full, greedy), (name, full, greedy)
        m16 = load(folder, torch.bfloat16)
        logits_bf16 = m16(t).logits[0].float().numpy()
    np.savez_compressed(folder / "reference.npz", prompt=np.array(prompt), ids=np.asarray(ids, np.int64),
                        logits=logits.astype(np.float32), greedy=greedy.numpy().astype(np.int64),
                        greedy_logits=greedy_logits.astype(np.float32), logits_bf16=logits_bf16.astype(np.float32))
    top2 = np.sort(logits, -1)[:, -2:]
    margin = (top2[:, 1] - top2[:, 0]) / np.abs(logits).max(-1)
    rel16 = np.abs(logits_bf16 - logits).max() / np.abs(logits).max()
    agree = (logits_bf16.argmax(-1) == logits.argmax(-1)).mean()
    return dict(distinct_greedy=len(set(greedy.tolist())), ablations=ablation_errors(folder, name, ids, logits),
                n=len(ids), maxabs=float(np.abs(logits).max()), peaky=float((margin > 0.05).mean()),
                bf16_rel=float(rel16), bf16_top1=float(agree))


# What a loader that ignored a feature would get: each entry edits the loaded config; the fixture is only
# useful if the logits then move by much more than the tests' 0.05 tolerance (checked below).
def _rope(theta, **kw):
    return dict(rope_type="default", rope_theta=theta, **kw)


ABLATIONS = {
    "llama3": {"no llama3 scaling": lambda c: setattr(c, "rope_parameters", _rope(500000.0)),
               "theta 10000": lambda c: c.rope_parameters.update(rope_theta=10000.0)},
    "smollm2": {"theta 10000": lambda c: c.rope_parameters.update(rope_theta=10000.0)},
    "llama_linear": {"no linear scaling": lambda c: setattr(c, "rope_parameters", _rope(10000.0))},
    "llama_legacy_keys": {"no scaling, theta 10000": lambda c: setattr(c, "rope_parameters", _rope(10000.0))},
    "qwen2": {"theta 10000": lambda c: c.rope_parameters.update(rope_theta=10000.0)},
    "qwen3": {"theta 10000": lambda c: c.rope_parameters.update(rope_theta=10000.0)},
    "mistral": {"no sliding window": lambda c: setattr(c, "sliding_window", None)},
    "gemma3": {"no sliding window": lambda c: setattr(c, "sliding_window", 4096),
               "no softcapping": lambda c: setattr(c, "final_logit_softcapping", None),
               "query_pre_attn_scalar = head_dim": lambda c: setattr(c, "query_pre_attn_scalar", c.head_dim),
               "local rope base = global": lambda c: c.rope_parameters["sliding_attention"].update(
                   rope_theta=c.rope_parameters["full_attention"]["rope_theta"])},
    "gemma3_legacy_keys": {
        "no linear scaling on global layers": lambda c: c.rope_parameters.update(full_attention=_rope(1000000.0)),
        "local rope base = global": lambda c: c.rope_parameters["sliding_attention"].update(rope_theta=1000000.0),
        "all layers global": lambda c: setattr(c, "layer_types", ["full_attention"] * 4)},
    "phi3": {"theta 100000": lambda c: c.rope_parameters.update(rope_theta=100000.0)},
}


def ablation_errors(folder: Path, name: str, ids: list[int], logits: np.ndarray) -> dict:
    from transformers import AutoConfig
    out = {}
    for what, edit in ABLATIONS.get(name, {}).items():
        cfg = AutoConfig.from_pretrained(folder)
        edit(cfg)
        model = AutoModelForCausalLM.from_pretrained(folder, config=cfg, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        with torch.no_grad():
            other = model(torch.tensor([ids])).logits[0].numpy()
        out[what] = round(float(np.abs(other - logits).max() / np.abs(logits).max()), 3)
        assert out[what] > 0.1, (name, what, out[what])
    return out


def write_cases(folder: Path) -> None:
    tok = AutoTokenizer.from_pretrained(folder)
    cases = []
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        cases.append(dict(text=text, ids=ids, ids_no_special=tok(text, add_special_tokens=False)["input_ids"],
                          decoded=tok.decode(ids, skip_special_tokens=False)))
    _dump(folder / "tokenizer_cases.json", cases)
    chats = []
    for messages, gen in CHATS:
        rendered = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
        ids = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True, return_dict=False)
        chats.append(dict(messages=messages, add_generation_prompt=gen, rendered=rendered, ids=list(ids)))
    _dump(folder / "chat_cases.json", chats)


def _dump(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


NAMES = ["llama3", "smollm2", "llama_linear", "llama_legacy_keys", "qwen2", "qwen3", "mistral", "gemma3", "phi3",
         "gemma3_legacy_keys"]  # order fixes each fixture's seed: append new ones


MIN_DISTINCT_GREEDY = 4  # a greedy run stuck on one token would not show a broken KV cache
SEED_TRIES = 10


def make(name: str, bases, seed: int) -> dict:
    """Build the fixture; the first of seed, seed+100, ... whose greedy run is varied enough is kept."""
    for k in range(SEED_TRIES):
        stats = make_once(name, bases, seed + 100 * k)
        if stats["distinct_greedy"] >= MIN_DISTINCT_GREEDY:
            return stats
    raise AssertionError(f"{name}: greedy ids stay repetitive for {SEED_TRIES} seeds: {stats}")


def make_once(name: str, bases, seed: int) -> dict:
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    tok, ids = family_tokenizer(name, bases)
    tok.save_pretrained(folder, save_jinja_files=False)
    config = make_config(name, len(tok), ids)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    randomize_extras(model, name, len(tok), torch.Generator().manual_seed(seed + 1))
    if name.startswith("gemma3"):  # stored in bf16 like real Gemma checkpoints; references upcast these values
        model = model.to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    if name.endswith("_legacy_keys"):
        before = load(folder, torch.float32)
        to_legacy_config(folder / "config.json", tok.convert_tokens_to_ids("<end_of_turn>"))
        after = load(folder, torch.float32)
        assert after.config.rope_parameters == before.config.rope_parameters, after.config.rope_parameters
        assert getattr(after.config, "layer_types", None) == getattr(before.config, "layer_types", None)
        probe = torch.arange(2, 50)[None]  # same weights + same config => same logits from the old-form file
        with torch.no_grad():
            assert torch.equal(before(probe).logits, after(probe).logits)
    stats = write_reference(folder, AutoTokenizer.from_pretrained(folder), name)
    write_cases(folder)
    stats["kb"] = sum(p.stat().st_size for p in folder.iterdir()) // 1024
    stats["seed"] = seed
    return stats


def main(argv: list[str]) -> int:
    names = argv or NAMES
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise SystemExit(f"unknown fixture(s) {unknown}; known: {NAMES}")
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    bases = {"byte": train_byte_level(), "sp": train_sentencepiece_style()}
    for name in names:
        stats = make(name, bases, seed=1000 + NAMES.index(name))
        print(name, json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
