#!/usr/bin/python3
"""A training step called N times from a Python loop (python/shardc)
against `shardc run --steps N` of the same fn (bench/report.py's (j);
docs/python.md).

Both are timed as the difference of two lengths, N + W steps less W, so
that neither's start (building, the world, reading the inputs) counts: the
Python loop by time.perf_counter around its calls, `shardc run` by its wall
time.  Prints one line of JSON: {"python": s, "run": s, "ratio": python/run}.

Usage: bench/python_loop.py [--build DIR] [--steps N] [--const C]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "samples", "train_mlp.tdsl")
FN = "sgd_dp"
MESH = {"X": 2, "Y": 4}


def inputs(const):
    c = {k: int(v) for k, v in (kv.split("=") for kv in const.split(","))}
    r = np.random.default_rng(6)
    x = r.standard_normal((c["B"], c["D"])).astype(np.float32)
    y = r.standard_normal((c["B"], c["O"])).astype(np.float32)
    p = {"w1": (0.05 * r.standard_normal((c["D"], c["H"]))).astype(np.float32),
         "b1": np.zeros(c["H"], np.float32),
         "w2": (0.05 * r.standard_normal((c["H"], c["O"]))).astype(np.float32),
         "b2": np.zeros(c["O"], np.float32)}
    v = {k: np.zeros_like(a) for k, a in p.items()}
    return x, y, p, v


def python_loop(shardc, const, n, warm):
    step = shardc.compile(SAMPLE, fn=FN, mesh=MESH, const=const)
    x, y, p, v = inputs(const)
    for _ in range(warm):
        loss, p, v = step(x, y, p, v)
    t0 = time.perf_counter()
    for _ in range(n):
        loss, p, v = step(x, y, p, v)
    t = time.perf_counter() - t0
    step.close()
    return t, float(loss)


def run_steps(shardc_bin, const, n, work):
    x, y, p, v = inputs(const)
    ins = []
    for name, a in [("x", x), ("y", y)] + [("p." + k, a) for k, a in p.items()] + [("v." + k, a) for k, a in v.items()]:
        path = os.path.join(work, name + ".npy")
        np.save(path, a)
        ins += ["--in", "%s=%s" % (name, path)]
    cmd = [shardc_bin, "run", SAMPLE, "--fn", FN, "--mesh", "X=2,Y=4", "--const", const, "--steps", str(n),
           "--out", os.path.join(work, "out")] + ins
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--const", default="B=1024,D=256,H=1024,O=256")
    ap.add_argument("--reps", type=int, default=3, help="best of this many")
    args = ap.parse_args()
    os.environ["SHARDC"] = os.path.join(os.path.abspath(args.build), "shardc")
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import shardc
    warm = 10
    work = tempfile.mkdtemp(prefix="shardc-pyloop.")
    run_steps(os.environ["SHARDC"], args.const, 1, work)          # fills the build cache
    best_py, best_run = float("inf"), float("inf")
    for _ in range(args.reps):
        best_py = min(best_py, python_loop(shardc, args.const, args.steps, warm)[0])
        long_ = run_steps(os.environ["SHARDC"], args.const, args.steps + warm, work)
        short = run_steps(os.environ["SHARDC"], args.const, warm, work)
        best_run = min(best_run, long_ - short)
    subprocess.run(["rm", "-rf", work])
    print(json.dumps({"python": best_py, "run": best_run, "ratio": best_py / best_run, "steps": args.steps,
                      "const": args.const}))


if __name__ == "__main__":
    main()
