"""The ``orion`` command line.

    orion demo                 compile and run a bundled program on the default device, check it
    orion run PROGRAM.mil      compile a hand-written MIL file (the weight files it names; --random-weights
                               fills missing ones) and run it; outputs as a table
    orion info                 build, kernels, threads, simulator profile and compile budget
    orion constraints          the emulated ANE constraints under a chip profile
    orion doctor               verify the weight-update strategies on this machine (and cache the verdict)
    orion generate --model PATH --prompt TEXT   generate text with GPT-2/Llama checkpoints (--quantize lut4 ...)
    orion quality --model PATH --quantize Q     KL, logit correlation, top-1 and perplexity vs fp16
    orion train                train a small Llama on the bundled corpus (or your model and data)
    orion plot RUN             loss.png of a training run (train + validation loss, tokens/s)
    orion bench                the RESULTS.md benchmarks in one run: --json OUT, --compare BASELINE.json

One module per command (``orion/cli/<command>.py``: its parser and its ``cmd_<command>``). Errors have one
style: ``orion: error: <message>`` on stderr, exit 2 for a bad flag (argparse's or a check before any work),
exit 1 for an orion error (bad file, model, program) -- a traceback only with ``-v``.
"""

from __future__ import annotations

import argparse
import platform
import sys

from .. import _native
from .._version import __version__
from .bench import add_bench_parser
from .common import Parser, add_verbose_flag
from .constraints import add_constraints_parser
from .demo import add_demo_parser
from .doctor import add_doctor_parser
from .entry import run as run_command  # (orion.cli.run is the `orion run` command module)
from .fuse import add_fuse_parser
from .generate import add_generate_parser
from .info import add_info_parser
from .plot import add_plot_parser
from .quality import add_quality_parser
from .run import add_run_parser


def version_text() -> str:
    """``orion --version``: the release and what this build contains (one wheel runs on many CPUs)."""
    b = _native.build_info()
    abi = "abi3" if b["stable_abi"] else f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return (f"orion {__version__} ({platform.system()} {platform.machine()}, Python {platform.python_version()}, "
            f"{abi} build)\n"
            f"  kernels: {', '.join(b['isas'])} compiled in, {b['isa']} in use\n"
            f"  backends: {', '.join(b['backends'])} compiled in\n"
            f"  compiler: {b['compiler']}")


class _VersionAction(argparse.Action):
    # argparse's own "version" action needs the text up front; this one asks the build (a backend probe) only
    # when --version is given.
    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        if not hasattr(_native, "build_info"):
            parser.exit(1, f"orion: error: the native module {_native.__file__} is older than this orion package: "
                        "rebuild it (scripts/dev_build.sh or pip install .)\n")
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="orion", description="Compile, run and train networks on the Apple Neural "
                                "Engine or its faithful simulator.")
    p.add_argument("-v", "--verbose", action="store_true", help="log what orion does; show the traceback of an "
                   "error (also accepted after the subcommand)")
    p.add_argument("-V", "--version", action=_VersionAction, help="version, kernels and backends of this build")
    sub = p.add_subparsers(dest="command")
    from .train import add_train_parser  # circle: `python -m orion.cli.train` imports orion.cli before it runs

    add_demo_parser(sub)
    add_run_parser(sub)
    add_info_parser(sub)
    add_constraints_parser(sub)
    add_train_parser(sub)
    add_generate_parser(sub)
    add_fuse_parser(sub)
    add_quality_parser(sub)
    add_plot_parser(sub)
    add_doctor_parser(sub)
    add_bench_parser(sub)
    for sp in sub.choices.values():
        add_verbose_flag(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)
