"""The native layer: Python wrappers over the C++ extension ``orion._native`` (the simulator and the ANE backend).

``runtime`` (compile MIL text + weight files into a loaded ``Program``, devices, counters), ``sim`` (chip
profiles, constraints, the op registry, compile budget, timing), ``mil`` (MIL text parse/format), ``blob``
(MILBlob v2 files), ``safetensors`` (the tensor file format), ``cost_table`` (a program's cost model per op),
``weight_updates`` (putting new weights onto a loaded program, and the verdict of which ways work here).
Nothing here knows graphs or models: the IR, the compiler and the models sit above.
"""
