#!/usr/bin/python3
"""The inputs and outputs of generated programs across processes (docs/cli.md,
"Multi-process runs: inputs and outputs"): tests/codegen/io/mesh2x2.tdsl's
functions built with `shardc build` on the threads backend and, when
libshardc_rt_mpi.a exists, on the MPI backend, run on small integer inputs
(so every result is exact) in each layout of processes x local devices:

    threads  1 process  x 4 devices
    mpi      4 processes x 1 device, 2 x 2 (--local-devices 2), 1 x 4

and checked against NumPy, bit for bit:

- --in with --outputs gather gives NumPy's results;
- --local-in x.%p.npy (each process's part: the bounding box of its devices'
  blocks, computed here independently of the driver) gives the same bits;
- --outputs local writes resultN.process{p}.npy holding exactly process p's
  part, and the parts put back in place make the gathered result;
- SHARDC_IO_STATS=1: each process reads the header and no more than the
  byte spans of its own blocks, and exactly its blocks' bytes where each
  block is contiguous in the file;
- errors exit 1 with a clear message and write nothing: a local file of the
  wrong shape or dtype, a missing %p file, a part that is not a box (2 x 2
  only), --local-devices on the threads backend, a bad SHARDC_TIMEOUT or
  SHARDC_LOCAL_DEVICES (said once); a bad --outputs is a usage error (2);
- --local-devices wins over SHARDC_LOCAL_DEVICES, which the threads backend
  does not use.

The 2 x 2 layout needs the MPI runtime to run two devices per process; when
`mpirun -np 2` with SHARDC_LOCAL_DEVICES=2 fails with the runtime's "mesh
has 4 devices but 2 MPI processes" error, its checks are skipped with that
reason.

    tests/codegen/check_io.py [--shardc build/shardc] [--tmp DIR] [--jobs 2]
        [--backend threads,mpi] [--only REGEX]

Prints "ok ..." or "not ok ..." per check, "skip ..." per skipped layout, and
ends with "N passed, N failed".
"""
import concurrent.futures
import math
import os
import re
import shutil
import sys
import threading

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import script_args  # noqa: E402  (beside this file)
sys.path.insert(0, os.path.join(ROOT, "tests", "codegen"))
from check_numpy import mpirun, sh  # noqa: E402

PROG = os.path.join(ROOT, "tests", "codegen", "io", "mesh2x2.tdsl")
SIZES = {"X": 2, "Y": 2}            # the program's mesh, row-major: device = 2 * x + y
NDEV = 4
RUN_TIMEOUT = 120
FILE_DTYPE = {"f32": np.float32, "bf16": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32,
              "bool": np.bool_, "i64": np.int64, "u8": np.uint8}

# Each function: its parameters and results as (name, dtype, dims, spec), where
# spec gives per dim the mesh axes splitting it (major first), and what NumPy
# computes.
X, Y, XY, YX, _ = ("X",), ("Y",), ("X", "Y"), ("Y", "X"), ()
CASES = {
    "rows": ([("x", "f32", (8, 6), (X, _))], [("f32", (8, 6), (X, _))], lambda x: [x + x]),
    "both": ([("x", "f32", (8, 6), (X, Y))],
             [("f32", (8, 6), (X, Y)), ("f32", (8, 6), (_, Y)), ("f32", (6,), (_,))],
             lambda x: [x * 3, x + 1, x.sum(axis=0, dtype=np.float32)]),
    "repl": ([("x", "f32", (8, 6), (_, _))], [("f32", (8, 6), (_, _))], lambda x: [x - 2]),
    "uneven": ([("x", "f32", (7, 5), (X, Y))], [("f32", (7, 5), (X, Y))], lambda x: [x * 2]),
    "padded": ([("x", "f32", (5, 3), (XY, _))], [("f32", (5, 3), (XY, _))], lambda x: [x + 1]),
    "ints": ([("x", "i32", (4, 8), (_, Y))], [("i32", (4, 8), (_, Y))], lambda x: [x * np.int32(3)]),
    "bf": ([("x", "bf16", (4, 8), (X, Y))], [("bf16", (4, 8), (X, Y))], lambda x: [x + x]),
    "half3": ([("x", "f16", (4, 3, 4), (Y, _, X))], [("f16", (4, 3, 4), (Y, _, X))],
              lambda x: [x * np.float16(2)]),
    "vec64": ([("x", "f64", (6,), (Y,)), ("s", "f64", (), ())], [("f64", (6,), (Y,))], lambda x, s: [x * s]),
    "flags": ([("b", "bool", (8,), (X,))], [("bool", (8,), (X,))], lambda b: [b.copy()]),
    "ids": ([("t", "i64", (4, 6), (X, Y)), ("b", "u8", (4, 6), (_, Y))], [("i64", (4, 6), (X, Y)), ("u8", (4, 6), (_, Y))],
            lambda t, b: [np.where(t > 0, t, b.astype(np.int64)), t.astype(np.uint8)]),
    "notbox": ([("x", "f32", (8, 2), (YX, _))], [("f32", (8, 2), (YX, _))], lambda x: [x + x]),
}


def block(dims, spec, dev):
    """Device dev's block: (start, count) per dim, clipped to the array."""
    coord = {"X": dev // 2, "Y": dev % 2}
    start, count = [], []
    for g, axes in zip(dims, spec):
        k, n = 0, 1
        for a in axes:
            k, n = k * SIZES[a] + coord[a], n * SIZES[a]
        local = -(-g // n)
        start.append(min(k * local, g))
        count.append(max(0, min(local, g - k * local)))
    return tuple(start), tuple(count)


def part(dims, spec, devices):
    """A process's part: the bounding box of its devices' blocks that hold
    data (of all of them when none does), and whether those blocks fill it."""
    blocks = [block(dims, spec, d) for d in devices]
    real = [b for b in blocks if all(c > 0 for c in b[1])]
    use = real or blocks
    lo = [min(b[0][k] for b in use) for k in range(len(dims))]
    hi = [max(b[0][k] + b[1][k] for b in use) for k in range(len(dims))]
    count = [max(0, h - l) for l, h in zip(lo, hi)]
    filled = sum(math.prod(c) for _, c in set(real))
    return tuple(slice(l, l + c) for l, c in zip(lo, count)), filled == math.prod(count), set(real)


def devices_of(p, L):
    return range(p * L, (p + 1) * L)


def header_bytes(path):
    with open(path, "rb") as f:
        pre = f.read(12)
    return 10 + int.from_bytes(pre[8:10], "little") if pre[6] == 1 else 12 + int.from_bytes(pre[8:12], "little")


def same(a, b):
    """Bit for bit: dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class Layout:
    """A backend and P processes x L local devices."""

    def __init__(self, backend, P, L):
        self.backend, self.P, self.L = backend, P, L

    def __str__(self):
        return "%s %dx%d" % (self.backend, self.P, self.L)

    def argv(self, exe, args):
        if self.backend == "threads":
            return [exe] + args
        return mpirun(self.P) + [exe] + args + ["--local-devices", str(self.L)]


class Harness:
    def __init__(self, args):
        self.shardc = args.shardc
        self.tmp = args.tmp
        self.lock = threading.Lock()
        self.passed = self.failed = 0
        self.exes = {}

    def check(self, ok, what, why=""):
        with self.lock:
            if ok:
                self.passed += 1
                print("ok %s" % what)
            else:
                self.failed += 1
                print("not ok %s%s" % (what, (": " + why.strip()[:1500]) if why else ""))
            sys.stdout.flush()
        return ok

    def build(self, fn, backend):
        exe = os.path.join(self.tmp, "bin", "%s_%s" % (fn, backend))
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        rc, out = sh([self.shardc, "build", PROG, "--fn", fn, "--backend", backend, "-o", exe], RUN_TIMEOUT)
        self.exes[fn, backend] = exe if self.check(rc == 0, "build %s --backend %s" % (fn, backend), out) else None

    # ---- one function in one layout ----

    def inputs(self, fn, d):
        """Random small integers (exact in every dtype), saved whole and as
        each process's part; returns the arrays."""
        rng = np.random.default_rng(sum(map(ord, fn)))
        arrays = []
        for name, dtype, dims, _spec in CASES[fn][0]:
            a = (rng.integers(0, 2, dims) if dtype == "bool" else rng.integers(-8, 9, dims)).astype(FILE_DTYPE[dtype])
            np.save(os.path.join(d, name + ".npy"), a)
            arrays.append(a)
        return arrays

    def save_parts(self, fn, lay, d, arrays):
        for (name, _dtype, dims, spec), a in zip(CASES[fn][0], arrays):
            for p in range(lay.P):
                box, _, _ = part(dims, spec, devices_of(p, lay.L))
                np.save(os.path.join(d, "%s.%d.npy" % (name, p)), np.array(a[box], order="C"))

    def run(self, fn, lay, d, args, out, env=None):
        shutil.rmtree(os.path.join(d, out), ignore_errors=True)
        argv = lay.argv(self.exes[fn, lay.backend], args + ["--out", os.path.join(d, out)])
        if lay.backend == "threads":
            return sh(argv, RUN_TIMEOUT, env)
        # As check_numpy.py: each mpirun keeps its session files in its own
        # folder (concurrent jobs collide in the shared one now and then),
        # and one that fails to start (orte_init) is tried once more.
        env = dict(env or {})
        env["OMPI_MCA_orte_tmpdir_base"] = os.path.join(d, "mpi-session-" + out)
        os.makedirs(env["OMPI_MCA_orte_tmpdir_base"], exist_ok=True)
        rc, err = sh(argv, RUN_TIMEOUT, env)
        if rc != 0 and "orte_init failed" in err:
            rc, err = sh(argv, RUN_TIMEOUT, env)
        return rc, err

    def case(self, fn, lay):
        params, results, compute = CASES[fn]
        d = os.path.join(self.tmp, "%s-%s-%d-%d" % (fn, lay.backend, lay.P, lay.L))
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        arrays = self.inputs(fn, d)
        want = compute(*arrays)
        boxes = [all(part(dims, spec, devices_of(p, lay.L))[1] for p in range(lay.P))
                 for _n, _t, dims, spec in params]
        ins = sum((["--in", "%s=%s" % (n, os.path.join(d, n + ".npy"))] for n, _t, _d, _s in params), [])
        local_ins = sum((["--local-in", "%s=%s" % (n, os.path.join(d, n + ".%p.npy"))] for n, _t, _d, _s in params), [])
        tag = "%s %s" % (fn, lay)

        rc, err = self.run(fn, lay, d, ins, "gather", {"SHARDC_IO_STATS": "1"})
        gathered = self.check_gathered(rc, err, d, "gather", len(results), want, tag + ": --in, --outputs gather")
        if rc == 0:
            self.check_io_stats(fn, lay, d, err, tag)
        results_boxed = all(part(dims, spec, devices_of(p, lay.L))[1] for p in range(lay.P)
                            for _t, dims, spec in results)
        if results_boxed:
            rc, err = self.run(fn, lay, d, ins + ["--outputs", "local"], "local")
            self.check_local(rc, err, d, "local", fn, lay, want, gathered, tag + ": --in, --outputs local")
        else:
            self.check_not_box_output(fn, lay, d, ins, tag)
        if all(boxes):
            self.save_parts(fn, lay, d, arrays)
            rc, err = self.run(fn, lay, d, local_ins, "lgather")
            got = self.check_gathered(rc, err, d, "lgather", len(results), want,
                                      tag + ": --local-in, --outputs gather")
            if got is not None and gathered is not None:
                self.check(all(same(a, b) for a, b in zip(got, gathered)),
                           tag + ": --local-in and --in give the same bits")
            if results_boxed:
                rc, err = self.run(fn, lay, d, local_ins + ["--outputs", "local"], "llocal")
                self.check_local(rc, err, d, "llocal", fn, lay, want, gathered,
                                 tag + ": --local-in, --outputs local")
        else:
            self.check_not_box_input(fn, lay, d, local_ins, tag)

    def check_gathered(self, rc, err, d, out, nres, want, what):
        if rc != 0:
            self.check(False, what, "status %d: %s" % (rc, err))
            return None
        got = [np.load(os.path.join(d, out, "result%d.npy" % i)) for i in range(nres)]
        bad = [i for i in range(nres) if not same(got[i], want[i])]
        self.check(not bad, what, "result%s differ from NumPy's: %s" % (
            ", ".join(map(str, bad)), "; ".join("%r vs %r" % (got[i], want[i]) for i in bad[:1])))
        return got

    def check_local(self, rc, err, d, out, fn, lay, want, gathered, what):
        """Each process's file holds its part; together they make the result."""
        if rc != 0:
            return self.check(False, what, "status %d: %s" % (rc, err))
        problems = []
        for i, (_t, dims, spec) in enumerate(CASES[fn][1]):
            whole = np.zeros_like(want[i])
            for p in range(lay.P):
                path = os.path.join(d, out, "result%d.process%d.npy" % (i, p))
                if not os.path.exists(path):
                    problems.append("no %s" % os.path.basename(path))
                    continue
                box, _, _ = part(dims, spec, devices_of(p, lay.L))
                got = np.load(path)
                if not same(got, np.array(want[i][box], order="C")):
                    problems.append("result%d.process%d.npy is %r, not the part %r of NumPy's result" %
                                    (i, p, got, box))
                if got.shape == whole[box].shape:
                    whole[box] = got
            extra = sorted(set(os.listdir(os.path.join(d, out))) -
                           {"result%d.process%d.npy" % (i, p) for i in range(len(want)) for p in range(lay.P)})
            if extra:
                problems.append("unexpected files %s" % extra)
            if gathered is not None and not same(whole, gathered[i]):
                problems.append("result%d's parts put together differ from the gathered result" % i)
        return self.check(not problems, what, "; ".join(problems))

    def check_io_stats(self, fn, lay, d, err, tag):
        """Each process read its header and the span of its part (of each
        of its blocks when the part is not a box), no more."""
        stats = {(int(m.group(1)), m.group(2)): int(m.group(3))
                 for m in re.finditer(r"^io: process (\d+): --in (\w+): read (\d+) of \d+ bytes", err, re.M)}
        problems = []
        for name, dtype, dims, spec in CASES[fn][0]:
            path = os.path.join(d, name + ".npy")
            hdr, size = header_bytes(path), np.dtype(FILE_DTYPE[dtype]).itemsize
            for p in range(lay.P):
                box, is_box, blocks = part(dims, spec, devices_of(p, lay.L))
                if is_box:          # read at once: the part's box (if not empty)
                    count = tuple(b.stop - b.start for b in box)
                    blocks = {(tuple(b.start for b in box), count)} if math.prod(count) else set()
                need = sum(math.prod(c) for _, c in blocks) * size if dims else size
                span = sum((np.ravel_multi_index(tuple(s + c - 1 for s, c in zip(st, ct)), dims) -
                            np.ravel_multi_index(st, dims) + 1) * size for st, ct in blocks) if dims else size
                got = stats.get((p, name))
                if got is None:
                    problems.append("process %d printed no io line for %s" % (p, name))
                elif not hdr + need <= got <= hdr + span or (span == need and got != hdr + need):
                    problems.append("process %d read %d bytes of %s; its header and blocks are %d bytes (%d with "
                                    "the gaps between rows)" % (p, got, name, hdr + need, hdr + span))
        summary = ", ".join("p%d %s %d of %d" % (p, n, v, os.path.getsize(os.path.join(d, n + ".npy")))
                            for (p, n), v in sorted(stats.items()))
        self.check(not problems, "%s: --in reads only the blocks of each process's devices (%s)" % (tag, summary),
                   "; ".join(problems) + "\n" + err)

    # ---- errors ----

    def check_error(self, rc, err, d, out, status, texts, what):
        if os.path.exists(os.path.join(d, out)):
            return self.check(False, what, "wrote %s/%s: %s" % (d, out, err))
        missing = [t for t in texts if t not in err]
        self.check(rc == status and not missing, what, "status %d (want %d), missing %r in: %s" %
                   (rc, status, missing, err))

    def check_not_box_input(self, fn, lay, d, local_ins, tag):
        rc, err = self.run(fn, lay, d, local_ins, "nb")
        self.check_error(rc, err, d, "nb", 1, ["not a box for this sharding and layout", "use --in"],
                         tag + ": --local-in where a process's part is not a box is an error")

    def check_not_box_output(self, fn, lay, d, ins, tag):
        rc, err = self.run(fn, lay, d, ins + ["--outputs", "local"], "nb")
        self.check_error(rc, err, d, "nb", 1, ["not a box for this sharding and layout", "use --outputs gather"],
                         tag + ": --outputs local where a process's part is not a box is an error")

    def check_env(self, fn, lay, d, arrays, tag):
        """The world's options from the environment (sc_options_from_env): a
        bad variable is an error, said once (by process 0 on MPI); a good
        SHARDC_LOCAL_DEVICES gives way to --local-devices (which Layout
        passes on MPI), and the threads backend does not use it."""
        ins = ["--in", "x=" + os.path.join(d, "x.npy")]
        for var, value, text in (("SHARDC_TIMEOUT", "soon", "is not a positive number of seconds"),
                                 ("SHARDC_LOCAL_DEVICES", "two", "is not a whole number of devices from 1 to 65536")):
            said = "error: %s=%s %s" % (var, value, text)
            rc, err = self.run(fn, lay, d, ins, "env", {var: value})
            self.check_error(rc, err, d, "env", 1, [said], "%s: %s=%s is an error" % (tag, var, value))
            self.check(err.count(said) == 1, "%s: ... said once" % tag, err)
        rc, err = self.run(fn, lay, d, ins, "env", {"SHARDC_LOCAL_DEVICES": "3", "SHARDC_TIMEOUT": "30"})
        self.check_gathered(rc, err, d, "env", 1, CASES[fn][2](*arrays), tag + (
            ": SHARDC_LOCAL_DEVICES=3 gives way to --local-devices %d" % lay.L if lay.backend == "mpi"
            else ": the threads backend does not use SHARDC_LOCAL_DEVICES=3"))

    def errors(self, lay):
        """Bad local files and environment variables, on the 'rows' program
        (part of x: 8 / P rows)."""
        fn, tag = "rows", "errors %s" % lay
        d = os.path.join(self.tmp, "errors-%s-%d-%d" % (lay.backend, lay.P, lay.L))
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        arrays = self.inputs(fn, d)
        self.check_env(fn, lay, d, arrays, tag)
        local_in = ["--local-in", "x=" + os.path.join(d, "x.%p.npy")]
        rows = part((8, 6), (X, _), devices_of(0, lay.L))[0][0].stop - part((8, 6), (X, _), devices_of(0, lay.L))[0][0].start
        self.save_parts(fn, lay, d, arrays)
        np.save(os.path.join(d, "x.0.npy"), np.zeros((3, 6), np.float32))
        rc, err = self.run(fn, lay, d, local_in, "out")
        self.check_error(rc, err, d, "out", 1, ["'%s' has shape (3, 6), but (%d, 6) is needed" %
                                                (os.path.join(d, "x.0.npy"), rows), "process 0's part of x"],
                         tag + ": a local file of the wrong shape")
        np.save(os.path.join(d, "x.0.npy"), np.zeros((rows, 6), np.int32))
        rc, err = self.run(fn, lay, d, local_in, "out")
        self.check_error(rc, err, d, "out", 1, ["--local-in x:", "but f32 is needed"],
                         tag + ": a local file of the wrong dtype")
        self.save_parts(fn, lay, d, arrays)
        last = os.path.join(d, "x.%d.npy" % (lay.P - 1))
        os.remove(last)
        rc, err = self.run(fn, lay, d, local_in, "out")
        self.check_error(rc, err, d, "out", 1, ["--local-in x: cannot read '%s'" % last],
                         tag + ": a missing %p file")
        rc, err = self.run(fn, lay, d, ["--in", "x=" + os.path.join(d, "x.npy"), "--outputs", "scattered"], "out")
        self.check_error(rc, err, d, "out", 2, ["usage:", "--outputs gather|local"], tag + ": a bad --outputs")
        if lay.backend == "threads":
            rc, err = self.run(fn, lay, d, ["--in", "x=" + os.path.join(d, "x.npy"), "--local-devices", "2"], "out")
            self.check_error(rc, err, d, "out", 1, ["--local-devices 2: this run is one process"],
                             tag + ": --local-devices other than the mesh's size on one process")


def two_per_process_works(h, exe):
    """(True, "") when the MPI runtime runs 2 devices per process, else (False, why)."""
    d = os.path.join(h.tmp, "probe")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "x.npy"), np.zeros((8, 6), np.float32))
    argv = Layout("mpi", 2, 2).argv(exe, ["--in", "x=" + os.path.join(d, "x.npy"), "--out", os.path.join(d, "out")])
    rc, err = sh(argv[:-2], RUN_TIMEOUT, {"SHARDC_LOCAL_DEVICES": "2"})       # without --local-devices: the runtime alone
    if rc == 0:
        return True, ""
    m = re.search(r"the mesh has \d+ devices but \d+ (MPI )?processes[^\n]*", err)
    return False, m.group(0) if m else "mpirun -np 2 with SHARDC_LOCAL_DEVICES=2: status %d: %s" % (rc, err[:300])


def main():
    ap = script_args.new_parser(__doc__, "check-io")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--backend", help="comma-separated: threads, mpi (default: both when available)")
    ap.add_argument("--only", help="only the functions matching this regex")
    args = script_args.parse(ap)
    h = Harness(args)
    have_mpi = script_args.can_run_mpi(h.shardc)
    backends = args.backend.split(",") if args.backend else ["threads"] + (["mpi"] if have_mpi else [])
    if "mpi" in backends and not have_mpi:
        h.check(False, "mpi backend", "no libshardc_rt_mpi.a next to shardc, or no mpirun")
        backends.remove("mpi")
    if "mpi" not in backends:
        print("skip mpi backend: %s" % ("not asked for" if args.backend else "no libshardc_rt_mpi.a or mpirun"))
    fns = [f for f in CASES if not args.only or re.search(args.only, f)]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(lambda fb: h.build(*fb), [(f, b) for f in set(fns) | {"rows"} for b in backends]))
    layouts = [Layout("threads", 1, NDEV)] if "threads" in backends else []
    if "mpi" in backends and h.exes.get(("rows", "mpi")):
        layouts += [Layout("mpi", NDEV, 1), Layout("mpi", 1, NDEV)]
        works, why = two_per_process_works(h, h.exes["rows", "mpi"])
        if works:
            layouts.append(Layout("mpi", 2, 2))
        else:
            print("skip mpi 2x2 (two devices per process): %s" % why)
    jobs = [(f, lay) for lay in layouts for f in fns if h.exes.get((f, lay.backend))]
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(h.case, f, lay) for f, lay in jobs]
        futures += [pool.submit(h.errors, lay) for lay in layouts if h.exes.get(("rows", lay.backend))]
        for fut in futures:
            try:
                fut.result()
            except Exception as e:  # a bug here is a failure, not a crash that hides the others
                h.check(False, "harness", repr(e))
    print("%d passed, %d failed" % (h.passed, h.failed))
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
