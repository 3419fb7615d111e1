"""Hostile chat templates in a model folder: a template is a stranger's program. Each
one below would loop for minutes, build a gigabyte prompt, recurse until RecursionError or fail outside
jinja's own errors without the limits of orion.models.tokenizers.template_sandbox; each must end within
2 s in a ChatTemplateError naming tokenizer_config.json and the limit, leaving the folder as it was."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from orion.models.tokenizers import (
    ChatTemplate,
    ChatTemplateError,
    chat_prompt_ids,
    end_of_turn_ids,
    load_tokenizer,
)
from orion.models.tokenizers import template_sandbox as sandbox

SRC = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")
USER = [{"role": "user", "content": "Hi"}]
BIG = "{% set s = 'a' * 500000 %}"                       # half a megabyte: within the limits by itself
DEEP = "{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}"

LOOPS = "looped more than"
BUILD = "would build"
TOTAL = "built more than"
DEPTH = "nested calls deeper than"
WIDTH = "a width or count of"
BITS = "bits"
COMPILE = "does not compile"
RENDER = "failed to render"

CASES = [
    # loops
    ("huge range", "{% for i in range(10**9) %}{% endfor %}", LOOPS),
    ("nested ranges", "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", LOOPS),
    ("nested loops over a list", ("{% set l = range(1000)|list %}{% for a in l %}{% for b in l %}{% for c in l %}"
     "{% endfor %}{% endfor %}{% endfor %}"), LOOPS),
    ("range consumed by a filter", "{{ range(10**9)|sum }}", LOOPS),
    ("dict.fromkeys over a huge range", "{{ dict.fromkeys(range(10**9))|length }}", LOOPS),
    ("loop over every message a billion times", ("{% for i in range(10**9) %}{% for m in messages %}{{ m.role }}"
     "{% endfor %}{% endfor %}"), "exceeded a limit"),          # the loop or the time limit, whichever comes first
    # sizes multiplied by one operation
    ("string times a billion", "{{ 'a' * 10**9 }}", BUILD),
    ("list times a billion", "{% set l = [1] * 10**9 %}", BUILD),
    ("string doubled by ~ in a loop", ("{% set ns = namespace(x='ab') %}{% for i in range(64) %}"
     "{% set ns.x = ns.x ~ ns.x %}{% endfor %}"), BUILD),
    ("string doubled by ~ in 60 statements", "{% set x = 'ab' %}" + "{% set x = x ~ x %}" * 60, BUILD),
    ("list doubled by + in a loop", ("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
     "{% set ns.l = ns.l + ns.l %}{% endfor %}"), BUILD),
    ("string doubled by a set block", "{% set x = 'ab' %}" + "{% set x %}{{ x }}{{ x }}{% endset %}" * 60, BUILD),
    ("percent width", "{{ '%0999999999d' % 1 }}", BUILD),
    ("percent star width", "{{ '%*d' % (999999999, 1) }}", BUILD),
    ("format width", "{{ '{:>999999999}'.format(1) }}", BUILD),
    ("format nested width", "{{ '{:{}}'.format(1, 999999999) }}", BUILD),
    ("format filter width", "{{ '%0999999999d'|format(1) }}", BUILD),
    ("replace method", BIG + "{{ s.replace('a', s) }}", BUILD),
    ("replace filter", BIG + "{{ s|replace('a', s) }}", BUILD),
    ("join of one string a thousand times", BIG + "{{ ([s] * 1000)|join }}", BUILD),
    ("str.join of one string a thousand times", BIG + "{{ ''.join([s] * 1000) }}", BUILD),
    ("printing a list of one string a thousand times", BIG + "{{ [s] * 1000 }}", BUILD),
    ("tojson of one string a thousand times", BIG + "{{ ([s] * 1000)|tojson }}", BUILD),
    ("indent of many lines", "{{ ('\\n' * 100000)|indent(1000) }}", BUILD),
    ("expandtabs", "{{ ('\\t' * 1000).expandtabs(99999) }}", BUILD),
    ("translate table", "{{ ('a' * 100000).translate(''.maketrans({'a': 'b' * 100000})) }}", BUILD),
    ("strftime width", "{{ strftime_now('%999999999Y') }}", BUILD),
    ("center filter", "{{ 'a'|center(999999999) }}", WIDTH),
    ("str.center", "{{ 'a'.center(999999999) }}", WIDTH),
    ("int.to_bytes", "{{ (1).to_bytes(999999999, 'big') }}", WIDTH),
    ("tojson indent", "{{ messages|tojson(indent=999999999) }}", WIDTH),
    ("wordwrap of a long text", "{{ ('x' * 70000)|wordwrap(1) }}", "wordwrap filter"),
    ("striptags of many tags", "{{ ('<a>' * 30000)|striptags }}", "striptags filter"),
    # everything built together
    ("text piled up in a set block", "{% set x %}{% for i in range(100000) %}" + "A" * 10000 +
     "{% endfor %}{% endset %}", TOTAL),
    ("slices piled up in a list", ("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
     "{% set ns.l = ns.l + [('a' * 100000)[i:]] %}{% endfor %}"), TOTAL),
    # integers
    ("power", "{{ 2 ** 100000 }}", BITS),
    ("squaring in a loop", ("{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
     "{% endfor %}"), BITS),
    # recursion
    ("recursive macro", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", DEPTH),
    ("recursive loop", "{% for x in [[1]] recursive %}{{ loop([[1]]) }}{% endfor %}", DEPTH),
    ("block calling itself", "{% block b %}{{ self.b() }}{% endblock %}", DEPTH),
    ("mutually recursive macros", ("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}"
     "{{ a() }}"), DEPTH),
    ("list nested 5000 deep, printed", DEEP + "{{ ns.l }}", "nested lists or dicts deeper than"),
    ("list nested 5000 deep, tojson", DEEP + "{{ ns.l|tojson }}", "nested lists or dicts deeper than"),
    # time
    ("megabyte comparisons in a loop", ("{% set s = 'a' * 1000000 %}{% set t = 'a' * 1000000 %}"
     "{% for i in range(100000) %}{% if s == t %}{% endif %}{% endfor %}"), "ran longer than"),
    # compile time
    ("syntax error", "{% for m in messages %}", COMPILE),
    ("parentheses nested 5000 deep", "{{" + "(" * 5000 + "1" + ")" * 5000 + "}}", COMPILE),
    ("loops nested 25 deep", "{% for x in messages %}" * 25 + "{% endfor %}" * 25, COMPILE),
    ("unknown filter", "{{ messages|nosuchfilter }}", COMPILE),
    ("too many tokens", "{{ a }}" * 20_001, "jinja tokens"),
    # the template's own errors
    ("raise_exception", "{{ raise_exception('Only user and assistant roles are supported!') }}",
     "Only user and assistant roles are supported!"),
    ("raise_exception with a megabyte message", "{{ raise_exception('x' * 1000000) }}", "xxx..."),
    ("unknown filter under an if", "{% if messages %}{{ messages|nosuchfilter }}{% endif %}", "No filter named"),
    ("division by zero", "{{ 1 / 0 }}", "ZeroDivisionError"),
    ("lipsum is gone", "{{ lipsum(1000000) }}", "'lipsum' is undefined"),
    ("iterating a number", "{% for x in 5 %}{% endfor %}", RENDER),
    ("float overflow", "{{ 10.0 ** 400 }}", "OverflowError"),
    ("a lone surrogate in the prompt", "{{ '\\ud800' }}", "not valid Unicode"),      # the tokenizer cannot encode it
]


def _folder(tmp_path, config: dict, files: dict | None = None):
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(os.path.join(SRC, "tokenizer.json"), d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    for name, text in (files or {}).items():
        (d / name).write_text(text)
    return d


def _snapshot(d):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(d.iterdir())}


def _config(template):
    with open(os.path.join(SRC, "tokenizer_config.json")) as f:
        return dict(json.load(f), chat_template=template)


@pytest.mark.parametrize("name,template,needle", CASES, ids=[c[0] for c in CASES])
def test_hostile_template_ends_fast_in_a_typed_error(tmp_path, name, template, needle):
    d = _folder(tmp_path, _config(template))
    before = _snapshot(d)
    tok = load_tokenizer(str(d))
    # "fast" in CPU seconds, which a busy machine does not inflate (a concurrent C++ build once stretched one
    # case past a 2 s wall bound); the wall bound, looser, still catches a hang
    t0, c0 = time.perf_counter(), time.process_time()
    with pytest.raises(ChatTemplateError) as e:
        chat_prompt_ids(tok, USER)
    cpu = time.process_time() - c0
    assert needle in str(e.value) and str(d / "tokenizer_config.json") in str(e.value)
    assert len(str(e.value)) < 1000                                 # an error a person can read
    assert cpu < 2.0, f"{name}: {cpu:.2f} CPU s"
    assert time.perf_counter() - t0 < 10.0
    assert end_of_turn_ids(tok) == []                               # the probe render is bounded too
    assert time.process_time() - c0 < 4.0 and time.perf_counter() - t0 < 20.0
    assert _snapshot(d) == before


def test_chat_template_jinja_that_hangs_names_its_file(tmp_path):
    d = _folder(tmp_path, _config("{{ messages[0].content }}"),
                {"chat_template.jinja": "{% for i in range(10**9) %}{{ i }}{% endfor %}"})
    before = _snapshot(d)
    t0 = time.perf_counter()
    with pytest.raises(ChatTemplateError, match=r"chat_template\.jinja: .*looped more than"):
        chat_prompt_ids(load_tokenizer(str(d)), USER)
    assert time.perf_counter() - t0 < 2.0
    assert _snapshot(d) == before


def test_template_longer_than_the_limit(tmp_path):
    text = "x" * (sandbox.MAX_TEMPLATE_CHARS + 1)
    t0 = time.perf_counter()
    with pytest.raises(ChatTemplateError, match="characters"):
        ChatTemplate(text, "/m/chat_template.jinja").render(USER)
    assert time.perf_counter() - t0 < 2.0


def test_messages_that_contain_themselves():
    m = {"role": "user", "content": "hi"}
    m["self"] = m
    with pytest.raises(ChatTemplateError, match="nested deeper than"):
        ChatTemplate("{{ messages[0].content }}", "/m/tokenizer_config.json").render([m])


def test_limits_scale_with_the_conversation():
    """A long conversation (4,000 messages, 2 MB of text) renders: the limits grow with the data given,
    so they only stop what the template itself builds."""
    template = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{{ '\\n' if not loop.last }}"
                "{% endfor %}")
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "w" * 500}
                for i in range(4000)]
    text = ChatTemplate(template, "/m/tokenizer_config.json").render(messages)
    assert text.count("\n") == 3999 and len(text) > 2_000_000


def test_bounded_sandbox_renders_real_template_idioms_like_jinja():
    """Idioms of real Hub templates (namespace, reversed messages, loop.*, tojson(indent), macros, filters,
    string methods, % and format) render exactly as in jinja's plain sandbox (transformers' environment)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    template = (
        "{%- macro schema(s) -%}{%- if s is mapping -%}{ {%- for k, v in s|dictsort -%}{{ k }}: {{ schema(v) }}"
        "{%- if not loop.last %}, {% endif -%}{%- endfor -%} }{%- else -%}{{ s|string }}{%- endif -%}{%- endmacro -%}"
        "{{ bos_token }}{%- for tool in tools %}{{ tool|tojson(indent=4) }}\n{{ schema(tool) }}\n{%- endfor %}"
        "{%- set ns = namespace(last=-1) %}{%- for m in messages[::-1] %}{%- if ns.last < 0 and m.role == 'user' %}"
        "{%- set ns.last = (messages|length - 1) - loop.index0 %}{%- endif %}{%- endfor %}"
        "{%- for m in messages %}{%- set content = m.content %}{%- if '</think>' in content %}"
        "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
        "<|{{ m.role }}|>{{ '%s %d/%d' % (m.role, loop.index, loop.length) }} {{ content|trim }}"
        "{{ '{:>4}'.format(loop.index0) }}{% if loop.index0 == ns.last %}*{% endif %}{{ eos_token }}\n{%- endfor %}"
        "{{ messages|map(attribute='role')|unique|sort|join(',') }} {{ [[1], [2]]|sum(start=[]) }} {{ range(3)|list }}"
        "{%- for i in range(3) %}{{ loop.cycle('a', 'b') }}{% if i == 1 %}{% break %}{% endif %}{% endfor %}"
        "{{ 'ab'|center(6) }}|{{ 'x\\ny'|indent(2, true) }}|{{ ('a b ' * 4)|wordwrap(3) }}|{{ 'a' ~ 1 ~ none }}")
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q <é>"},
                {"role": "assistant", "content": "<think>t</think>\n\nA"}, {"role": "user", "content": " q2 "}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    ours = ChatTemplate(template, "/m/tokenizer_config.json", {"bos_token": "<s>", "eos_token": "</s>"}).render(
        messages, tools=tools)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    plain = env.from_string(template).render(messages=messages, tools=tools, documents=None,
                                             add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    assert ours == plain and "Q <é>" in ours
