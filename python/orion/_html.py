"""HTML for the notebook reprs (``_repr_html_``): small tables whose every cell is escaped, so names a user
chose (graph, tensor, model, folder names) can never inject markup into a notebook."""

from __future__ import annotations

import html
from typing import Iterable, Sequence


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence], *, code_cols: Sequence[int] = ()) -> str:
    """A table; the cells of ``code_cols`` in monospace. Every header and cell is escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)       # notebooks style plain tables themselves
    body = []
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            text = esc(c)
            cells.append("<td>" + (f"<code>{text}</code>" if i in code_cols else text) + "</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table><tr>{head}</tr>{"".join(body)}</table>'


def title(kind: str, name=None, detail: str = "") -> str:
    """``<b>kind</b> <code>name</code> detail`` (name and detail escaped)."""
    out = f"<b>{esc(kind)}</b>"
    if name is not None:
        out += f" <code>{esc(name)}</code>"
    if detail:
        out += f" {esc(detail)}"
    return f"<div>{out}</div>"


def items(pairs: Iterable[tuple[str, object]]) -> str:
    """A two-column key/value table."""
    return table(("", ""), ((k, v) for k, v in pairs))


def notes(lines: Sequence[str], heading: str = "notes") -> str:
    if not lines:
        return ""
    return f"<div>{esc(heading)}:</div><ul>" + "".join(f"<li>{esc(n)}</li>" for n in lines) + "</ul>"


def fold(summary: str, body: str, open_: bool = False) -> str:
    """A collapsible block (long node lists); ``summary`` is escaped, ``body`` is HTML built here."""
    return f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>{body}</details>"
