#!/usr/bin/python3
"""The pipeline's stages overlap in time: a runtime check of samples/pipeline.tdsl.

Builds the sample (`shardc build --fn pipeline`, threads backend) with
constants large enough that one stage call takes tens of milliseconds, runs
it with SHARDC_TRACE set to a plain-text path (lib/shardc_trace.h: every
kernel, collective and fn call, per device, with CLOCK_MONOTONIC begin and
end times; the stages are the calls "call stage1" and "call stage2"), and checks from the
trace that for every microbatch m, stage 1's call on microbatch m + 1
begins before stage 2's call on microbatch m ends, on every pair of
devices (the latest begin against the earliest end).  The device program
is scheduled so that it can (docs/partitioning.md, "Submeshes"): the
transfer of microbatch m is started before stage 1's call on m + 1 and
waited for after it, so stage 1 runs ahead while stage 2 works.

Also checked: each device of a stage records one call per microbatch, the
result matches NumPy, and without SHARDC_TRACE no trace is written.

    tests/codegen/check_pipeline_overlap.py [--shardc build/shardc] [--tmp DIR]
        [--const M=6,B=256,D=512,F=1024]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from tap import Tap  # noqa: E402
SAMPLE = os.path.join(ROOT, "samples", "pipeline.tdsl")


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def read_trace(path):
    """device -> [(begin, end, name)] in order of begin, of the calls of
    stage fns ("call stage1"; the kernels they run are events too)."""
    calls = {}
    with open(path) as f:
        for line in f:
            dev, begin, end, name = line.rstrip("\n").split(" ", 3)
            if name.startswith("call "):
                calls.setdefault(int(dev), []).append((int(begin), int(end), name[5:]))
    for d in calls:
        calls[d].sort()
    return calls


def main():
    ap = script_args.new_parser(__doc__, "check-pipeline-overlap")
    ap.add_argument("--const", default="M=6,B=256,D=512,F=1024",
                    help="sizes: one stage call should take tens of milliseconds")
    args = script_args.parse(ap)
    consts = dict((k, int(v)) for k, v in (kv.split("=") for kv in args.const.split(",")))
    M, B, D, F = consts["M"], consts["B"], consts["D"], consts["F"]
    t = Tap()
    prog = os.path.join(args.tmp, "pipeline")
    r = subprocess.run([args.shardc, "build", SAMPLE, "--fn", "pipeline", "--const", args.const, "-o", prog],
                       capture_output=True, text=True)
    if not t.check(r.returncode == 0, "shardc build samples/pipeline.tdsl --fn pipeline --const " + args.const,
                   r.stderr.strip()):
        return t.summary()

    rng = np.random.default_rng(7)
    scale = {"x": 1.0, "w1_in": D ** -0.5, "w1_out": F ** -0.5, "w2_in": D ** -0.5, "w2_out": F ** -0.5}
    shapes = {"x": (M, B, D), "w1_in": (D, F), "w1_out": (F, D), "w2_in": (D, F), "w2_out": (F, D)}
    ins, arrays = [], {}
    for name, shape in shapes.items():
        arrays[name] = (rng.standard_normal(shape) * scale[name]).astype(np.float32)
        np.save(os.path.join(args.tmp, name + ".npy"), arrays[name])
        ins += ["--in", "%s=%s" % (name, os.path.join(args.tmp, name + ".npy"))]

    out = os.path.join(args.tmp, "out")
    r = subprocess.run([prog] + ins + ["--out", out], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "SHARDC_TRACE"}, timeout=600)
    t.check(r.returncode == 0 and not any(f.startswith("trace") for f in os.listdir(args.tmp)),
            "without SHARDC_TRACE the program runs and writes no trace", r.stderr.strip())

    trace = os.path.join(args.tmp, "trace")
    env = dict(os.environ, SHARDC_TRACE=trace)
    r = subprocess.run([prog] + ins + ["--out", out], capture_output=True, text=True, env=env, timeout=600)
    if not t.check(r.returncode == 0 and os.path.exists(trace), "the program runs with SHARDC_TRACE=" + trace,
                   r.stderr.strip() or "no trace written"):
        return t.summary()

    x = arrays["x"].astype(np.float64)
    h = x + gelu(x @ arrays["w1_in"]) @ arrays["w1_out"]
    want = h + np.maximum(h @ arrays["w2_in"], 0) @ arrays["w2_out"]
    got = np.load(os.path.join(out, "result0.npy")).astype(np.float64)
    err = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    t.check(got.shape == want.shape and err < 1e-4, "the result matches NumPy", "relative error %g" % err)

    calls = read_trace(trace)
    stage = {"stage1": {}, "stage2": {}}     # stage -> device -> [(begin, end)]
    for dev, recs in calls.items():
        for begin, end, name in recs:
            stage.setdefault(name, {}).setdefault(dev, []).append((begin, end))
    for name in ("stage1", "stage2"):
        devs = stage[name]
        counts = sorted(set(len(v) for v in devs.values()))
        t.check(len(devs) == 4 and counts == [M], "%s: %d calls on each of 4 devices" % (name, M),
                "devices %s, calls per device %s" % (sorted(devs), counts))
    if t.failed:
        return t.summary()
    # Device d of `first` (S = 0) sends each microbatch to device d + 4 of
    # `second` (S = 1, the same X and Y): compare each such pair.  Pairs at
    # other X coordinates are independent chains of the pipeline.
    first, second = stage["stage1"], stage["stage2"]
    pairs = [(d, d + 4) for d in sorted(first)]
    for m in range(M - 1):
        margins = [second[r][m][1] - first[s][m + 1][0] for s, r in pairs if r in second]
        worst = min(margins) if len(margins) == len(pairs) else float("-inf")
        t.check(worst > 0,
                "stage1 on microbatch %d begins before stage2 on microbatch %d ends, on every device pair "
                "(at least %.1f ms before)" % (m + 1, m, worst / 1e6),
                "a pair has it begin %.1f ms after" % (-worst / 1e6))
    per_call = np.median([e - b for v in first.values() for b, e in v]) / 1e6
    print("# median stage1 call: %.1f ms" % per_call)
    return t.summary()


if __name__ == "__main__":
    sys.exit(main())
