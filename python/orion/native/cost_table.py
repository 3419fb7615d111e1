"""``Program.profile()``: the simulator's cost model per op, as a table - the closest thing to a per-kernel
timeline off the device. Rows are the executed ops in program order plus one ``dispatch`` row (the fixed
per-eval cost, C41); their ``est_ms`` sum to the program's ``cost["est_ms"]``. Modelled, not measured: the
model and its numbers are in ``src/orion_native/sim/cost.cpp``."""

from __future__ import annotations

from .. import _html
from ..errors import OrionError

COLUMNS = ("name", "op", "unit", "flops", "bytes", "est_ms")


class CostTable(list):
    """A list of row dicts (``name``, ``op``, ``unit`` = conv | matmul | other | dispatch, ``flops``,
    ``bytes`` = operands + result as stored, ``est_ms``) with totals, a text table and ``_repr_html_``."""

    def __init__(self, rows, *, chip: str | None = None, title: str = "orion.Program.profile()"):
        super().__init__(rows)
        self.chip = chip
        self.title = title

    @classmethod
    def from_cost(cls, cost: dict, **kw) -> "CostTable":
        if "ops" not in cost:
            raise OrionError("the native module has no per-op cost rows (built before Program.profile existed): "
                             "rebuild it (scripts/dev_build.sh or pip install .)")
        rows = [{k: r[k] for k in COLUMNS} for r in cost["ops"]]
        rows.append({"name": "(dispatch)", "op": "", "unit": "dispatch", "flops": 0.0, "bytes": 0,
                     "est_ms": float(cost["dispatch_ms"])})
        return cls(rows, **kw)

    @property
    def total_ms(self) -> float:
        return sum(r["est_ms"] for r in self)

    @property
    def total_flops(self) -> float:
        return sum(r["flops"] for r in self)

    def top(self, n: int = 10) -> "CostTable":
        """The ``n`` most expensive rows."""
        return CostTable(sorted(self, key=lambda r: -r["est_ms"])[:n], chip=self.chip, title=self.title)

    def _cells(self):
        total = self.total_ms or 1.0
        for r in self:
            yield (r["name"], r["op"], r["unit"], f"{r['flops']:,.0f}", f"{r['bytes']:,}", f"{r['est_ms']:.4f}",
                   f"{100 * r['est_ms'] / total:.1f}")

    def __str__(self) -> str:
        head = ("name", "op", "unit", "flops", "bytes", "est ms", "%")
        rows = [head] + list(self._cells())
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
        lines = ["  ".join(str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in rows]
        lines.append(f"total {self.total_ms:.4f} ms modelled per eval ({self.total_flops:,.0f} flops)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        detail = f"chip profile {self.chip}, " if self.chip else ""
        return (_html.title(self.title, None, f"{detail}{len(self)} rows, {self.total_ms:.4f} ms modelled per eval "
                                              f"(cost model, not a measurement)")
                + _html.table(("name", "op", "unit", "flops", "bytes", "est ms", "%"), self._cells(),
                              code_cols=(0, 1)))
