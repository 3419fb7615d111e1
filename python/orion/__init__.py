"""orion: compile, run and train neural networks on Apple's Neural Engine (or its faithful simulator)."""

import importlib
import sys
from pkgutil import extend_path

# Lets a development build (scripts/dev_build.sh) provide orion/_native from its build folder.
__path__ = extend_path(__path__, __name__)

from .errors import *  # noqa: E402,F401,F403
from .errors import __all__ as _error_names  # noqa: E402
# orion.sim / orion.mil / orion.blob / orion.weight_updates: the native wrappers under their public names, as
# attributes and for `import orion.sim` / `from orion.sim import timing` (registered modules, not files)
from .native import blob, mil, sim, weight_updates  # noqa: E402

for _m in (blob, mil, sim, weight_updates):
    sys.modules.setdefault(f"{__name__}.{_m.__name__.rsplit('.', 1)[1]}", _m)
from .native.runtime import IOSpec, Program, compile_mil, counters, devices, reset_counters  # noqa: E402
from .compiler import CompiledProgram, compile, load, lower  # noqa: E402
from .ir import Graph, GraphError, ops  # noqa: E402
from .compiler.passes import CompileWarning, default_pipeline  # noqa: E402
from ._version import __version__  # noqa: E402,F401  (the one place it lives: orion/_version.py)

__all__ = list(_error_names) + [
    "sim", "mil", "blob", "weight_updates", "IOSpec", "Program", "compile_mil", "counters", "devices", "reset_counters",
    "compile", "lower", "CompiledProgram", "load", "Graph", "GraphError", "ops", "CompileWarning", "default_pipeline", "doctor",
]


def __getattr__(name):
    # orion.models / orion.train / orion.lora load on first use: they pull in tokenizers and training code that a
    # plain compile/run session never needs; so does orion.doctor(), the `orion doctor` command's module (the
    # command line's package imports every command).
    if name in ("models", "train", "lora"):
        return importlib.import_module(f".{name}", __name__)
    if name == "doctor":
        return importlib.import_module(".cli.doctor", __name__)
    raise AttributeError(f"module 'orion' has no attribute {name!r}")
