#!/usr/bin/python3
"""Code generation's proof: every function, compiled to C and run on the
threads backend, computes what the reference interpreter computes for the
global program (`shardc interp`).  The fns of a program on a mesh are one
executable (`shardc build --fn a,b`), run once per fn with its --fn: one
build per program and mesh instead of one `shardc run` per fn.

For each program (the samples at small sizes, tests/lit/partitioned and
tests/interp/progs) and each mesh of 1, 4 (2x2) and 8 (2x4) devices, runs
every fn and spmd fn on the same random inputs both ways and compares the
results within a tolerance per dtype (tests/interp/check_partition.py's).
Meshes a program cannot take are skipped and counted.  A fn that the
oracle table (tests/interp/oracles.py) builds on every mesh is left to
tests/codegen/check_numpy.py, which runs its generated C on those meshes and
more, on both backends, against NumPy: running it here too proved nothing
more and took three quarters of this check's time.  Then, for every program,
the generated C of all its fns (`shardc compile`, every per-device function
of the program: each fn's code as `--fn F` writes it) and with the main() of
its first fn (`--fn F`) on the largest mesh must compile with no warning
under gcc and clang -std=c11 -Wall -Wextra -Werror (once per program, not
per fn: a minute less of this check, the same functions compiled).

Each case's random inputs come from a seed made of its name (program, fn,
mesh): adding a case or a program gives no other case new inputs.  Every
fn is built for this machine's ISA alone (SHARDC_CFLAGS=-march=native,
docs/cli.md), not for the three ISA levels users' builds compile
(docs/kernels.md), which run only this machine's level here and triple the
compile time, most of this check's; check_training.py, check_steps.py and
the other checks of built programs build as users do.

A fn that takes bf16 or f16 inputs is compared at that precision even
where it returns f32: generated C may round an intermediate once where the
interpreter rounds it twice (a bf16 dot's epilogue, say), and both are
right to the inputs' precision.

    tests/codegen/check_run.py [--shardc build/shardc] [--tmp DIR] [--jobs N] [--only REGEX]

Prints one line per failure and ends with "N passed, N failed, N skipped".
"""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import script_args  # noqa: E402  (beside this file)
sys.path.insert(0, os.path.join(ROOT, "tests", "interp"))
from check_partition import TOL, close, load_results, meshes, programs, run, signatures, write_inputs  # noqa: E402
from oracles import CASES  # noqa: E402


def oracle_covered():
    """(program relative to ROOT, fn) that check_numpy.py builds on every mesh."""
    return {(os.path.relpath(c.prog, ROOT), fn) for c in CASES if c.codegen is None for fn in c.fns}


def precision(params, dtype):
    """The dtype whose tolerance a result of `dtype` is compared with: the
    least precise float among it and the fn's parameters."""
    floats = [dt for _, dt, _ in params if dt in TOL] + ([dtype] if dtype in TOL else [])
    return max(floats, key=TOL.get) if dtype in TOL else dtype

# Results that are sums of many terms of either sign, larger than the sum:
# each side rounds its partial sums in its own order, to a few 1e-4 in all,
# which f32's tolerance (relative to the result) refuses when the inputs
# make the sum small.  Compared at bf16's tolerance, as tests/interp/
# oracles.py compares the same loss against NumPy.  (program, fn, result)
CANCELLING = {("tests/interp/progs/attention.tdsl", "cross_loss", 0),
              ("tests/interp/progs/attention.tdsl", "g_cross", 0)}


def result_precision(path, fn, params, dtypes, i):
    if (os.path.relpath(path, ROOT), fn, i) in CANCELLING:
        return "bf16"
    return precision(params, dtypes[i] if i < len(dtypes) else "f32")


def check_case(shardc, case, exe, path, flags, fn, params, dtypes, seed):
    """Returns None (pass) or a failure message: fn through the interpreter
    and through exe, the program's executable, run with --fn fn."""
    os.makedirs(case)
    rng = np.random.default_rng(seed)
    ins = write_inputs(case, params, rng)
    def outcome(r, out):   # the results, or the error that stopped the run
        return r.stderr.strip() or "status %d" % r.returncode if r.returncode else load_results(out)
    gout, cout = os.path.join(case, "interp"), os.path.join(case, "run")
    g = outcome(run(shardc, ["interp", path, "--fn", fn, "--out", gout] + ins + flags), gout)
    c = outcome(subprocess.run([exe, "--fn", fn, "--out", cout] + ins, capture_output=True, text=True), cout)
    shutil.rmtree(case, ignore_errors=True)
    if isinstance(g, str) and isinstance(c, str):
        return None                      # both stop with a run-time error
    if isinstance(g, str) or isinstance(c, str):
        return g if isinstance(g, str) else c
    if len(g) != len(c) or not all(close(a, b, result_precision(path, fn, params, dtypes, i))
                                   for i, (a, b) in enumerate(zip(g, c))):
        return "the generated program's results differ from the interpreter's"
    return None


def check_program(shardc, d, path, flags, items):
    """The fns of one program, mesh and consts (items: (what, fn, params,
    dtypes)) built into one executable (`shardc build --fn a,b`), for this
    machine's ISA alone (SHARDC_CFLAGS=-march=native, unless set), and
    each checked; [(what, None or a failure message)]."""
    os.makedirs(d)
    exe = os.path.join(d, "prog")
    fns = [fn for _, fn, _, _ in items]
    env = dict(os.environ, SHARDC_CFLAGS=os.environ.get("SHARDC_CFLAGS", "-march=native"))
    r = run(shardc, ["build", path, "--fn", ",".join(fns), "-o", exe] + flags, env)
    if r.returncode:
        return [(what, "shardc build: " + (r.stderr.strip() or "status %d" % r.returncode)) for what, _, _, _ in items]
    done = [(what, check_case(shardc, os.path.join(d, "case%d" % i), exe, path, flags, fn, params,
                              dtypes, zlib.crc32(what.encode())))
            for i, (what, fn, params, dtypes) in enumerate(items)]
    shutil.rmtree(d, ignore_errors=True)
    return done


def check_warnings(shardc, tmp, path, flags, fn):
    """fn None: every per-device function of the program, no main()."""
    src = os.path.join(tmp, re.sub(r"\W", "_", os.path.relpath(path, ROOT) + "_" + (fn or "all")) + ".c")
    r = run(shardc, ["compile", path, "-o", src] + (["--fn", fn] if fn else []) + flags)
    if r.returncode:
        return ["shardc compile: " + r.stderr.strip()]
    fails = []
    for cc in ("gcc", "clang"):
        r = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                            "-I" + os.path.join(ROOT, "runtime"), "-I" + os.path.join(ROOT, "lib"), src],
                           capture_output=True, text=True)
        if r.returncode:
            fails.append("%s: %s" % (cc, r.stderr.strip()[:400]))
    return fails


def check_errors(shardc, tmp):
    """Bad input to a generated program: status 1, a clear message, no output."""
    prog = os.path.join(ROOT, "tests", "lit", "errors", "Inputs", "mesh_xy.tdsl")
    d = os.path.join(tmp, "errors")
    os.makedirs(d)
    np.save(os.path.join(d, "short.npy"), np.zeros(5, np.float32))
    np.save(os.path.join(d, "ints.npy"), np.zeros(8, np.int32))
    np.save(os.path.join(d, "good.npy"), np.arange(8, dtype=np.float32))
    cases = [(["--in", "x=" + os.path.join(d, "nothere.npy")], "cannot read"),
             (["--in", "x=" + os.path.join(d, "short.npy")], "has shape (5,), but (8,) is needed"),
             (["--in", "x=" + os.path.join(d, "ints.npy")], "but f32 is needed"),
             ([], "no --in for parameter 'x' of 'f', which needs a .npy file of f32[8]"),
             (["--in", "y=" + os.path.join(d, "good.npy")], "has no parameter named 'y'")]
    fails = []
    for ins, want in cases:
        out = os.path.join(d, "out")
        r = run(shardc, ["run", prog, "--fn", "f", "--out", out] + ins)
        if r.returncode != 1 or want not in r.stderr or os.path.exists(out):
            fails.append("run %s: status %d, %r (want status 1, %r, no output)" % (" ".join(ins), r.returncode,
                                                                                   r.stderr.strip(), want))
    r = run(shardc, ["run", prog, "--fn", "f", "--out", os.path.join(d, "ok"), "--in", "x=" + os.path.join(d, "good.npy")])
    if r.returncode or not np.array_equal(np.load(os.path.join(d, "ok", "result0.npy")), np.arange(8, dtype=np.float32)):
        fails.append("run on good input: status %d, %s" % (r.returncode, r.stderr.strip()))
    return len(cases) + 1, fails


def main():
    ap = script_args.new_parser(__doc__, "check-codegen")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="only the programs whose path relative to the root matches this regular expression")
    args = script_args.parse(ap)
    shardc = args.shardc
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    cases, warn_cases = [], []
    covered = oracle_covered()
    for path, consts in programs(("tests/lit/partitioned", "tests/interp/progs")):
        if args.only and not re.search(args.only, os.path.relpath(path, ROOT)):
            continue
        base = ["--const", consts] if consts else []
        parsed = run(shardc, ["dump", path, "--stage", "parsed"] + base)
        if parsed.returncode != 0:
            continue
        axes = re.findall(r"(\w+)=\d+", parsed.stdout.splitlines()[0])
        name = os.path.relpath(path, ROOT)
        with open(path) as f:
            written = set(re.findall(r"^\s*(?:spmd\s+)?fn\s+(\w+)", f.read(), re.M))
        # 1, 4 (2x2) and 8 (2x4) devices: two devices split one axis, which
        # both larger meshes do, and the interpreter's proof
        # (check_partition.py) and check_numpy.py cover that mesh anyway.
        mesh_list = [m for i, m in enumerate(meshes(axes, uneven=False)) if i != 1]
        for k, mesh in enumerate(mesh_list):
            flags = base + (["--mesh", mesh] if mesh else [])
            if run(shardc, ["dump", path, "--stage", "scheduled"] + flags).returncode != 0:
                counts["skipped"] += 1
                continue
            sigs = signatures(run(shardc, ["dump", path, "--stage", "parsed"] + flags).stdout, spmd=True)
            fns = [fn for fn in sigs if fn in written]   # a gradient's derived fns: built and run through their callers
            items = [("%s --fn %s --mesh %s" % (name, fn, mesh or "(none)"), fn) + tuple(sigs[fn])
                     for fn in fns if (name, fn) not in covered]
            if items:
                cases.append((path, flags, items))
            if k == len(mesh_list) - 1 and fns:   # C warnings: on the largest mesh
                for fn in (None, fns[0]):
                    warn_cases.append(("%s %s --mesh %s" % (name, "--fn " + fn if fn else "(all fns)", mesh or "(none)"),
                                       path, flags, fn))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = [pool.submit(check_program, shardc, os.path.join(args.tmp, "prog%d" % i), path, flags, items)
                for i, (path, flags, items) in enumerate(cases)]
        wfuts = [(what, pool.submit(check_warnings, shardc, args.tmp, path, flags, fn))
                 for what, path, flags, fn in warn_cases]
        for f in futs:
            for what, msg in f.result():
                if msg:
                    print("FAIL %s: %s" % (what, msg))
                    counts["failed"] += 1
                else:
                    counts["passed"] += 1
        for what, f in wfuts:
            fails = f.result()
            for msg in fails:
                print("FAIL warnings %s: %s" % (what, msg))
            counts["failed"] += len(fails)
            counts["passed"] += 2 - len(fails)
    n, fails = check_errors(shardc, args.tmp)
    for msg in fails:
        print("FAIL bad input: %s" % msg)
    counts["failed"] += len(fails)
    counts["passed"] += n - len(fails)
    print("%d passed, %d failed, %d skipped" % (counts["passed"], counts["failed"], counts["skipped"]))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
