"""shardc from Python (docs/python.md).

    import numpy as np, shardc
    step = shardc.compile("samples/train_mlp.tdsl", fn="sgd_dp")
    loss, p, v = step(x, y, p, v)        # NumPy arrays in, NumPy arrays out

`compile` builds the function with `shardc build --shared` (through shardc's
build cache) and loads the shared library with ctypes; the callable keeps a
session (lib/shardc_session.h): the devices, their buffers and blocks stay
alive between calls.  Needs only the standard library and NumPy.
"""
from ._api import CompileError, Function, compile, shardc_binary

__all__ = ["CompileError", "Function", "compile", "shardc_binary"]
