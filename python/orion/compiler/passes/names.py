"""Name uniquing (C40) and I/O naming (C03/C13).

Every SSA value and every helper const (the named consts carrying non-tensor operands, C15) gets a
unique MIL identifier. Program inputs and outputs are named first, from the user's names: lower-case,
``[a-z0-9_]`` only. The ANE binds surfaces in alphabetical order of those names, and nobody knows which
collation it uses, so the names of each direction must sort identically byte-wise, case-folded down
and case-folded up (``_`` sits between the upper- and lower-case letters in ASCII); if they do not,
they get zero-padded index prefixes (``i00_...``, ``o00_...``) that make every collation agree.
Internal values keep their hints (``name=``) or ``<op>_<n>``; helper consts are ``<value>_<param>``.
"""

from __future__ import annotations

import re

from ...ir.graph import Graph
from ...ir.ops import OPS
from .context import CompileContext

_BAD = re.compile(r"[^A-Za-z0-9_]")


def sanitize(name: str, lower: bool) -> str:
    s = _BAD.sub("_", name.lower() if lower else name) or "v"
    return s if not s[0].isdigit() else f"v{s}"


def collation_consistent(names) -> bool:
    names = list(names)
    a = sorted(names)
    return a == sorted(names, key=str.lower) == sorted(names, key=str.upper)


class NameTable:
    def __init__(self):
        self.used: set[str] = set()

    def take(self, stem: str) -> str:
        name, k = stem, 1
        while name in self.used:
            name, k = f"{stem}_{k}", k + 1
        self.used.add(name)
        return name


def _io_names(keys: list[str], prefix: str, table: NameTable) -> dict[str, str]:
    names = {}
    local = NameTable()
    local.used = set(table.used)
    for k in keys:
        names[k] = local.take(sanitize(k, lower=True))
    if not collation_consistent(names.values()):
        width = max(2, len(str(len(keys) - 1)))
        order = sorted(keys, key=lambda k: names[k])
        names = {k: f"{prefix}{i:0{width}d}_{sanitize(k, lower=True)}" for i, k in enumerate(order)}
    for n in names.values():
        table.used.add(n)
    return names


def run(graph: Graph, ctx: CompileContext) -> None:
    table = NameTable()
    in_names = _io_names(list(graph.inputs), "i", table)
    out_names = _io_names(list(graph.outputs), "o", table)
    for key, v in graph.inputs.items():
        v.mil_name = in_names[key]
    for key, v in graph.outputs.items():
        v.mil_name = out_names[key]
    for b in ctx.io.inputs.values():
        b.mil_name = in_names[b.key]
    for ob in ctx.io.outputs.values():
        for p in ob.parts:
            p.mil_name = out_names[p.key]
    attr_names: dict[tuple[int, str], str] = {}
    for node in graph.nodes:
        for v in node.outputs:
            if v.mil_name is not None and (v in graph.inputs.values() or v in graph.outputs.values()):
                continue
            stem = sanitize(v.name, lower=False) if v.name else node.op
            v.mil_name = table.take(stem)
    # helper consts after all values, so a value never loses its name to a helper
    for node in graph.nodes:
        d = OPS[node.op]
        for ad in d.attrs:
            if ad.mil and node.attrs[ad.name] is not None:
                attr_names[(node.id, ad.name)] = table.take(f"{node.out.mil_name}_{ad.name}")
    ctx.attr_names = attr_names
