#!/usr/bin/env python3
"""Fuzz harness for chat templates (orion.models.tokenizers.chat / template_sandbox).

    PYTHONPATH=python:<build dir> python fuzz/fuzz_chat_template.py --seconds 120 --seed 1
    PYTHONPATH=python:<build dir> python fuzz/fuzz_chat_template.py --atheris -max_total_time=600

Each case is a template (a real fixture template from tests/fixtures/models mutated piece by piece with
jinja snippets, hostile ones included, or a random program from a small jinja grammar: loops, ranges,
~, *, **, %, format, macros, recursion, filters with random arguments) rendered with random messages.
With --atheris the input bytes seed the case (coverage then comes from this file's instrumented
branches only). The run prints one JSON line of counts; it exits 1 on any finding:

- crash: anything but a string or a ChatTemplateError (a bare exception from jinja or from orion);
- hang: a case longer than --hang seconds (the limits promise well under one);
- memory: a MemoryError under the address-space cap (--memory-gb), i.e. an allocation the limits missed;
- divergence: a template orion renders differs from jinja's plain sandbox, transformers' environment
  (checked when orion renders it without error and the plain render raises nothing either; templates
  reading the clock or random are skipped).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "models")
warnings.filterwarnings("ignore", category=SyntaxWarning)      # Python's, on the plain-jinja reference's code

import harness  # noqa: E402 - fuzz/, this script's folder
from orion.models.tokenizers import template_sandbox as sandbox
from orion.models.tokenizers.chat import ChatTemplate, ChatTemplateError, _messages

SNIPPETS = [
    "{% for i in range(N) %}X{% endfor %}", "{% for m in messages %}X{% endfor %}", "{% if C %}X{% else %}X{% endif %}",
    "{{ E }}", "{% set ns = namespace(x=E) %}", "{% set ns.x = ns.x ~ ns.x %}", "{% set x = E %}",
    "{% macro m(n) %}X{{ m(n) }}{% endmacro %}{{ m(1) }}", "{% for x in E recursive %}{{ loop(x) }}{% endfor %}",
    "{% set x %}X{{ x }}{% endset %}", "{{ raise_exception(E) }}", "{% break %}", "{% continue %}",
    "{% filter upper %}X{% endfilter %}", "{% call m() %}X{% endcall %}", "{{ caller() }}", "{% block b %}X{% endblock %}",
    "{{ self.b() }}", "{% for", "{{", "}}", "{%", "%}", "{#", "#}", "{% endfor %}", "{% endif %}", "(", ")", "[", "]",
]
EXPRS = [
    "messages", "messages[0]", "messages[-1].content", "message", "content", "tools", "bos_token", "eos_token",
    "add_generation_prompt", "'a'", "''", "'%s'", "'{}'", "'{:>N}'", "'%0Nd'", "'\\n'", "'\\t'", "N", "-N", "0", "1",
    "2", "10**9", "1.5", "none", "true", "[1, 2]", "[E, E]", "{'a': E}", "range(N)", "(E, E)", "ns", "ns.x", "loop",
    "loop.index", "x", "dict(a=E)", "namespace(a=E)", "lipsum", "cycler(1, 2)", "joiner(',')", "strftime_now('%Y')",
]
BINOPS = ["~", "+", "*", "**", "%", "-", "/", "//", "==", "in", "and", "or", "if C else"]
FILTERS = [
    "length", "list", "join", "join(E)", "tojson", "tojson(indent=N)", "trim", "upper", "title", "center(N)",
    "indent(N)", "replace(E, E)", "format(E)", "sum", "sum(start=[])", "sort", "unique", "reverse", "first", "last",
    "map('string')", "map(attribute='content')", "selectattr('role', 'equalto', 'user')", "batch(N)", "slice(N)",
    "wordwrap(N)", "truncate(N)", "striptags", "urlize", "string", "int", "float", "round(N)", "default(E)",
    "dictsort", "items", "pprint", "escape", "wordcount", "groupby('role')", "random", "min", "max", "abs", "count",
]
METHODS = ["split(E)", "strip()", "lstrip(E)", "startswith(E)", "replace(E, E)", "center(N)", "ljust(N)", "zfill(N)",
           "join(E)", "format(E, E)", "expandtabs(N)", "upper()", "count(E)", "find(E)", "encode()", "items()",
           "get(E)", "keys()", "to_bytes(N, 'big')", "splitlines()", "title()"]
NUMBERS = [0, 1, 2, 3, 7, 64, 100, 1000, 65535, 99999, 100001, 10**6, 10**9, -1]


def _fixture_templates() -> list[str]:
    out = []
    for name in sorted(os.listdir(FIXTURES)) if os.path.isdir(FIXTURES) else []:
        p = os.path.join(FIXTURES, name, "tokenizer_config.json")
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                t = json.load(f).get("chat_template")
            if isinstance(t, str) and t not in out:
                out.append(t)
    return out or ["{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"]


def _fixture_messages() -> list[list[dict]]:
    out = []
    for name in sorted(os.listdir(FIXTURES)) if os.path.isdir(FIXTURES) else []:
        p = os.path.join(FIXTURES, name, "chat_cases.json")
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                out += [c["messages"] for c in json.load(f)]
    return out or [[{"role": "user", "content": "Hi"}]]


TEMPLATES = _fixture_templates()
MESSAGES = _fixture_messages()


def expr(rng: random.Random, depth: int = 0) -> str:
    k = rng.randrange(6) if depth < 4 else 0
    if k <= 1:
        e = rng.choice(EXPRS)
    elif k == 2:
        e = f"({expr(rng, depth + 1)} {rng.choice(BINOPS)} {expr(rng, depth + 1)})"
    elif k == 3:
        e = f"{expr(rng, depth + 1)}|{rng.choice(FILTERS)}"
    elif k == 4:
        e = f"{expr(rng, depth + 1)}.{rng.choice(METHODS)}"
    else:
        e = f"{expr(rng, depth + 1)}[{rng.choice(['0', '-1', '::-1', '1:', 'N:', E_ := 'E'])}]".replace("E", E_)
    return fill(rng, e, depth)


def fill(rng: random.Random, text: str, depth: int) -> str:
    """Replaces the placeholders of a piece: N a number, E an expression, C a condition, X a body."""
    out = []
    for ch in text:
        if ch == "N":
            out.append(str(rng.choice(NUMBERS)))
        elif ch == "E" and depth < 4:
            out.append(expr(rng, depth + 1))
        elif ch == "E":
            out.append(rng.choice(["'a'", "1", "messages"]))
        elif ch == "C":
            out.append(rng.choice(["loop.last", "message.role == 'user'", "true", "x is defined", "ns.x"]))
        elif ch == "X" and depth < 3:
            out.append(program(rng, depth + 1, rng.randrange(1, 3)))
        elif ch == "X":
            out.append("x")
        else:
            out.append(ch)
    return "".join(out)


def program(rng: random.Random, depth: int = 0, n: int | None = None) -> str:
    return "".join(fill(rng, rng.choice(SNIPPETS), depth) for _ in range(n or rng.randrange(1, 6)))


def mutate(rng: random.Random, text: str) -> str:
    """A real template edited: pieces inserted, deleted, duplicated or swapped at tag boundaries."""
    cuts = sorted({0, len(text), *(rng.randrange(len(text) + 1) for _ in range(6))})
    for _ in range(rng.randrange(1, 5)):
        i = rng.choice(cuts)
        op = rng.randrange(4)
        if op == 0:
            text = text[:i] + program(rng, 1, 1) + text[i:]
        elif op == 1:
            j = min(len(text), i + rng.randrange(1, 40))
            text = text[:i] + text[j:]
        elif op == 2:
            j = min(len(text), i + rng.randrange(1, 200))
            text = text[:j] + text[i:j] * rng.choice([2, 3, 50]) + text[j:]
        else:
            text = text[:i] + "{{ " + expr(rng) + " }}" + text[i:]
    return text


def messages(rng: random.Random) -> list:
    ms = [dict(m) for m in rng.choice(MESSAGES)]
    for _ in range(rng.randrange(3)):
        m = rng.choice(ms)
        k = rng.randrange(5)
        if k == 0:
            m["content"] = "x" * rng.choice([0, 1, 1000, 300_000])
        elif k == 1:
            m["content"] = [{"type": "text", "text": "hi"}]
        elif k == 2:
            m["role"] = rng.choice(["tool", "system", "", "🙂"])
        elif k == 3:
            m["tool_calls"] = [{"function": {"name": "f", "arguments": {"a": [1, {"b": None}]}}}]
        else:
            ms = ms * rng.choice([1, 2, 50])
    if sum(len(str(m.get("content"))) for m in ms) > 400_000:    # big data buys time (see below): keep it modest
        ms = ms[:2]
    return ms


def plain_render(template: str, ms: list, kwargs: dict):
    """jinja's plain sandbox as transformers sets it up (no limits: only run on what orion rendered)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        from jinja2.exceptions import TemplateError
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals.pop("lipsum", None)
    return env.from_string(template).render(messages=_messages(ms), tools=None, documents=None, **kwargs)


class Stats:
    def __init__(self):
        self.counts = {"cases": 0, "rendered": 0, "typed_errors": 0, "limit_errors": 0, "compared": 0,
                       "crashes": 0, "hangs": 0, "memory": 0, "divergences": 0, "slowest_s": 0.0}
        self.findings: list[str] = []

    def finding(self, kind: str, template: str, detail: str) -> None:
        self.counts[kind] += 1
        if len(self.findings) < 5:
            self.findings.append(f"{kind}: {detail[:300]}\n  template: {template[:600]!r}")


def one_case(rng: random.Random, stats: Stats, hang: float) -> None:
    k = rng.randrange(3)
    template = mutate(rng, rng.choice(TEMPLATES)) if k == 0 else program(rng) if k == 1 else \
        rng.choice(TEMPLATES) + program(rng, 1, 2)
    ms = messages(rng)
    kwargs = {"add_generation_prompt": rng.random() < 0.5}
    special = {"bos_token": "<s>", "eos_token": "</s>"}
    stats.counts["cases"] += 1
    t0 = time.perf_counter()
    out = err = None
    try:
        out = ChatTemplate(template, "/fuzz/tokenizer_config.json", special).render(ms, **kwargs)
    except ChatTemplateError as e:
        err = str(e)
    except MemoryError:
        stats.finding("memory", template, "MemoryError")
        return
    except Exception as e:  # noqa: BLE001 - anything else is what the fuzzer looks for
        stats.finding("crashes", template, f"{type(e).__name__}: {e}")
        return
    elapsed = time.perf_counter() - t0
    stats.counts["slowest_s"] = max(stats.counts["slowest_s"], round(elapsed, 3))
    chars, items = sandbox.data_size(_messages(ms))       # the sandbox gives more data more time
    if elapsed > hang + sandbox.RENDER_SECONDS_PER_ITEM * items + sandbox.RENDER_SECONDS_PER_CHAR * chars:
        stats.finding("hangs", template, f"{elapsed:.2f} s")
    if err is not None:
        stats.counts["typed_errors"] += 1
        stats.counts["limit_errors"] += "exceeded a limit" in err
        if "MemoryError" in err:
            stats.finding("memory", template, err)
        return
    stats.counts["rendered"] += 1
    if "strftime" in template or "random" in template:    # the clock and random differ between two renders
        return
    try:
        ref = plain_render(template, ms, {**special, **kwargs})
    except Exception:  # noqa: BLE001 - e.g. range() over 100,000 items: jinja's own sandbox refuses
        return
    stats.counts["compared"] += 1
    if ref != out and " at 0x" not in ref.lower():        # object descriptions differ by address only
        i = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), min(len(out), len(ref)))
        stats.finding("divergences", template, f"at {i} of {len(out)}/{len(ref)}: orion {out[i - 20:i + 80]!r} != "
                                               f"jinja {ref[i - 20:i + 80]!r}")


def run(seconds: float, seed: int, hang: float, max_cases: int | None = None) -> Stats:
    stats = Stats()
    return harness.loop(lambda rng: one_case(rng, stats, hang), stats, seconds, seed, hang, max_cases)


def main() -> int:
    args, rest = harness.parse(__doc__.splitlines()[0])
    if args.atheris:
        stats = Stats()
        return harness.under_atheris(lambda rng: one_case(rng, stats, args.hang), stats, rest)
    return harness.report(run(args.seconds, args.seed, args.hang, args.max_cases),
                          ("crashes", "hangs", "memory", "divergences"))


if __name__ == "__main__":
    sys.exit(main())
