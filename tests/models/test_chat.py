"""Chat templates rendered as transformers' apply_chat_template renders them (the fixtures' recorded
text and ids), the sandboxed Jinja environment and its helpers, typed errors naming the template's
file, and chat end to end: ``Model.chat`` and ``orion generate --chat`` stop at the end of the turn."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from orion.models import load  # noqa: E402
from orion.models.tokenizers import (ChatTemplate, ChatTemplateError, HFTokenizer,  # noqa: E402
                                     SentencePieceTokenizer, chat_prompt_ids, end_of_turn_ids,
                                     load_tokenizer)

from ckpt_writers import write_hf_llama  # noqa: E402
from models_helpers import data_file, tiny_llama, weights16  # noqa: E402
from test_hf_tokenizer import NAMES, fixture  # noqa: E402

USER = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize("name", NAMES)
def test_render_and_ids_equal_transformers(name):
    d = fixture(name)
    tok = load_tokenizer(d)
    template, source = tok.chat_template
    assert source.endswith("tokenizer_config.json")
    with open(os.path.join(d, "chat_cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    assert {c["add_generation_prompt"] for c in cases} == {True, False}
    for c in cases:
        text = ChatTemplate(template, source, tok.special_tokens).render(c["messages"], c["add_generation_prompt"])
        assert text == c["rendered"]
        assert chat_prompt_ids(tok, c["messages"], c["add_generation_prompt"]) == c["ids"]


def _render(src, messages=USER, **kw):
    return ChatTemplate(src, "/x/tokenizer_config.json", {"bos_token": "<s>", "eos_token": "</s>"}).render(
        messages, **kw)


def test_environment_matches_transformers():
    # trim_blocks / lstrip_blocks: block tags leave no newline or indentation behind
    assert _render("{% for m in messages %}\n    {% if true %}{{ m.content }}{% endif %}\n{% endfor %}") == "Hi"
    # special tokens and add_generation_prompt are in the context; caller keywords too
    assert _render("{{ bos_token }}{{ messages[0]['content'] }}{% if add_generation_prompt %}>{% endif %}"
                   "{{ eos_token }}", add_generation_prompt=True) == "<s>Hi></s>"
    assert _render("{{ eos_token }}{{ flag }}", add_generation_prompt=False, eos_token="E", flag=3) == "E3"
    # tojson keeps non-ASCII and HTML characters; options as transformers exposes them
    assert _render("{{ {'a': '<é>'} | tojson }}") == '{"a": "<é>"}'
    assert _render("{{ [1, 2] | tojson(indent=1) }}") == "[\n 1,\n 2\n]"
    # loop controls, namespace, dict(), strftime_now
    assert _render("{% for i in [1,2,3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}") == "1"
    assert _render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}"
                   "{{ ns.n }}") == "1"
    assert _render("{{ dict(a=1)['a'] }}") == "1"
    assert len(_render("{{ strftime_now('%Y') }}")) == 4
    # None-valued keys are dropped; reasoning is offered under transformers' names
    assert _render("{{ 'tool_calls' in messages[0] }}", [{"role": "user", "content": "x", "tool_calls": None}]) \
        == "False"
    assert _render("{{ messages[0].reasoning_content }}", [{"role": "assistant", "content": "", "thinking": "t"}]) \
        == "t"


def test_template_errors_are_typed_and_name_the_file():
    with pytest.raises(ChatTemplateError, match=r"/x/tokenizer_config.json.*only user turns"):
        _render("{{ raise_exception('only user turns') }}")
    with pytest.raises(ChatTemplateError, match=r"/x/tokenizer_config.json.*does not compile"):
        _render("{% for m in messages %}")
    # the sandbox refuses attribute escapes and mutation of the messages
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json"):
        _render("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json"):
        _render("{% set _ = messages.append(1) %}")
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json"):
        _render("{% set ns = namespace(_x=1) %}")
    with pytest.raises(ChatTemplateError, match="none named 'default'"):
        ChatTemplate([{"name": "a", "template": "x"}], "/x/t.json").render(USER)
    with pytest.raises(ChatTemplateError, match="non-empty list"):
        _render("x", [])


def test_named_templates_and_chat_template_jinja(tmp_path):
    t = ChatTemplate([{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}], "/x/t.json")
    assert t.render(USER) == "D" and t.render(USER, tools=[{"name": "f"}]) == "T"
    d = tmp_path / "tok"
    shutil.copytree(fixture("qwen3"), d, ignore=shutil.ignore_patterns("*.safetensors", "*.npz"))
    (d / "chat_template.jinja").write_text("[{{ messages[0].content }}]")
    tok = HFTokenizer(str(d / "tokenizer.json"))
    assert tok.chat_template == ("[{{ messages[0].content }}]", str(d / "chat_template.jinja"))
    assert chat_prompt_ids(tok, USER) == tok.encode("[Hi]")


END_OF_TURN = {"llama3": "<|eot_id|>", "smollm2": "<|im_end|>", "llama_linear": "<|eot_id|>",
               "llama_legacy_keys": "<|eot_id|>", "qwen2": "<|im_end|>", "qwen3": "<|im_end|>", "mistral": "</s>",
               "gemma3": "<end_of_turn>", "gemma3_legacy_keys": "<end_of_turn>", "phi3": "<|end|>"}


@pytest.mark.parametrize("name", NAMES)
def test_end_of_turn_token_found_from_the_template(name):
    if name not in END_OF_TURN:
        pytest.skip(f"no expected end-of-turn token recorded here for fixture {name}")
    tok = load_tokenizer(fixture(name))
    assert end_of_turn_ids(tok) == [tok.token_id(END_OF_TURN[name])]


def test_tokenizers_without_a_template_say_so():
    sp = SentencePieceTokenizer(data_file("llama2-tokenizer.model"))
    with pytest.raises(ChatTemplateError, match="no chat template"):
        chat_prompt_ids(sp, USER)
    assert end_of_turn_ids(sp) == []
    with pytest.raises(ChatTemplateError, match="tokenizer=PATH"):
        chat_prompt_ids(None, USER)


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory):
    """A tiny random Llama with the llama3 fixture's tokenizer (Llama 3 chat format)."""
    d = tmp_path_factory.mktemp("chat_llama")
    src = fixture("llama3")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), d / f)
    cfg = tiny_llama(vocab_size=512, n_ctx=128)
    w = weights16(cfg, seed=5, std=0.15)
    write_hf_llama(d, cfg, {k: v.astype(np.float32) for k, v in w.items()},
                   extra_config={"bos_token_id": 384, "eos_token_id": 385})
    return d


def test_model_chat_stops_at_end_of_turn(chat_model_dir, tmp_path):
    m = load(str(chat_model_dir), device="sim", cache=str(tmp_path))
    tok = m.tokenizer
    eot = tok.token_id("<|eot_id|>")
    assert m.stop_tokens == [385, eot]          # config.json eos + tokenizer_config's eos (end of turn)
    ids = chat_prompt_ids(tok, USER)
    assert ids[0] == 384 and ids.count(384) == 1 and ids[-2:] == tok.encode("\n\n")
    free = m.generate(ids, max_tokens=6, stop_tokens=[]).tokens
    # the template's end of turn stops chat even when neither the config nor the tokenizer's eos names it
    tok.eos_id, m.stop_tokens = None, []
    assert m.chat(USER, stream=True).params.stop_tokens == [eot]
    # make the tokenizer's eos a token the model will produce: the answer must end right there
    i = next((k for k in range(1, len(free)) if free[k] not in free[:k]), 0)
    tok.eos_id = free[i]
    j = next(k for k, t in enumerate(free) if t in (free[i], eot))
    g = m.chat(USER, max_tokens=6)
    assert g.prompt_tokens == ids and g.tokens == free[:j + 1] and g.stop_reason == "stop_token"
    assert g.text == tok.decode(free[:j])
    s = m.chat(USER, max_tokens=6, stream=True, stop_tokens=[])
    assert [t.id for t in s] == free and s.result.stop_reason == "max_tokens"
    m.release()


def test_cli_generate_chat(chat_model_dir, tmp_path):
    from orion.cli.generate import add_generate_parser, cmd_generate
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    argv = ["generate", "--model", str(chat_model_dir), "--chat", "--prompt", "Hi", "--max-tokens", "5",
            "--device", "sim", "--cache-dir", str(tmp_path)]
    out, err = io.StringIO(), io.StringIO()
    assert cmd_generate(p.parse_args(argv), out=out, err=err) == 0
    m = load(str(chat_model_dir), device="sim", cache=str(tmp_path))
    s = m.chat(USER, max_tokens=5, stream=True)
    expect = "".join(t.text for t in s)
    m.release()
    assert out.getvalue() == expect + "\n"          # the answer only, not the rendered prompt
    assert f"prompt {len(chat_prompt_ids(m.tokenizer, USER))} tokens" in err.getvalue()
    from orion import InputError
    with pytest.raises(InputError, match="--prompt-ids"):
        cmd_generate(p.parse_args(argv + ["--prompt-ids", "1 2"]), out=io.StringIO(), err=io.StringIO())
