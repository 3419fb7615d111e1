"""Chat templates (``chat_template`` of tokenizer_config.json / ``chat_template.jinja``) rendered with
jinja2 the way transformers' ``apply_chat_template`` renders them: an ``ImmutableSandboxedEnvironment``
(templates are untrusted code from the Hub) with ``trim_blocks`` / ``lstrip_blocks`` and loop controls,
``raise_exception``, ``strftime_now``, a ``tojson`` that does not escape HTML, a sandboxed ``dict`` /
``namespace``; the context holds ``messages``, ``tools``, ``documents``, ``add_generation_prompt`` and
the named special tokens (``bos_token``, ``eos_token``, ...), caller keywords winning.

Messages are normalised as transformers does: keys whose value is None are dropped and reasoning given
as ``thinking`` / ``reasoning`` is also offered as ``reasoning_content`` (and vice versa as ``thinking``).

Templates run in the bounded sandbox of :mod:`.template_sandbox` (limits on time, sizes, loops and
nesting; every limit hit is a :class:`ChatTemplateError`).
"""

from __future__ import annotations

from ...errors import ModelFormatError
from .template_sandbox import MAX_DATA_DEPTH, MAX_TEMPLATE_CHARS, LimitExceeded, compile_template, render

__all__ = ["ChatTemplate", "ChatTemplateError", "chat_prompt_ids", "end_of_turn_ids"]

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(ModelFormatError):
    """A chat template that is missing, does not compile, fails to render (``raise_exception``) or
    exceeds one of the limits of :mod:`.template_sandbox`."""


def _plain(value, depth: int = 0):
    """Only JSON-like data reaches the sandbox (rich objects become inert placeholders)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if depth >= MAX_DATA_DEPTH:
        raise ChatTemplateError(f"the messages / tools / documents are nested deeper than {MAX_DATA_DEPTH} levels "
                                f"(or contain themselves)")
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {_plain(k, depth + 1): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v, depth + 1) for v in value)
    if hasattr(value, "item") and callable(value.item):       # numpy scalars
        return _plain(value.item(), depth + 1)
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
            if not all(isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)
                       for t in template):
                raise ChatTemplateError(f"{source}: chat_template must be a string or a list of "
                                        f"{{'name', 'template'}} objects with string values")
            template = {t["name"]: t["template"] for t in template}
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
        import jinja2  # start-up: jinja2 (~20 ms) only when a chat template renders
        source = self._pick(tools)
        if len(source) > MAX_TEMPLATE_CHARS:
            raise ChatTemplateError(f"{self.source}: the chat template has {len(source):,} characters (the limit is "
                                    f"{MAX_TEMPLATE_CHARS:,}); fix or replace chat_template")
        try:
            compiled = compile_template(source)
        except LimitExceeded as e:
            raise ChatTemplateError(f"{self.source}: the chat template {e} (the limit keeps compiling well within "
                                    f"a second); fix or replace chat_template") from None
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"{self.source}: the chat template does not compile (line {e.lineno}: "
                                    f"{_short(e.message)}); fix or replace chat_template") from None
        except Exception as e:  # noqa: BLE001 - jinja's parser and Python's compiler raise others on hostile
            # source: RecursionError (deep nesting), SyntaxError (too many statically nested blocks), ...
            raise ChatTemplateError(f"{self.source}: the chat template does not compile ({type(e).__name__}: "
                                    f"{_short(e)}); fix or replace chat_template") from None
        ctx = {**self.special_tokens, **_plain(kwargs),
               "messages": _messages(messages), "tools": _plain(tools), "documents": _plain(documents),
               "add_generation_prompt": bool(add_generation_prompt)}
        try:
            text = render(compiled, ctx)
        except LimitExceeded as e:
            raise ChatTemplateError(f"{self.source}: the chat template exceeded a limit rendering these messages: "
                                    f"it {e}; fix or replace chat_template") from None
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"{self.source}: the chat template failed to render these messages: "
                                    f"{_short(e)}") from None
        except Exception as e:  # noqa: BLE001 - the template is a stranger's program: any failure is its own
            raise ChatTemplateError(f"{self.source}: the chat template failed to render these messages "
                                    f"({type(e).__name__}: {_short(e)})") from None
        try:
            text.encode("utf-8")            # what the tokenizer needs: no lone surrogates ('\ud800' in the template)
        except UnicodeEncodeError as e:
            raise ChatTemplateError(f"{self.source}: the chat template wrote text that is not valid Unicode (a lone "
                                    f"surrogate at character {e.start}) for these messages") from None
        return text


def _short(e) -> str:
    """An error's text for a message (a template can raise_exception with a megabyte of it)."""
    text = str(e)
    return text if len(text) <= 300 else text[:300] + "..."


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
