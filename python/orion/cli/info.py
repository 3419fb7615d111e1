"""``orion info``: build, kernels, threads, simulator profile and compile budget; with ``--model``, the
model's compile plan and memory plan."""

from __future__ import annotations

from .. import __version__, _native, models
from ..models.quantize import MODEL_SCHEMES
from ..native.runtime import ane_control, devices
from ..native.sim import compile_budget, get_profile
from .common import UsageError


def add_info_parser(sub) -> None:
    i = sub.add_parser("info", help="build and simulator information; with --model, the model's compile plan")
    i.add_argument("--model", default=None,
                   help="a model path or ORG/NAME: print how many compiles each use of it costs and its memory "
                        "by kind (no compiling)")
    i.add_argument("--quantize", default=None, choices=MODEL_SCHEMES,
                   help="with --model: the plan with compressed weights")
    i.set_defaults(func=cmd_info)


def cmd_info(args) -> int:
    if args.quantize and not args.model:
        raise UsageError(f"--quantize {args.quantize} is only used with --model (the plan of that model)")

    print(f"orion {__version__}")
    print(f"  native module: {_native.__file__}")
    if hasattr(_native, "kernel_isa"):
        print(f"  simulator kernels: {_native.kernel_isa()}, {_native.num_threads()} threads")
    print(f"  simulator profile: {get_profile()}")
    used, limit = compile_budget()
    print(f"  compile budget: {used} used of {limit}")

    for d in devices():
        state = "available" if d["available"] else f"unavailable ({d['reason']})"
        print(f"  backend {d['name']}: {state}")
        for route, status in (d.get("routes") or {}).items():
            print(f"    route {route}: {status}")
        if d["name"] == "ane":  # optional device-info probes that failed: reported, never a refusal

            for w in (ane_control("info") or {}).get("warnings") or []:
                print(f"    warning: {w}")
    if args.model:
        _print_plan(args)
    return 0


def _print_plan(args) -> None:
    """The compile plan of ``--model`` (C05: ~119 compiles per process), found without compiling."""
    from ..models.memory import PLAN_NEW, PLAN_PROMPT, memory_plan  # start-up: only for `orion info --model`
    m = models.load(args.model, quantize=args.quantize)
    try:
        p = m.compile_plan()
        with m.exclusive():
            mem = memory_plan(m)
    finally:
        m.release()
    c = m.config
    print(f"model {args.model}: {c.family}, {c.n_layers} layers, d={c.d_model}"
          + (f", {args.quantize} weights" if args.quantize else ""))
    how = ("one program for every middle stage, weights as inputs" if p["layers"] == "shared"
           else "a program per stage, weights baked")
    print(f"  layers: {p['layers']} ({how})")
    print(f"  compiles per program set: {p['per_set']}")
    print(f"  a first generation (prefill + decode sets): {p['generate']}")
    print(f"  generate_batch adds: {p['batch']}")
    left = p["budget_left"]
    print(f"  process budget left: {left if left is not None else 'unknown'}")
    _print_memory(mem, PLAN_PROMPT, PLAN_NEW)


def _print_memory(mem: dict, n_prompt: int, n_new: int) -> None:
    """The memory plan by kind, as Model.memory() reports it after a generation; estimates marked."""
    def mb(n: int) -> str:
        return f"{n / 2**20:,.1f} MB"
    sets = ", ".join(f"S={s} T={t}" for s, t in mem["sets"])
    print(f"  memory by kind, as Model.memory() counts it (~: estimated for a first generation of {n_prompt} "
          f"prompt + {n_new} new tokens, program sets {sets}):")
    print(f"    host weights as stored: {mb(mem['weights'])}"
          + (f" ({mb(mem['weights_compressed'])} of them compressed)" if mem["weights_compressed"] else "")
          + f"; resident once the programs hold them: ~{mb(mem['weights_resident'])}")
    for kind, label in (("layer_weight_surfaces", "shared layers' weight surfaces"),
                        ("layer_weights_streamed", "shared layers' streamed compressed weights"), ("kv_cache", "KV cache"),
                        ("program_surfaces", "program surfaces"), ("classifier_panels", "CPU classifier panels")):
        print(f"    {label}: {'~' if kind in mem['estimated'] else ''}{mb(mem[kind])}")
    print(f"    counted: ~{mb(mem['counted'])}")
    print("    not planned: the native programs' baked weights and packed panels, scratch, the interpreter "
          "(Model.memory()'s 'other')")
