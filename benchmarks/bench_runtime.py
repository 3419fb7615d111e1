"""Runtime overheads, side by side in one run, with their targets:

1. per-eval overhead from Python for a tiny program (z = x + y on [1, 256, 1, 64] fp16): target < 30 us;
   numpy's own ``x + y`` on the same arrays is printed beside it for scale;
2. writing new weights into the input surface of a 768x768 weights-as-inputs program (``stage``):
   target <= 1.5x a plain memcpy (``np.copyto``) of the same bytes.

    PYTHONPATH=python:BUILD python benchmarks/bench_runtime.py
"""

from __future__ import annotations

import time

import numpy as np

import orion

HEADER = ('program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
          '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
          '{"coremltools-version", "9.0"}})]\n{\n')


def median_us(fn, n=2000, repeats=7):
    """Median over `repeats` batches of the per-call time in microseconds."""
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) / n * 1e6)
    return float(np.median(per))


def tiny_program():
    t = "tensor<fp16, [1, 256, 1, 64]>"
    return orion.compile_mil(HEADER + f"    func main<ios18>({t} x, {t} y) {{\n"
                             f"        {t} z = add(x = x, y = y)[name = string(\"z\")];\n    }} -> (z);\n}}\n")


def dynamic_768():
    w, x, y = "tensor<fp16, [1, 1, 768, 768]>", "tensor<fp16, [1, 1, 768, 64]>", "tensor<fp16, [1, 1, 768, 64]>"
    return orion.compile_mil(HEADER + f"    func main<ios18>({w} w, {x} x) {{\n"
                             "        bool f = const()[name = string(\"f\"), val = bool(false)];\n"
                             f"        {y} y = matmul(transpose_x = f, transpose_y = f, x = w, y = x)[name = string(\"y\")];\n"
                             "    } -> (y);\n}\n")


def main():
    rng = np.random.default_rng(0)
    prog = tiny_program()
    x = rng.standard_normal((1, 256, 1, 64)).astype(np.float16)
    y = rng.standard_normal((1, 256, 1, 64)).astype(np.float16)
    call = median_us(lambda: prog(x=x, y=y))
    xs, ys = prog.input_surface("x").view("fp16", [1, 256, 1, 64]), prog.input_surface("y").view("fp16", [1, 256, 1, 64])
    xs[...] = x
    ys[...] = y
    raw = median_us(prog.eval)
    np_add = median_us(lambda: x + y)
    print("1. per-eval overhead, z = x + y on [1, 256, 1, 64] fp16 (median us per call)")
    print(f"   prog(x=, y=) with copies in/out : {call:8.2f} us   (target < 30 us)")
    print(f"   prog.eval() on bound surfaces   : {raw:8.2f} us")
    print(f"   numpy x + y (for scale)         : {np_add:8.2f} us")

    dyn = dynamic_768()
    w = rng.standard_normal((1, 1, 768, 768)).astype(np.float16)
    dst = np.empty_like(w)
    stage = median_us(lambda: dyn.stage("w", w), n=500)
    memcpy = median_us(lambda: np.copyto(dst, w), n=500)
    print(f"2. weight write, 768x768 fp16 ({w.nbytes} bytes) into a weights-as-inputs surface")
    print(f"   prog.stage('w', W)              : {stage:8.2f} us")
    print(f"   np.copyto (memcpy) same bytes   : {memcpy:8.2f} us")
    print(f"   ratio                           : {stage / memcpy:8.2f}x   (target <= 1.5x)")
    print(f"   counters: {orion.counters()}")


if __name__ == "__main__":
    main()
