"""Chat templates (``chat_template`` of tokenizer_config.json / ``chat_template.jinja``) rendered with
jinja2 the way transformers' ``apply_chat_template`` renders them: an ``ImmutableSandboxedEnvironment``
(templates are untrusted code from the Hub) with ``trim_blocks`` / ``lstrip_blocks`` and loop controls,
``raise_exception``, ``strftime_now``, a ``tojson`` that does not escape HTML, a sandboxed ``dict`` /
``namespace``; the context holds ``messages``, ``tools``, ``documents``, ``add_generation_prompt`` and
the named special tokens (``bos_token``, ``eos_token``, ...), caller keywords winning.

Messages are normalised as transformers does: keys whose value is None are dropped and reasoning given
as ``thinking`` / ``reasoning`` is also offered as ``reasoning_content`` (and vice versa as ``thinking``).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

from ...errors import ModelFormatError

__all__ = ["ChatTemplateError", "ChatTemplate", "chat_prompt_ids", "end_of_turn_ids"]

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(ModelFormatError):
    """A chat template that is missing, does not compile or fails to render (``raise_exception``)."""


@lru_cache(maxsize=16)
def _compile(source: str):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class TemplateDict:                      # dict(...) without attribute access to the real type
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

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

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(source)


def _plain(value):
    """Only JSON-like data reaches the sandbox (rich objects become inert placeholders)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "item") and callable(value.item):       # numpy scalars
        return _plain(value.item())
    return f"<{type(value).__name__}>"


def _messages(messages) -> list[dict]:
    if isinstance(messages, dict) or not isinstance(messages, (list, tuple)) or not messages:
        raise ChatTemplateError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise ChatTemplateError(f"chat messages must be dicts, got {m!r}")
        m = {k: v for k, v in _plain(m).items() if v is not None}
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


class ChatTemplate:
    """``template``: a jinja string or transformers' list of ``{"name", "template"}`` (the ``default``
    one is used, ``tool_use`` when tools are given); ``source``: the file it came from (named in errors);
    ``special_tokens``: ``{"bos_token": "<s>", ...}`` put in the context."""

    def __init__(self, template, source: str, special_tokens: dict | None = None):
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        if isinstance(template, list):
            try:
                template = {t["name"]: t["template"] for t in template}
            except (TypeError, KeyError):
                raise ChatTemplateError(f"{source}: chat_template must be a string or a list of "
                                        f"{{'name', 'template'}} objects") from None
        if not isinstance(template, (str, dict)):
            raise ChatTemplateError(f"{source}: chat_template must be a string, got {type(template).__name__}")
        self.template = template

    def _pick(self, tools) -> str:
        t = self.template
        if isinstance(t, str):
            return t
        if tools is not None and "tool_use" in t:
            return t["tool_use"]
        if "default" in t:
            return t["default"]
        raise ChatTemplateError(f"{self.source}: several chat templates ({', '.join(sorted(t))}) and none named "
                                f"'default'")

    def render(self, messages, add_generation_prompt: bool = True, tools=None, documents=None, **kwargs) -> str:
        """The prompt text for ``messages`` (tokenize it without special tokens: the template writes them)."""
        import jinja2
        source = self._pick(tools)
        try:
            compiled = _compile(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"{self.source}: the chat template does not compile (line {e.lineno}: "
                                    f"{e.message}); fix or replace chat_template") from None
        ctx = {**self.special_tokens, **_plain(kwargs)}
        try:
            return compiled.render(messages=_messages(messages), tools=_plain(tools), documents=_plain(documents),
                                   add_generation_prompt=bool(add_generation_prompt), **ctx)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"{self.source}: the chat template failed to render these messages: {e}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise ChatTemplateError(f"{self.source}: the chat template failed to render these messages "
                                    f"({type(e).__name__}: {e})") from None


def chat_prompt_ids(tokenizer, messages, add_generation_prompt: bool = True, **kwargs) -> list[int]:
    """``messages`` rendered with ``tokenizer``'s chat template and encoded without added special tokens
    (the template writes them), as transformers' ``apply_chat_template(..., tokenize=True)``."""
    if tokenizer is None:
        raise ChatTemplateError("chat needs the model's tokenizer (tokenizer.json + tokenizer_config.json); none is "
                                "loaded - pass tokenizer=PATH")
    found = getattr(tokenizer, "chat_template", None)
    if not found:
        where = getattr(tokenizer, "config_path", None) or getattr(tokenizer, "path", None)
        raise ChatTemplateError(f"{where or 'the tokenizer'}: no chat template (tokenizer_config.json 'chat_template' "
                                f"or chat_template.jinja); chat needs an instruct/chat model's tokenizer - use a "
                                f"plain prompt for base models")
    template, source = found
    special = dict(getattr(tokenizer, "special_tokens", {}) or {})
    text = ChatTemplate(template, source, special).render(messages, add_generation_prompt, **kwargs)
    return list(tokenizer.encode(text))


_MARK = "orion-end-of-turn-probe"


def end_of_turn_ids(tokenizer) -> list[int]:
    """The special token the chat template writes right after an assistant answer (<|eot_id|>,
    <|im_end|>, <end_of_turn>, <|end|>, </s>): found by rendering a two-turn conversation, so chat stops
    there even when generation_config.json does not list it (base models that ship a template). []
    when there is no template, it refuses the probe, or no special token follows the answer."""
    found = getattr(tokenizer, "chat_template", None)
    if not found or not hasattr(tokenizer, "special_ids"):
        return []
    template, source = found
    probe = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARK}]
    try:
        text = ChatTemplate(template, source, getattr(tokenizer, "special_tokens", {})).render(probe, False)
    except ChatTemplateError:        # e.g. templates that raise_exception on roles they do not expect
        return []
    if _MARK not in text:
        return []
    after = tokenizer.encode(text[text.rindex(_MARK) + len(_MARK):])
    special = tokenizer.special_ids
    for t in after[:2]:               # allow one whitespace token between the answer and its end marker
        if t in special:
            return [t]
    return []
