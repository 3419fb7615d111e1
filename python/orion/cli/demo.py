"""``orion demo``: a bundled program (RMSNorm over channels, then a 1x1-conv linear layer, fp16 I/O)
compiled from MIL text + a MILBlob weight file, run on the default device and checked against a
float64 numpy reference. Shows the whole low-level path in one screen."""

from __future__ import annotations

import sys
import time

import numpy as np

from ..native.blob import write_blob_file
from ..native.runtime import compile_mil
from ..native.sim import Profile
from .common import add_device_flags, positive_int, profile


def add_demo_parser(sub) -> None:
    d = sub.add_parser("demo", help="compile and run a bundled RMSNorm + linear program and check it")
    add_device_flags(d)
    d.add_argument("--dim", type=positive_int, default=768, help="channels of the input (the linear maps dim -> 4 dim)")
    d.add_argument("--seq", type=positive_int, default=256, help="sequence length (positions)")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    return run_demo(device=args.device, profile=profile(args), seq=args.seq, dim=args.dim, out=sys.stdout)


_HEADER = ('program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
           '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
           '{"coremltools-version", "9.0"}})]\n{\n')


def demo_mil(dim: int, seq: int, out_dim: int) -> str:
    x, h, y = f"tensor<fp16, [1, {dim}, 1, {seq}]>", f"tensor<fp16, [1, 1, 1, {seq}]>", f"tensor<fp16, [1, {out_dim}, 1, {seq}]>"
    inv_sqrt_d = float(np.float16(1.0 / np.sqrt(dim)))
    return _HEADER + "\n".join([
        f"    func main<ios18>({x} x) {{",
        # Scale before squaring: the plain fp16 sum of squares overflows once dim * rms^2 > 65504.
        f'        fp16 s = const()[name = string("s"), val = fp16({inv_sqrt_d!r})];',
        f'        {x} xs = mul(x = x, y = s)[name = string("xs")];',
        f'        {x} sq = mul(x = xs, y = xs)[name = string("sq")];',
        '        tensor<int32, [1]> ax = const()[name = string("ax"), val = tensor<int32, [1]>([1])];',
        '        bool kd = const()[name = string("kd"), val = bool(true)];',
        f'        {h} ms = reduce_sum(axes = ax, keep_dims = kd, x = sq)[name = string("ms")];',
        '        fp16 eps = const()[name = string("eps"), val = fp16(0.00001)];',
        f'        {h} mse = add(x = ms, y = eps)[name = string("mse")];',
        '        fp16 nh = const()[name = string("nh"), val = fp16(-0.5)];',
        f'        {h} r = pow(x = mse, y = nh)[name = string("r")];',
        f'        {x} xn = mul(x = x, y = r)[name = string("xn")];',
        f'        tensor<fp16, [1, {dim}, 1, 1]> g = const()[name = string("g"), val = tensor<fp16, [1, {dim}, 1, 1]>'
        '(BLOBFILE(path = string("@model_path/weights/demo.bin"), offset = uint64(64)))];',
        f'        {x} xg = mul(x = xn, y = g)[name = string("xg")];',
        '        string pt = const()[name = string("pt"), val = string("valid")];',
        '        tensor<int32, [2]> st = const()[name = string("st"), val = tensor<int32, [2]>([1, 1])];',
        '        tensor<int32, [4]> pd = const()[name = string("pd"), val = tensor<int32, [4]>([0, 0, 0, 0])];',
        '        tensor<int32, [2]> dl = const()[name = string("dl"), val = tensor<int32, [2]>([1, 1])];',
        '        int32 gr = const()[name = string("gr"), val = int32(1)];',
        f'        tensor<fp16, [{out_dim}, {dim}, 1, 1]> w = const()[name = string("w"), val = tensor<fp16, [{out_dim}, {dim}, 1, 1]>'
        '(BLOBFILE(path = string("@model_path/weights/demo.bin"), offset = uint64(OFFSET_W)))];',
        f'        {y} y = conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = st, weight = w, x = xg)'
        '[name = string("y")];',
        "    } -> (y);",
        "}",
    ]) + "\n"


def run_demo(device: str = "auto", profile: Profile | None = None, seq: int = 256, dim: int = 768, out=None) -> int:
    out_dim = dim * 4
    rng = np.random.default_rng(0)
    gamma = (1 + 0.1 * rng.standard_normal((1, dim, 1, 1))).astype(np.float16)
    w = (rng.standard_normal((out_dim, dim, 1, 1)) / np.sqrt(dim)).astype(np.float16)
    blob, offsets = write_blob_file([gamma, w])  # one multi-blob file holds every weight (C18)
    text = demo_mil(dim, seq, out_dim).replace("OFFSET_W", str(offsets[1]))
    t0 = time.perf_counter()
    prog = compile_mil(text, {"@model_path/weights/demo.bin": blob}, device=device, profile=profile)
    t_compile = time.perf_counter() - t0
    x = rng.standard_normal((1, dim, 1, seq)).astype(np.float16)
    y = prog(x=x)["y"]
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        prog(x=x)
        times.append(time.perf_counter() - t0)
    xd = x[0, :, 0, :].astype(np.float64)
    xn = xd / np.sqrt((xd ** 2).mean(axis=0, keepdims=True) + 1e-5) * gamma[0, :, 0, :]
    ref = w[:, :, 0, 0].astype(np.float64) @ xn
    err = np.abs(y[0, :, 0, :].astype(np.float64) - ref)
    rel = float(err.max() / np.abs(ref).max())
    ok = np.isfinite(y).all() and rel < 2e-2
    p = print if out is None else (lambda *a: print(*a, file=out))
    p(f"orion demo: RMSNorm({dim}) -> linear {dim}->{out_dim} over S={seq}, fp16, on {prog.device}")
    p(f"  {prog}")
    p(f"  compile {t_compile * 1e3:.1f} ms; eval median {np.median(times) * 1e3:.2f} ms "
      f"({2 * dim * out_dim * seq / np.median(times) / 1e9:.1f} GFLOP/s); modelled ANE time {prog.cost['est_ms']:.3f} ms")
    p(f"  max |error| vs float64 reference: {err.max():.4g} ({rel:.2%} of max |y|) -> {'OK' if ok else 'MISMATCH'}")
    prog.release()
    return 0 if ok else 1
