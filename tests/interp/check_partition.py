#!/usr/bin/python3
"""The partitioner's proof: every fn, partitioned, computes what it computed
before partitioning.

For each program (the samples at small sizes, the lit test programs and
tests/interp/progs) and each mesh of 1, 2, 4 (2x2) and 8 (2x4) devices and an
uneven one (3 or 3x2), runs every fn with the reference interpreter on the
same random inputs: the global program (`--stage parsed`, one device; once
for all meshes while the mesh leaves the global module unchanged and it has
no spmd fns or axis indices) and the partitioned one (`--stage partitioned`,
one simulated memory per device, inputs split into blocks and results
assembled; the interpreter also checks that replicated results agree on
every device).  Results must match within a
tolerance per dtype (reductions run in another order).  A program whose
spmd fns cannot take a mesh (blocks must divide evenly) is skipped for that
mesh, and the skip is counted, not passed.

    tests/interp/check_partition.py [--shardc build/shardc] [--tmp DIR]

Prints one line per failure and ends with "N passed, N failed, N skipped".
"""
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "codegen"))
import script_args  # noqa: E402

# Small sizes for the samples (their consts are for benchmarks).
SAMPLE_CONSTS = {
    "mlp.tdsl": "B=24,D=16,F=32",
    "matmul_square.tdsl": "B=8,D=64,F=96",
    "embedding.tdsl": "B=4,S=8,V=64,D=16",
    "attention.tdsl": "B=4,S=8,D=16,H=4,K=4",
    "collective_matmul.tdsl": "B=24,D=48,F=24",
    "two_matmul_constraint.tdsl": "B=24,D=16,F=32",
    "shard_average.tdsl": "S=24,D=48",
    "roll_within_shards.tdsl": "S=24,D=48",
    "allreduce_matmul.tdsl": "B=24,D=48,F=48",
    "reduce_scatter_matmul.tdsl": "B=24,D=48,F=48",
    "bidirectional_matmul.tdsl": "B=24,D=48,F=48",
    "collective_mlp.tdsl": "B=24,D=48,F=48",
    "pipeline.tdsl": "M=4,B=12,D=8,F=16",
    "gpt_block.tdsl": "B=4,S=8,D=16,H=4,K=4,F=32",
    "gpt.tdsl": "B=4,S=8,D=16,H=4,K=4,F=32,V=24,L=2",
}
TOL = {"f32": 2e-5, "bf16": 2e-2, "f16": 4e-3, "f64": 1e-12}
STORED = {"f32": np.float32, "bf16": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
          "bool": np.bool_, "u32": np.uint32, "i64": np.int64, "u8": np.uint8}


def programs(subdirs=("tests/lit/parsed", "tests/lit/sharded", "tests/lit/partitioned", "tests/interp/progs")):
    """The samples (with their small consts), then the programs under subdirs."""
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "*.tdsl"))):
        yield path, SAMPLE_CONSTS.get(os.path.basename(path))
    for sub in subdirs:
        for path in sorted(glob.glob(os.path.join(ROOT, sub, "*.tdsl"))):
            yield path, None


def run(shardc, args, env=None):
    return subprocess.run([shardc] + args, capture_output=True, text=True, env=env)


def meshes(axes, uneven=True):
    """Mesh overrides of 1, 2, 4 and 8 devices, and an uneven one (3x2 or 3)."""
    n = len(axes)
    if n == 0:
        return [None]
    def spec(sizes):
        return ",".join("%s=%d" % (a, s) for a, s in zip(axes, sizes))
    ones = [1] * n
    two = ones[:]; two[0] = 2
    if n >= 2:
        out = [spec(ones), spec(two), spec([2, 2] + ones[2:]), spec([2, 4] + ones[2:]), spec([3, 2] + ones[2:])]
    else:
        out = [spec(ones), spec(two), spec([4]), spec([8]), spec([3])]
    return out if uneven else out[:-1]


SIG = re.compile(r"^(spmd |partitioned )?fn ([\w.]+)\((.*)\) -> (.*) \{$")
PARAM = re.compile(r"(\w+): (\w+)\[([\d,]*)\]")


def signatures(dump, spmd=False):
    """fn name -> ([(param, dtype, shape)], [result dtype]) of the functions in
    a dump, without the .local copies, and without spmd fns unless asked."""
    fns = {}
    for line in dump.splitlines():
        m = SIG.match(line)
        if m and not m.group(2).endswith(".local") and (spmd or m.group(1) != "spmd "):
            params = [(p, dt, tuple(int(d) for d in dims.split(",") if d)) for p, dt, dims in PARAM.findall(m.group(3))]
            fns[m.group(2)] = (params, re.findall(r"(\w+)\[", m.group(4)))
    return fns


def load_results(d):
    """DIR/result0.npy, result1.npy, ... in order."""
    files = sorted(glob.glob(os.path.join(d, "result*.npy")), key=lambda s: int(re.findall(r"\d+", os.path.basename(s))[0]))
    return [np.load(f) for f in files]


def random_input(rng, dtype, shape):
    if dtype == "i32":
        return rng.integers(0, 3, size=shape).astype(np.int32)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "u32":                       # random keys: any bits
        return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    if dtype == "i64":                       # token ids, some past i32's range (and 2^53 at most: .npy input)
        return np.where(rng.random(shape) < 0.2, rng.integers(-2**53, 2**53, size=shape),
                        rng.integers(0, 3, size=shape)).astype(np.int64)
    if dtype == "u8":
        return rng.integers(0, 256, size=shape).astype(np.uint8)
    return rng.standard_normal(shape).astype(STORED[dtype])


def write_inputs(case, params, rng):
    """Random .npy inputs for params in folder case; returns the --in flags."""
    ins = []
    for p, dt, shape in params:
        f = os.path.join(case, p + ".npy")
        np.save(f, random_input(rng, dt, shape))
        ins += ["--in", "%s=%s" % (p, f)]
    return ins


def close(a, b, dtype):
    if a.shape != b.shape:
        return False
    if dtype in ("i32", "bool", "u32", "i64", "u8"):
        return np.array_equal(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same_nan = np.isnan(a64) == np.isnan(b64)
    finite = np.abs(a64[np.isfinite(a64)])
    scale = max(1.0, float(finite.max()) if finite.size else 1.0)
    with np.errstate(invalid="ignore"):     # inf - inf: the same infinities, checked below
        diff = np.abs(np.nan_to_num(a64 - b64, nan=0.0, posinf=0.0, neginf=0.0))
    same_inf = (np.isposinf(a64) == np.isposinf(b64)) & (np.isneginf(a64) == np.isneginf(b64))
    return bool(same_nan.all() and same_inf.all() and (diff <= TOL[dtype] * scale).all())


def interp_results(shardc, path, fn, stage, out, flags):
    """`shardc interp` of fn at the stage: its results, or its error message."""
    r = run(shardc, ["interp", path, "--fn", fn, "--stage", stage, "--out", out] + flags)
    return r.stderr.strip() if r.returncode != 0 else load_results(out)


def check_program(shardc, tmp, path, consts, fast=False):
    """The program's checks in folder tmp: (counts, failure lines); fast:
    the uneven mesh only (make check-fast), whose blocks are padded and, for
    two axes, both split."""
    counts, lines = {"passed": 0, "failed": 0, "skipped": 0}, []
    base = ["--const", consts] if consts else []
    parsed = run(shardc, ["dump", path, "--stage", "parsed"] + base)
    if parsed.returncode != 0:
        return counts, lines        # the lit tests own programs that do not compile
    axes = re.findall(r"(\w+)=\d+", parsed.stdout.splitlines()[0])
    rng = np.random.default_rng(1234)
    name = os.path.relpath(path, ROOT)
    globals_ = {}                   # (fn, module, mesh) -> (--in flags, the global program's results)
    # The global program runs once per fn, on one input set that every mesh's
    # partitioned program takes, while the mesh leaves the global module as
    # it is (size(X) changes it) and it has no spmd fns or axis indices
    # (whose values depend on the mesh).
    per_mesh = re.search(r"^spmd fn |axis-index", parsed.stdout, re.M) is not None
    for mesh in meshes(axes)[-1:] if fast and axes else meshes(axes):
        flags = base + (["--mesh", mesh] if mesh else [])
        dump = run(shardc, ["dump", path, "--stage", "partitioned"] + flags)
        if dump.returncode != 0:
            counts["skipped"] += 1
            continue
        module = run(shardc, ["dump", path, "--stage", "parsed"] + flags).stdout
        text = module.split("\n", 1)[-1]      # without the mesh line
        for fn, (params, dtypes) in signatures(module).items():
            key = (fn, text, mesh if per_mesh else None)
            if key not in globals_:
                case = os.path.join(tmp, "case%d" % len(globals_))
                shutil.rmtree(case, ignore_errors=True)
                os.makedirs(case)
                ins = write_inputs(case, params, rng)
                globals_[key] = (ins, interp_results(shardc, path, fn, "parsed", os.path.join(case, "parsed"),
                                                     ins + flags))
            ins, g = globals_[key]
            out = os.path.join(tmp, "partitioned")
            shutil.rmtree(out, ignore_errors=True)
            p = interp_results(shardc, path, fn, "partitioned", out, ins + flags)
            what = "%s --fn %s --mesh %s" % (name, fn, mesh or "(none)")
            if isinstance(g, str) and isinstance(p, str) and g.split(":")[-1] == p.split(":")[-1]:
                counts["passed"] += 1       # both stop with the same run-time error
                continue
            if isinstance(g, str) or isinstance(p, str):
                lines.append("FAIL %s: %s" % (what, g if isinstance(g, str) else p))
                counts["failed"] += 1
                continue
            ok = len(g) == len(p) and all(close(a, b, dtypes[i] if i < len(dtypes) else "f32")
                                          for i, (a, b) in enumerate(zip(g, p)))
            if ok:
                counts["passed"] += 1
            else:
                lines.append("FAIL %s: partitioned results differ from the global program" % what)
                counts["failed"] += 1
    return counts, lines


def main():
    ap = script_args.new_parser(__doc__, "check-partition")
    ap.add_argument("--only", help="check only the programs whose path matches this regex")
    ap.add_argument("--jobs", type=int, default=2, help="programs checked at once")
    ap.add_argument("--fast", action="store_true", help="on the uneven mesh only (make check-fast)")
    args = script_args.parse(ap)
    todo = [(path, consts) for path, consts in programs()
            if not args.only or re.search(args.only, os.path.relpath(path, ROOT))]
    shardc = args.shardc

    def one(i):
        return check_program(shardc, os.path.join(args.tmp, str(i)), *todo[i], fast=args.fast)

    counts = {"passed": 0, "failed": 0, "skipped": 0}
    # Each program in a folder of its own; results reported in program order.
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for c, lines in pool.map(one, range(len(todo))):
            for line in lines:
                print(line)
            for k in counts:
                counts[k] += c[k]
    print("%d passed, %d failed, %d skipped" % (counts["passed"], counts["failed"], counts["skipped"]))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
