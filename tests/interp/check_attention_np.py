#!/usr/bin/python3
"""The NumPy attention gradients of tests/interp/oracles.py (attention_np,
the oracle of tests/interp/progs/attention.tdsl's g_causal and g_cross)
against central differences in f64 at a small size, with a mask and a
causal one: an oracle that is itself wrong would pass a wrong compiler.
Prints "N passed, N failed"."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracles import attention_np  # noqa: E402


def central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = f()
        x[i] = old - h
        down = f()
        x[i] = old
        g[i] = (up - down) / (2 * h)
    return g


def main():
    rng = np.random.default_rng(3)
    passed = failed = 0
    for causal in (False, True):
        s, t = (5, 5) if causal else (5, 7)
        args = {"x": rng.standard_normal((2, s, 3)), "y": rng.standard_normal((2, t, 3)),
                "wq": rng.standard_normal((3, 2, 4)), "wk": rng.standard_normal((3, 2, 4)),
                "wv": rng.standard_normal((3, 2, 3)), "r": rng.standard_normal((2, s, 2, 3))}
        if causal:
            args["y"] = args["x"]
        mask = (np.where(np.arange(t)[None, :] > np.arange(s)[:, None], -1e9, 0.0) if causal
                else rng.uniform(-1, 1, (s, t)))
        _, g = attention_np(args["x"], args["y"], args["wq"], args["wk"], args["wv"], mask, 0.7, args["r"])
        names = ["wq", "wk", "wv", "mask"] + ([] if causal else ["x", "y"])
        for name in names:
            x = mask if name == "mask" else args[name]
            want = central(lambda: attention_np(args["x"], args["y"], args["wq"], args["wk"], args["wv"], mask, 0.7,
                                                args["r"])[0], x)
            err = np.abs(g[name] - want).max() / max(1.0, np.abs(want).max())
            ok = err < 1e-6
            passed, failed = passed + ok, failed + (not ok)
            print("%s %s d/d%s: %.1e" % ("PASS" if ok else "FAIL", "causal" if causal else "masked", name, err))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
