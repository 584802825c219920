"""The installed Python package (make install PREFIX=...): it finds
PREFIX/bin/shardc and runs a function.  tests/run-tests' install step:
    PYTHONPATH=PREFIX/lib/python3.X/dist-packages python3 tests/python/installed.py PREFIX"""
import os
import sys

import numpy as np
import shardc

prefix = os.path.realpath(sys.argv[1])
assert os.path.realpath(shardc.__file__).startswith(prefix + "/"), shardc.__file__
assert os.path.realpath(shardc.shardc_binary()) == os.path.join(prefix, "bin", "shardc"), shardc.shardc_binary()
f = shardc.compile(os.path.join(prefix, "share", "shardc", "samples", "mlp.tdsl"), fn="mlp",
                   const={"B": 8, "D": 4, "F": 16})
sig = f.signature["params"]
r = np.random.default_rng(0)
args = [r.standard_normal(shape).astype(np.float32) for _, _, shape in sig]
got = f(*args)
assert got.shape == (8, 4) and np.isfinite(got).all()
print("installed package: %s on mesh %s, result %s" % (f.name, f.mesh, got.shape))
