#!/usr/bin/python3
"""Threads inside a device: a device's loops on OpenMP threads, the same bits.

tests/codegen/progs/threads.tdsl has a softmax and a layernorm over rows, a
transpose, row and column sums, and bf16 and i32 chains, every loop over
SK_PARALLEL_MIN elements (docs/kernels.md, "Threads inside a device").
Each function is built with `shardc build` for one device (--mesh X=1)
and run with SHARDC_THREAD_STATS=1, which makes the program say, per
device, how many OpenMP threads its loops had and how many loops and
kernel calls ran on a team of several:

- with OMP_NUM_THREADS=1: one thread, nothing parallel; the results match
  NumPy;
- with the share sk_main gives a device (no OMP_NUM_THREADS: one device on
  this machine's N cores gets N threads) and with OMP_NUM_THREADS=3: that
  many threads, parallel generated loops and kernel calls on teams of that
  size, and results that are the one-thread run's bit for bit (the .npy
  files compare equal byte for byte);
- on 2 devices (--mesh X=2), each device gets max(1, N / 2) threads (on the
  threads backend, and on MPI as 2 processes of one device each, which
  share the node's cores through OMPI_COMM_WORLD_LOCAL_SIZE); and one MPI
  process of one device gets all N, with the one-thread run's bits;
- built with CC=clang (LLVM's libomp), 3 threads give clang's one-thread
  bits, on teams of 3;
- the generated C has its SK_PARALLEL_FOR and SK_PARALLEL_ROWS loops (rows
  where a broadcast along trailing dims nests the loop) and compiles with gcc
  and clang -std=c11 -Wall -Wextra -Werror, with and without -fopenmp.

    tests/codegen/check_threads.py [--shardc build/shardc] [--tmp DIR] [--fast]

--fast leaves out MPI and clang.  Prints "ok N - ..." / "not ok N - ..."
lines and ends with "N passed, N failed".
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from tap import Tap  # noqa: E402
PROG = os.path.join(ROOT, "tests", "codegen", "progs", "threads.tdsl")
TIMEOUT = 300
R, C, N = 256, 512, 2048
STATS = re.compile(r"^threads: device (\d+): (\d+) OpenMP threads, (\d+) parallel loops, "
                   r"(\d+) parallel kernel calls, largest team (\d+)$", re.M)


def clean_env(extra=None):
    """The environment without the settings under test, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "SHARDC_THREAD_STATS", "SHARDC_LOCAL_DEVICES")
           and not k.startswith("GOMP_") and not k.startswith("KMP_")}
    env.update(extra or {})
    return env


def sh(argv, env=None, cwd=None):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=TIMEOUT,
                           env=env or clean_env(), cwd=cwd)
        return p.returncode, p.stderr + p.stdout
    except subprocess.TimeoutExpired:
        return 124, "timed out after %d s" % TIMEOUT


def mpirun(np_, d):
    """As `shardc run --backend mpi` launches (and check_numpy.py): processes
    may outnumber cores, shared memory, as root too; session files in their
    own folder."""
    session = os.path.join(d, "mpi-session")
    os.makedirs(session, exist_ok=True)
    return ((os.environ.get("MPIRUN") or "mpirun").split() + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
            + ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "--mca", "pml", "ob1",
               "--mca", "orte_tmpdir_base", session, "-np", str(np_)])


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))



def inputs(fn, rng):
    if fn == "norm":
        return {"x": rng.standard_normal((R, C)).astype(np.float32),
                "g": rng.standard_normal(C).astype(np.float32),
                "b": rng.standard_normal(C).astype(np.float32)}
    if fn == "narrow":
        return {"table": rng.standard_normal((N, C)).astype(np.float32),
                "rows": rng.permutation(N).astype(np.int32),
                "w": rng.standard_normal((N, C)).astype(np.float32)}
    return {"h": (rng.integers(-64, 64, (R, C)) / 32).astype(np.float32),
            "n": rng.integers(-1000, 1000, (R, C)).astype(np.int32)}


def expected(fn, a):
    """(array, rtol, atol) per result."""
    if fn == "norm":
        x = a["x"].astype(np.float64)
        p = np.exp(x - x.max(1, keepdims=True))
        s = p / p.sum(1, keepdims=True)
        d = s - s.mean(1, keepdims=True)
        y = d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5) * a["g"] + a["b"]
        t = (y * 3).T
        return [(y, 1e-3, 1e-4), (t, 1e-3, 1e-4), (t.sum(0), 1e-3, 1e-2)]
    if fn == "narrow":
        return [((a["table"][a["rows"]] + np.float32(1)).astype(np.float64), 0, 0), (a["w"].T.astype(np.float64), 2 ** -8, 0)]
    h, n = a["h"].astype(np.float64), a["n"].astype(np.int64)
    u = gelu(h * h + h)
    w = n * 3 - n // 7
    return [(u, 2e-2, 2e-2), (w.sum(0), 0, 0), (u.T * 0.5, 2e-2, 2e-2)]


def load_results(out, k):
    return [np.load(os.path.join(out, "result%d.npy" % i)) for i in range(k)]


def same_bytes(a_dir, b_dir):
    """None when b_dir holds a_dir's results byte for byte."""
    for name in sorted(f for f in os.listdir(a_dir) if f.startswith("result")):
        with open(os.path.join(a_dir, name), "rb") as f, open(os.path.join(b_dir, name), "rb") as g:
            if f.read() != g.read():
                return name + " differs"
    return None


class Check:
    def __init__(self, args, t):
        self.shardc = args.shardc
        self.tmp = args.tmp
        self.t = t
        self.cores = os.cpu_count() or 1

    def build(self, fn, mesh, d, backend="threads", cc=None):
        exe = os.path.join(d, "prog-%s-%s-%s" % (backend, cc or "cc", mesh))
        env = clean_env({"CC": cc} if cc else None)
        rc, out = sh([self.shardc, "build", PROG, "--fn", fn, "--mesh", "X=%d" % mesh, "--backend", backend,
                      "-o", exe], env)
        ok = self.t.check(rc == 0, "%s: shardc build --mesh X=%d --backend %s%s" % (
            fn, mesh, backend, " (CC=%s)" % cc if cc else ""), out[-1500:])
        return exe if ok else None

    def run(self, argv, d, ins, out, env):
        shutil.rmtree(os.path.join(d, out), ignore_errors=True)
        args = sum((["--in", "%s=%s" % (k, os.path.join(d, k + ".npy"))] for k in ins), [])
        rc, text = sh(argv + args + ["--out", os.path.join(d, out)],
                      clean_env(dict(env, SHARDC_THREAD_STATS="1", OPENBLAS_NUM_THREADS="1")))
        stats = {int(m[0]): tuple(int(v) for v in m[1:]) for m in STATS.findall(text)}
        return rc, text, stats

    def expect_stats(self, what, rc, text, stats, devices, threads):
        """Every device had `threads` threads; with more than one, it ran
        generated loops and kernel calls on teams of that size; with one,
        nothing parallel."""
        if not self.t.check(rc == 0, what + ": runs", text[-1500:]):
            return False
        bad = []
        for dev in range(devices):
            s = stats.get(dev)
            if s is None:
                bad.append("device %d printed no stats" % dev)
            elif threads > 1 and not (s[0] == threads and s[1] > 0 and s[2] > 0 and s[3] == threads):
                bad.append("device %d: %d threads, %d loops, %d kernel calls, team %d" % ((dev,) + s))
            elif threads == 1 and s != (1, 0, 0, 0):
                bad.append("device %d: %d threads, %d loops, %d kernel calls, team %d" % ((dev,) + s))
        return self.t.check(not bad, "%s: %d OpenMP thread%s per device%s" % (
            what, threads, "" if threads == 1 else "s", ", loops and kernel calls on teams of %d" % threads
            if threads > 1 else ", nothing parallel"), "; ".join(bad) + "\n" + text[-800:])

    def match_numpy(self, what, fn, out, a):
        wants = expected(fn, a)
        got = load_results(out, len(wants))
        bad = []
        for i, ((want, rtol, atol), g) in enumerate(zip(wants, got)):
            if g.shape != want.shape or not np.allclose(g.astype(np.float64), want, rtol=rtol, atol=atol):
                bad.append("result%d: largest error %g" % (
                    i, np.max(np.abs(g.astype(np.float64) - want)) if g.shape == want.shape else float("inf")))
        if fn == "mixed" and not bad and not np.array_equal(got[2], got[0].T * np.float32(0.5)):
            bad.append("result2 is not result0 transposed, times 0.5")
        return self.t.check(not bad, what + ": matches NumPy", "; ".join(bad))

    def has_mpi(self, fast):
        return not fast and script_args.has_mpi(self.shardc)

    def same_bits(self, what, argv, d, a, base, out, env, ndev, k):
        """Runs argv into out: the stats of ndev devices on teams of k, and
        the bits of the run into base."""
        rc, text, st = self.run(argv, d, a, out, env)
        if self.expect_stats(what, rc, text, st, ndev, k):
            diff = same_bytes(os.path.join(d, base), os.path.join(d, out))
            self.t.check(diff is None, what + ": the 1-thread bits", diff or "")

    def one_thread(self, what, exe, fn, d, a, out):
        """The run of exe on one OpenMP thread into out, against NumPy;
        False when it failed."""
        rc, text, st = self.run([exe], d, a, out, {"OMP_NUM_THREADS": "1"})
        if not self.expect_stats(what, rc, text, st, 1, 1):
            return False
        self.match_numpy(what, fn, os.path.join(d, out), a)
        return True

    def one_device(self, fn, d, a, fast):
        exe = self.build(fn, 1, d)
        if not exe or not self.one_thread("%s, 1 device, OMP_NUM_THREADS=1" % fn, exe, fn, d, a, "one"):
            return
        runs = [("the share of %d cores" % self.cores, {}, self.cores), ("OMP_NUM_THREADS=3", {"OMP_NUM_THREADS": "3"}, 3)]
        for label, env, k in runs:
            self.same_bits("%s, 1 device, %s" % (fn, label), [exe], d, a, "one", "many-%d" % k, env, 1, k)
        if not self.has_mpi(fast):
            return
        exe = self.build(fn, 1, d, "mpi")
        if exe:
            self.same_bits("%s, MPI, 1 process of 1 device" % fn, mpirun(1, d) + [exe], d, a, "one", "mpi-1", {}, 1,
                           self.cores)

    def two_devices(self, fn, d, a, fast):
        share = max(1, self.cores // 2)
        runs = [("%s, 2 devices on %d cores" % (fn, self.cores), "threads", [], "two")]
        if self.has_mpi(fast):
            runs.append(("%s, MPI, 2 processes of 1 device on %d cores" % (fn, self.cores), "mpi", mpirun(2, d), "mpi-2"))
        for what, backend, launch, out in runs:
            exe = self.build(fn, 2, d, backend)
            if not exe:
                continue
            rc, text, st = self.run(launch + [exe], d, a, out, {})
            if self.expect_stats(what, rc, text, st, 2, share):
                self.match_numpy(what, fn, os.path.join(d, out), a)

    def clang(self, fn, d, a):
        exe = self.build(fn, 1, d, cc="clang")
        if exe and self.one_thread("%s, clang, OMP_NUM_THREADS=1" % fn, exe, fn, d, a, "clang-one"):
            self.same_bits("%s, clang, OMP_NUM_THREADS=3" % fn, [exe], d, a, "clang-one", "clang-3",
                           {"OMP_NUM_THREADS": "3"}, 1, 3)

    def c_warnings(self, fn, d):
        src = os.path.join(d, "prog.c")
        rc, out = sh([self.shardc, "compile", PROG, "--fn", fn, "--mesh", "X=1", "-o", src])
        if not self.t.check(rc == 0, "%s: shardc compile" % fn, out):
            return
        # The loops of every fn of the program (a file with a main holds
        # only its fn and callees: norm's has rows, mixed's flat loops).
        lib = os.path.join(d, "lib.c")
        rc, out = sh([self.shardc, "compile", PROG, "--mesh", "X=1", "-o", lib])
        if not self.t.check(rc == 0, "%s: shardc compile (every fn)" % fn, out):
            return
        with open(lib) as f:
            text = f.read()
        flat = text.count("SK_PARALLEL_FOR(131072, for (int64_t i = 0; i < 131072; i++) {")
        rows = len(re.findall(r"SK_PARALLEL_ROWS\(131072, for \(int64_t row = 0; row < \d+; row\+\+\) \{", text))
        self.t.check(flat >= 1 and rows >= 1, "%s: the generated C has SK_PARALLEL_FOR (%d) and SK_PARALLEL_ROWS (%d) "
                     "loops" % (fn, flat, rows))
        for cc in ("gcc", "clang"):
            for omp in ([], ["-fopenmp"]):
                rc, out = sh([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"] + omp +
                             ["-I" + os.path.join(ROOT, "runtime"), "-I" + os.path.join(ROOT, "lib"), src])
                self.t.check(rc == 0, "%s: the C compiles warning-free: %s -Wall -Wextra -Werror%s" % (
                    fn, cc, " -fopenmp" if omp else ""), out[-1500:])


def main():
    ap = script_args.new_parser(__doc__, "check-threads")
    ap.add_argument("--fast", action="store_true", help="leave out MPI and clang")
    args = script_args.parse(ap)
    t = Tap()
    c = Check(args, t)
    for k, fn in enumerate(("norm", "mixed", "narrow")):
        d = os.path.join(c.tmp, fn)
        os.makedirs(d)
        a = inputs(fn, np.random.default_rng(k + 1))
        for name, arr in a.items():
            np.save(os.path.join(d, name + ".npy"), arr)
        c.c_warnings(fn, d)
        c.one_device(fn, d, a, args.fast)
        c.two_devices(fn, d, a, args.fast)
        if not args.fast:
            c.clang(fn, d, a)
    return t.summary()


if __name__ == "__main__":
    sys.exit(main())
