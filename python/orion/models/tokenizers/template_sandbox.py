"""The sandbox chat templates run in (see :mod:`.chat`).

A template is a program from a stranger. The sandbox keeps it away from Python's internals; the limits
below keep it from using unbounded time or memory (a template that loops for minutes, or builds a
gigabyte prompt the tokenizer library then aborts the process on). Each is enforced while the template
runs, at its root (the sandbox's attribute, item, call and operator hooks, every ``for`` loop, ``range``,
``~``, every filter and every piece of output), and each ends the render well within a second in a
:class:`LimitExceeded` naming it (which :mod:`.chat` reports as a ``ChatTemplateError``):

* source: at most :data:`MAX_TEMPLATE_CHARS` characters and :data:`MAX_TEMPLATE_TOKENS` jinja tokens
  (compiling costs about 20 µs a token);
* time: :data:`MAX_RENDER_SECONDS` (plus 50 µs per item of data and 0.1 µs per character, 10 s at
  most), checked at every hook;
* size: one string, list or dict the template builds, and the prompt, at most :data:`MAX_VALUE_SIZE` plus
  4 times the size of the data given (its characters and items); everything it builds together, output
  included, :data:`PRODUCED_FACTOR` times (:data:`MAX_VALUE_SIZE` plus the data's size). What could multiply a size is checked before it runs:
  ``*``, ``**``, ``%`` and ``format`` (widths included), ``~``, ``join``, ``replace``, ``indent``,
  ``tojson``, printing a list;
* loops: :data:`MAX_LOOP_ITERATIONS` iterations in all (plus 4 per item of data), ``range`` and the filters
  that consume one included; widths and counts given to filters and string methods at most that many;
* nesting: :data:`MAX_CALL_DEPTH` calls inside each other (macros calling macros, recursive loops) and
  :data:`MAX_DATA_DEPTH` levels of nested lists and dicts;
* integers: :data:`MAX_INT_BITS` bits; the slow text filters (``wordwrap``, ``urlize``, ``striptags``)
  take at most :data:`MAX_SLOW_FILTER_CHARS` characters.
"""

from __future__ import annotations

import contextvars
import json
import re
import string
import time
import warnings
from datetime import datetime
from functools import lru_cache, update_wrapper

__all__ = ["MAX_CALL_DEPTH", "MAX_DATA_DEPTH", "MAX_INT_BITS", "MAX_LOOP_ITERATIONS", "MAX_RENDER_SECONDS",
           "MAX_SLOW_FILTER_CHARS", "MAX_TEMPLATE_CHARS", "MAX_TEMPLATE_TOKENS", "MAX_VALUE_SIZE", "PRODUCED_FACTOR",
           "LimitExceeded", "compile_template", "data_size", "render", "text_size"]

# The limits (see the module docstring). Real templates stay far below each: the largest on the Hub are
# some tens of KB, loop a few times over the messages, nest a few macros and build a prompt a little
# larger than the messages.
MAX_TEMPLATE_CHARS = 256 * 1024
MAX_TEMPLATE_TOKENS = 20_000          # ~0.4 s to compile here
MAX_RENDER_SECONDS = 0.5
RENDER_SECONDS_PER_ITEM = 5e-5        # more time for more data: 50 µs per message, key, list item of it,
RENDER_SECONDS_PER_CHAR = 1e-7        # ... 0.1 µs per character of its text,
MAX_RENDER_SECONDS_WITH_DATA = 10.0   # ... 10 s at most (far beyond any model's context)
MAX_VALUE_SIZE = 1 << 20              # characters of a string, items of a list or dict
VALUE_SIZE_PER_DATA = 4               # ... plus 4 per character or item of data given
PRODUCED_FACTOR = 16                  # everything built in one render, output included: 16 MB + 16x the data
MAX_LOOP_ITERATIONS = 100_000         # plus 4 per item of data (not per character: no template loops over those)
LOOP_ITERATIONS_PER_ITEM = 4
MAX_CALL_DEPTH = 64
MAX_DATA_DEPTH = 64
MAX_INT_BITS = 4096
MAX_SLOW_FILTER_CHARS = 65_536        # wordwrap / urlize / striptags: pure Python, superlinear at worst
MAX_JSON_INDENT = 64                  # tojson(indent=...) spaces


class LimitExceeded(Exception):
    """A render limit was hit. Deliberately not a ValueError / TypeError / LookupError: jinja and its
    filters catch those on the way out, and the template must not go on."""


class _NotAtCompileTime(Exception):
    """Raised by the bounded filters and output when jinja tries them while folding constants at compile
    time (outside any render's limits): jinja then leaves them to the render, where they are counted."""


_RENDER: contextvars.ContextVar = contextvars.ContextVar("orion_chat_render", default=None)


def _scalar_size(v) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v.bit_length() // 3 + 2
    return 24 if isinstance(v, float) else 5


def text_size(value, cap: float = float("inf"), depth_limit: int | None = MAX_DATA_DEPTH) -> int:
    """Characters and items ``value`` comes to when printed (``str`` / ``tojson``), estimated, counting
    stopped once past ``cap`` (so the walk costs at most about ``cap`` steps)."""
    from jinja2.utils import Namespace  # start-up: jinja2 (~20 ms) only when a chat template renders
    total = 0
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (str, bytes)):
            total += len(v) + (2 if depth else 0)
            continue
        if v is None or isinstance(v, (bool, int, float)):
            total += _scalar_size(v)
            continue
        if isinstance(v, Namespace):
            v = v._Namespace__attrs                       # printed as its attributes
        if depth_limit is not None and depth >= depth_limit:
            raise LimitExceeded(f"nested lists or dicts deeper than {depth_limit} levels")
        if isinstance(v, dict):
            total += 2 + 4 * len(v)
            stack.extend((x, depth + 1) for kv in v.items() for x in kv)
        elif isinstance(v, (list, tuple, set, frozenset, type({}.items()), type({}.keys()), type({}.values()))):
            total += 2 + 2 * len(v)
            stack.extend((x, depth + 1) for x in v)
        else:
            total += 64                                   # other objects print as a short description
        if total > cap:
            break
    return total


def data_size(value) -> tuple[int, int]:
    """(characters of text, items: strings, numbers, lists, dicts...) of the data a template is given."""
    chars = items = 0
    stack = [value]
    while stack:
        v = stack.pop()
        items += 1
        if isinstance(v, str):
            chars += len(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return chars, items


class _Budget:
    """The limits of one render, and what is left of them."""

    def __init__(self, chars: int, items: int):
        data = chars + items
        self.max_size = MAX_VALUE_SIZE + VALUE_SIZE_PER_DATA * data
        self.produced_limit = PRODUCED_FACTOR * (MAX_VALUE_SIZE + data)
        self.produced = 0
        self.iterations_limit = MAX_LOOP_ITERATIONS + LOOP_ITERATIONS_PER_ITEM * items
        self.iterations = 0
        self.seconds = min(MAX_RENDER_SECONDS + RENDER_SECONDS_PER_ITEM * items + RENDER_SECONDS_PER_CHAR * chars,
                           MAX_RENDER_SECONDS_WITH_DATA)
        self.deadline = time.monotonic() + self.seconds
        self.depth = 0

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"ran longer than {self.seconds:.2g} s")

    def step(self) -> None:
        """One loop iteration."""
        self.iterations += 1
        if self.iterations > self.iterations_limit:
            raise LimitExceeded(f"looped more than {self.iterations_limit:,} times")
        self.tick()

    def allow(self, size: int, what: str) -> None:
        if size > self.max_size:
            raise LimitExceeded(f"would build {size:,} characters or items with {what} (the limit is "
                                 f"{self.max_size:,})")

    def count_argument(self, n: int, what: str) -> None:
        if abs(n) > self.iterations_limit:
            raise LimitExceeded(f"passed {what} a width or count of {n:,} (the limit is {self.iterations_limit:,})")

    def take(self, value, what: str):
        """``value``, just built by the template, once it is within the limits (and counted)."""
        if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
            n = len(value)
            self.allow(n, what)
            self.produced += n
            if self.produced > self.produced_limit:
                raise LimitExceeded(f"built more than {self.produced_limit:,} characters and items in all")
        elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise LimitExceeded(f"computed an integer of more than {MAX_INT_BITS} bits ({what})")
        self.tick()
        return value


def _budget() -> _Budget:
    b = _RENDER.get()
    if b is None:
        raise _NotAtCompileTime()
    return b


def _int_arguments(b: _Budget, args, kwargs, what: str) -> None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool):
            b.count_argument(a, what)


# -- sizes of the operations that can multiply one ------------------------------------------------------
def _spec_numbers(spec: str) -> int:
    """The largest number written in a format spec (a width or precision)."""
    return max((int(d) if len(d) <= 12 else 10**12 for d in re.findall(r"\d+", spec)), default=0)


def _percent_size(b: _Budget, fmt: str, args) -> int:
    """Upper bound of ``fmt % args``: every conversion may print all of ``args`` padded to the largest
    width (``*`` takes a width from ``args``)."""
    items = args if isinstance(args, tuple) else (args,)
    width = _spec_numbers(fmt)
    if "*" in fmt:
        width = max([width] + [abs(a) for a in items if isinstance(a, int) and not isinstance(a, bool)])
    return len(fmt) + fmt.count("%") * (text_size(args, b.max_size) + width)


def _format_size(b: _Budget, fmt: str, args, kwargs) -> int:
    """Upper bound of ``fmt.format(*args, **kwargs)``."""
    fields, width = 0, 0
    for _, field, spec, _ in string.Formatter().parse(fmt):
        if field is not None:
            fields += 1
            width = max(width, _spec_numbers(spec or ""))
    if fields:
        width = max([width] + [abs(a) for a in (*args, *kwargs.values())
                               if isinstance(a, int) and not isinstance(a, bool)])
    return len(fmt) + fields * (text_size((args, kwargs), b.max_size) + width)


def _replace_size(s: str, old, new, count=-1) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(s)                         # str.replace raises TypeError
    hits = len(s) + 1 if old == "" else s.count(old)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(s) + hits * max(0, len(new) - len(old))


def _items(value) -> list:
    """An iterable as a list (consumed once: estimated, then handed on), each item a loop step."""
    if isinstance(value, (list, tuple)):
        return list(value)
    b = _budget()
    out = []
    for x in value:
        b.step()
        out.append(x)
    return out


def _str_method(b: _Budget, method, args, kwargs):
    """Checks a call of a str / bytes / int method (``'x'.center(...)``, ``s.replace(...)``, ``', '.join``)
    before it runs; the arguments to call it with (an iterable given to ``join`` is read once here)."""
    owner, name = method.__self__, method.__name__
    _int_arguments(b, args, kwargs, f"{type(owner).__name__}.{name}()")
    if not isinstance(owner, (str, bytes)):
        return args
    if name == "replace" and len(args) >= 2:
        b.allow(_replace_size(owner, *args[:3]) if isinstance(owner, str) else len(owner) * (len(args[1]) + 1),
                f"{name}()")
    elif name == "join" and len(args) == 1:
        items = _items(args[0])
        b.allow(text_size(items, b.max_size) + len(owner) * len(items), "join()")
        return (items,)
    elif name == "expandtabs":
        size = (args or [kwargs.get("tabsize", 8)])[0]
        b.allow(len(owner) + owner.count("\t" if isinstance(owner, str) else b"\t") * max(0, int(size)),
                "expandtabs()")
    elif name == "translate" and args:
        b.allow(len(owner) * (1 + text_size(args[0], b.max_size)), "translate()")
    return args


# -- filters ---------------------------------------------------------------------------------------------
# Filters that do not print their value (they count, pick, reorder or read items): a list given to any
# other filter is first measured as text.
_NON_PRINTING_FILTERS = frozenset({
    "length", "count", "first", "last", "list", "sort", "reverse", "unique", "map", "select", "reject",
    "selectattr", "rejectattr", "batch", "slice", "groupby", "dictsort", "items", "sum", "min", "max",
    "random", "default", "d", "attr", "join", "tojson", "abs", "int", "float", "round", "wordcount"})
_SLOW_FILTERS = frozenset({"wordwrap", "urlize", "striptags"})


def _filter_sizes(b: _Budget, name: str, value, args, kwargs):
    """Checks what filter ``name`` would build before it runs; returns the value to filter (an iterable
    given to ``join`` is read once here)."""
    if name == "join":
        value = _items(value)
        sep = args[0] if args else kwargs.get("d", "")
        b.allow(text_size(value, b.max_size) + text_size(sep, b.max_size) * len(value), "join")
        return value
    if name in _NON_PRINTING_FILTERS:
        return value
    text = value if isinstance(value, str) else None
    if text is None:
        b.allow(text_size(value, b.max_size), f"the {name} filter's text")
        text = str(value)
    if name == "replace" and len(args) >= 2:
        b.allow(_replace_size(text, *args[:3]), "replace")
    elif name == "indent":
        width = args[0] if args else kwargs.get("width", 4)
        per_line = width if isinstance(width, int) else len(str(width))
        b.allow(len(text) + (text.count("\n") + 1) * per_line, "indent")
    elif name == "format":
        b.allow(_percent_size(b, text, kwargs or tuple(args)), "format")
    elif name in _SLOW_FILTERS and len(text) > MAX_SLOW_FILTER_CHARS:
        raise LimitExceeded(f"gave the {name} filter {len(text):,} characters (the limit is "
                             f"{MAX_SLOW_FILTER_CHARS:,})")
    elif name == "wordwrap":
        width = args[0] if args else kwargs.get("width", 79)
        wrap = args[2] if len(args) > 2 else kwargs.get("wrapstring")
        if isinstance(width, int) and width > 0:
            b.allow(len(text) + (len(text) // width + 1) * len(str(wrap or "\n")), "wordwrap")
    return value


def _bounded_filter(name: str, f):
    # jinja passes the context / environment first to the filters marked for it
    skip = 1 if getattr(f, "jinja_pass_arg", None) is not None else 0

    def bounded(*args, **kwargs):
        b = _budget()
        b.tick()
        if len(args) > skip:
            value, rest = args[skip], args[skip + 1:]
            _int_arguments(b, rest, kwargs, f"the {name} filter")
            value = _filter_sizes(b, name, value, rest, kwargs)
            args = (*args[:skip], value, *rest)
        return b.take(f(*args, **kwargs), f"the {name} filter")

    return update_wrapper(bounded, f)


def _sum(environment, iterable, attribute=None, start=0):
    """jinja's ``sum`` in linear time: summing lists (``start=[]``) with ``+`` copies the whole sum at
    every step."""
    from jinja2.filters import make_attrgetter  # start-up: jinja2 (~20 ms) only when a chat template renders
    items = _items(iterable if attribute is None else map(make_attrgetter(environment, attribute), iterable))
    if not isinstance(start, (list, tuple)):
        return sum(items, start)
    out = list(start)
    for x in items:
        if type(x) is not type(start):
            return type(start)(out) + x                 # the TypeError sum() gives
        out.extend(x)
        _budget().allow(len(out), "sum")
    return type(start)(out)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' tojson: no HTML escaping, the json.dumps options
    b = _budget()
    per_level = indent if isinstance(indent, int) and not isinstance(indent, bool) else len(str(indent or ""))
    if per_level > MAX_JSON_INDENT:
        raise LimitExceeded(f"asked tojson for an indent of {per_level:,} (the limit is {MAX_JSON_INDENT})")
    nodes = text_size(x, b.max_size)               # each item and character can grow: escapes, indents
    per_item = per_level * MAX_DATA_DEPTH + (text_size(separators) if separators is not None else 2)
    b.allow(nodes * ((12 if ensure_ascii else 6) + (per_item if indent is not None or separators else 0)), "tojson")
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message):
    import jinja2  # start-up: jinja2 (~20 ms) only when a chat template renders
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt):
    b = _budget()
    fmt = str(fmt)
    # C strftime pads to any width written in the format (%999999999Y)
    b.allow(len(fmt) * 32 + fmt.count("%") * _spec_numbers(fmt), "strftime_now()")
    return datetime.now().strftime(fmt)


class _TemplateDict:
    """``dict(...)`` without attribute access to the real type."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _CountedRange:
    """``range`` whose iteration counts loop steps (jinja's sandbox refuses ranges over 100,000 items but
    not 100,000 x 100,000 nested ones); lazy like range, so ``range(n)|length`` costs nothing."""

    def __init__(self, *args):
        self._range = args[0] if len(args) == 1 and isinstance(args[0], range) else range(*args)

    def __len__(self):
        return len(self._range)

    def __iter__(self):
        return _counted(self._range)

    def __reversed__(self):
        return _counted(reversed(self._range))

    def __getitem__(self, i):
        r = self._range[i]
        return _CountedRange(r) if isinstance(r, range) else r

    def __contains__(self, x):
        return x in self._range

    def __eq__(self, other):
        return isinstance(other, _CountedRange) and self._range == other._range

    __hash__ = None

    def __repr__(self):
        return repr(self._range)


def _counted(iterable):
    b = _budget()
    for x in iterable:
        b.step()
        yield x


class _CountedLoop:
    """What a ``for`` loop iterates: its iterable, one loop step per item; ``len`` as the iterable's (for
    ``loop.length``)."""

    __slots__ = ("iterable",)

    def __init__(self, iterable):
        self.iterable = iterable

    def __iter__(self):
        return self.iterable.__iter__() if isinstance(self.iterable, _CountedRange) else _counted(self.iterable)

    def __len__(self):
        return len(self.iterable)


def _count_loop(iterable):
    return _CountedLoop(iterable)


def _emit_text(text):
    return text


@lru_cache(maxsize=1)
def _environment():
    """The sandbox every chat template runs in (one for the process; the limits are per render)."""
    import jinja2  # start-up: jinja2 (~20 ms) only when a chat template renders
    from jinja2 import nodes  # start-up: jinja2
    from jinja2.compiler import CodeGenerator, optimizeconst  # start-up: jinja2
    from jinja2.ext import Extension, loopcontrols  # start-up: jinja2
    from jinja2.runtime import LoopContext  # start-up: jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # start-up: jinja2

    class TokenLimit(Extension):
        """Counts the tokens while the template is parsed: compile time grows with them."""

        def filter_stream(self, stream):
            for n, token in enumerate(stream, 1):
                if n > MAX_TEMPLATE_TOKENS:
                    raise LimitExceeded(f"has more than {MAX_TEMPLATE_TOKENS:,} jinja tokens (line {token.lineno})")
                yield token

    class BoundedCodeGenerator(CodeGenerator):
        """Generates the template's Python with every ``for`` loop counted, every piece of literal text
        sent through ``finalize`` (counted with the rest of the output, so a loop in a ``{% set %}`` block
        or a macro cannot pile up text unseen) and ``~`` checked before it joins."""

        def visit_Template(self, node, frame=None):
            for loop in list(node.find_all(nodes.For)):
                loop.iter = self._call("count_loop", loop.iter, loop.lineno)
            for out in list(node.find_all(nodes.Output)):
                out.nodes = [self._call("emit_text", nodes.Const(c.data), c.lineno)
                             if isinstance(c, nodes.TemplateData) else c for c in out.nodes]
            super().visit_Template(node, frame)

        def _call(self, helper: str, arg, lineno: int):
            call = nodes.Call(nodes.EnvironmentAttribute(helper), [arg], [], None, None, lineno=lineno)
            return call.set_environment(self.environment)

        @optimizeconst
        def visit_Concat(self, node, frame):
            self.write("environment.bounded_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class TemplateNamespace(jinja2.utils.Namespace):
        # no underscore attributes: nothing reaches CPython internals through a namespace
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"chat templates cannot set underscore attributes ({name!r})")

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        code_generator_class = BoundedCodeGenerator
        intercepted_binops = frozenset({"+", "*", "**", "%"})
        count_loop = staticmethod(_count_loop)
        emit_text = staticmethod(_emit_text)

        def getattr(self, obj, attribute):
            b = _RENDER.get()
            if b is not None:
                b.tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            b = _RENDER.get()
            if b is None:
                return super().getitem(obj, argument)
            b.tick()
            value = super().getitem(obj, argument)
            return b.take(value, "a slice") if isinstance(argument, slice) else value

        def call_binop(self, context, operator, left, right):
            b = _budget()
            b.tick()
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int):
                        b.allow(len(seq) * max(0, n), "'*'")
                if isinstance(left, int) and isinstance(right, int) and \
                        left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
                    raise LimitExceeded(f"computed an integer of more than {MAX_INT_BITS} bits ('*')")
            elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
                if abs(left) > 1 and max(1, left.bit_length() - 1) * right > MAX_INT_BITS:
                    raise LimitExceeded(f"computed an integer of more than {MAX_INT_BITS} bits ('**')")
            elif operator == "%" and isinstance(left, str):
                b.allow(_percent_size(b, left, right), "'%'")
            elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                b.allow(len(left) + len(right), "'+'")
            return b.take(super().call_binop(context, operator, left, right), repr(operator))

        def bounded_concat(self, parts):
            b = _budget()
            b.allow(sum(len(p) if isinstance(p, str) else text_size(p, b.max_size) for p in parts), "'~'")
            return b.take("".join([str(p) for p in parts]), "'~'")

        def wrap_str_format(self, value):
            format_ = super().wrap_str_format(value)
            if format_ is None:
                return None
            fmt, is_map = value.__self__, value.__name__ == "format_map"

            def bounded_format(*args, **kwargs):
                b = _budget()
                if is_map:
                    b.allow(_format_size(b, fmt, (), args[0] if args and isinstance(args[0], dict) else {}),
                            "format_map()")
                else:
                    b.allow(_format_size(b, fmt, args, kwargs), "format()")
                return format_(*args, **kwargs)

            return update_wrapper(bounded_format, format_)

        def call(self, context, obj, /, *args, **kwargs):
            b = _budget()
            b.tick()
            if obj is _emit_text:                   # literal text: counted as output by finalize
                return args[0]
            if isinstance(obj, LoopContext) and args:          # a recursive loop's next level
                args = (_CountedLoop(args[0]), *args[1:])
            elif isinstance(getattr(obj, "__self__", None), (str, bytes, int, float)):
                args = _str_method(b, obj, args, kwargs)
            b.depth += 1
            try:
                if b.depth > MAX_CALL_DEPTH:
                    raise LimitExceeded(f"nested calls deeper than {MAX_CALL_DEPTH} (a macro or a recursive "
                                         f"loop calling itself)")
                result = super().call(context, obj, *args, **kwargs)
            finally:
                b.depth -= 1
            return b.take(result, "a call")

    def finalize(value):
        b = _budget()
        if not isinstance(value, str):
            b.allow(text_size(value, b.max_size), "its output")
            value = str(value)
        return b.take(value, "its output")

    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, TokenLimit],
                         finalize=finalize)
    env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
    env.filters["sum"] = _bounded_filter("sum", jinja2.pass_environment(_sum))
    env.filters["tojson"] = _bounded_filter("tojson", _tojson)
    env.globals.pop("lipsum", None)         # lorem ipsum of any length: no template needs it
    env.globals["range"] = _CountedRange
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


@lru_cache(maxsize=16)
def compile_template(source: str):
    with warnings.catch_warnings():         # Python's warnings on the generated code ('int' object is not
        warnings.simplefilter("ignore", SyntaxWarning)     # subscriptable) are no business of the user's
        return _environment().from_string(source)


def render(compiled, context: dict) -> str:
    """``compiled`` (from :func:`compile_template`) rendered with ``context`` under the limits; the prompt's
    size is checked as it grows. A limit hit raises :class:`LimitExceeded`; the template's own errors
    propagate as they are."""
    budget = _Budget(*data_size(context))
    token = _RENDER.set(budget)
    parts = compiled.generate(**context)
    try:
        out, size = [], 0
        for part in parts:
            size += len(part)
            budget.allow(size, "the prompt")
            out.append(part)
        return "".join(out)
    finally:
        parts.close()
        _RENDER.reset(token)
