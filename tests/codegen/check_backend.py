#!/usr/bin/python3
"""The backend is chosen when a generated program runs (lib/host/backend.c,
docs/cli.md "The MPI backend"), on samples/mlp.tdsl at small sizes (a 2x4
mesh, an all-reduce over Y):

- the generated C names no backend (no SK_BACKEND, no SHARDC_MPI);
- a program built with --backend mpi, run directly, runs on threads: its
  --help says so, one process reads every input whole (SHARDC_IO_STATS),
  and its results are a threads-only build's bit for bit;
- the same executable under mpirun -np 2 and -np 8 runs on MPI: each
  process reads its devices' part of x, and the results are the
  threads run's bits; SHARDC_BACKEND=mpi makes a direct run one MPI process
  and SHARDC_BACKEND=threads keeps an mpirun -np 1 on threads;
- a threads-only build refuses SHARDC_BACKEND=mpi and a launch of two of
  its processes (each would run every device), and SHARDC_BACKEND=gpu is
  refused by both: status 1 with the reason.

Without MPI (no libshardc_rt_mpi.a or mpirun) the MPI checks are skipped
and said to be.

    tests/codegen/check_backend.py [--shardc build/shardc] [--tmp DIR]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_numpy import mpirun  # noqa: E402  (shardc run --backend mpi's launcher)
import script_args  # noqa: E402
from tap import Tap  # noqa: E402

PROG = os.path.join(ROOT, "samples", "mlp.tdsl")
CONST = "B=16,D=32,F=64"
TIMEOUT = 120


def sh(argv, env=None):
    """(status, stdout + stderr)."""
    e = {k: v for k, v in os.environ.items() if k not in ("SHARDC_BACKEND", "SHARDC_IO_STATS")}
    e.update(env or {})
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=e)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return 124, "timed out"


class Check:
    def __init__(self, shardc, tmp, t):
        self.shardc, self.tmp, self.t = shardc, tmp, t
        rng = np.random.default_rng(3)
        self.ins = []
        for name, shape in (("x", (16, 32)), ("w_in", (32, 64)), ("w_out", (64, 32))):
            f = os.path.join(tmp, name + ".npy")
            np.save(f, rng.standard_normal(shape).astype(np.float32))
            self.ins += ["--in", "%s=%s" % (name, f)]

    def build(self, backend):
        exe = os.path.join(self.tmp, "mlp-" + backend)
        rc, out = sh([self.shardc, "build", PROG, "--fn", "mlp", "--const", CONST, "--backend", backend, "-o", exe])
        return exe if self.t.check(rc == 0, "shardc build --backend " + backend, out[-1500:]) else None

    def run(self, launch, exe, out, env=None):
        """(status, text, result bytes or None)."""
        d = os.path.join(self.tmp, out)
        shutil.rmtree(d, ignore_errors=True)
        rc, text = sh(launch + [exe] + self.ins + ["--out", d], dict(env or {}, SHARDC_IO_STATS="1"))
        f = os.path.join(d, "result0.npy")
        return rc, text, open(f, "rb").read() if rc == 0 and os.path.exists(f) else None

    def help_says(self, what, launch, exe, want, env=None):
        rc, text = sh(launch + [exe, "--help"], env)
        said = set(re.findall(r"^backend of this run: (\S+)", text, re.M))
        self.t.check(rc == 0 and said == {want}, "%s: --help says the backend is %s" % (what, want),
                     "status %d, said %s\n%s" % (rc, sorted(said), text[-800:]))

    def refused(self, what, launch, exe, env, reason):
        rc, text, _ = self.run(launch, exe, "refused", env)
        self.t.check(rc == 1 and reason in text, "%s: status 1, '%s'" % (what, reason), "status %d\n%s" % (rc, text[-800:]))

    def generated_c(self):
        src = os.path.join(self.tmp, "mlp.c")
        rc, out = sh([self.shardc, "compile", PROG, "--fn", "mlp", "--const", CONST, "-o", src])
        text = open(src).read() + open(src[:-2] + ".h").read() if rc == 0 else ""
        self.t.check(rc == 0 and "SK_BACKEND" not in text and "SHARDC_MPI" not in text,
                     "the generated C names no backend", out)

    def threads_only(self, exe):
        rc, text, base = self.run([], exe, "threads")
        self.t.check(base is not None, "threads-only build: runs", text[-800:])
        self.help_says("threads-only build", [], exe, "threads")
        self.refused("threads-only build, SHARDC_BACKEND=mpi", [], exe, {"SHARDC_BACKEND": "mpi"},
                     "built without the MPI backend")
        self.refused("threads-only build, SHARDC_BACKEND=gpu", [], exe, {"SHARDC_BACKEND": "gpu"},
                     "the backends are threads and mpi")
        return base

    def mpi_build(self, exe, base, have_mpirun):
        rc, text, got = self.run([], exe, "direct")
        whole = "io: process 0: --in x: read 2176 of 2176 bytes" in text
        self.t.check(got == base and whole, "--backend mpi build run directly: one process reads x whole, the "
                     "threads-only build's bits", "status %d, same %s\n%s" % (rc, got == base, text[-800:]))
        self.help_says("--backend mpi build run directly", [], exe, "threads")
        self.help_says("--backend mpi build, SHARDC_BACKEND=mpi", [], exe, "mpi", {"SHARDC_BACKEND": "mpi"})
        rc, text, got = self.run([], exe, "singleton", {"SHARDC_BACKEND": "mpi"})
        self.t.check(got == base, "SHARDC_BACKEND=mpi, run directly: one MPI process, the same bits", text[-800:])
        self.refused("--backend mpi build, SHARDC_BACKEND=gpu", [], exe, {"SHARDC_BACKEND": "gpu"},
                     "the backends are threads and mpi")
        if not have_mpirun:
            print("# skipped: mpirun runs of the --backend mpi build (no mpirun)")
            return
        for np_ in (2, 8):
            rc, text, got = self.run(mpirun(np_), exe, "mpi-%d" % np_)
            procs = set(re.findall(r"io: process (\d+): --in x: read (\d+) of 2176", text))
            part = len(procs) == np_ and all(int(n) < 2176 for _, n in procs)
            self.t.check(got == base and part, "under mpirun -np %d: each process reads its part of x, the threads "
                         "run's bits" % np_, "status %d, same %s, reads %s\n%s" % (rc, got == base, sorted(procs),
                                                                                 text[-800:]))
        self.help_says("--backend mpi build under mpirun -np 1, SHARDC_BACKEND=threads", mpirun(1) + [
            "-x", "SHARDC_BACKEND=threads"], exe, "threads")

    def threads_only_launched(self, exe):
        self.refused("threads-only build under mpirun -np 2", mpirun(2), exe, None,
                     "started by an MPI launcher as one of 2 processes")


def main():
    ap = script_args.new_parser(__doc__, "check-backend")
    args = script_args.parse(ap)
    t = Tap()
    c = Check(args.shardc, args.tmp, t)
    c.generated_c()
    exe = c.build("threads")
    base = c.threads_only(exe) if exe else None
    have_mpi = script_args.has_mpi(args.shardc)
    have_mpirun = shutil.which((os.environ.get("MPIRUN") or "mpirun").split()[0]) is not None
    if not have_mpi:
        print("# skipped: the --backend mpi build (no libshardc_rt_mpi.a)")
        return t.summary()
    if exe and have_mpirun:
        c.threads_only_launched(exe)
    mexe = c.build("mpi")
    if mexe and base is not None:
        c.mpi_build(mexe, base, have_mpirun)
    return t.summary()


if __name__ == "__main__":
    sys.exit(main())
