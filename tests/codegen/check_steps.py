#!/usr/bin/python3
"""Training steps in one process (docs/cli.md, "Training steps"): the step
functions of tests/codegen/progs/steps.tdsl run N times with --steps, each
result named like a parameter becoming that parameter for the next step,
against the same loop in NumPy (f64; f32 tolerances):

- `shardc run --steps 40 --log-every 7` on the threads backend and on MPI
  (--np 2: 2 processes x 2 devices): the printed lines are exactly
  "step S: l V" for S = 1 (the first step's: the starting parameters'
  loss), 7, 14, ..., 35 and 40, V NumPy's loss before step S's update; DIR holds result0..2 (the last step's results) and w.npy,
  v.npy (the final parameters, bit for bit the carried results) and
  nothing else, w and v NumPy's after 40 steps; with --check, the
  one-device run takes the same steps without printing, and its last
  results agree;
- the built programs (`shardc build`) in every layout of processes x local
  devices, threads 1x4 and MPI 4x1, 2x2 (--local-devices 2), 1x4: a bias
  (replicated), a carried scalar step counter t that is not printed, an
  unnamed scalar printed as result4, x returned unchanged (carried as it
  is), the default --log-every (25 steps: the 1st, every 2nd, and the 25th); every
  layout gives the threads run's bits;
- --outputs local on MPI 2x2: each process writes its part of w as
  w.process{p}.npy, which put together make the gathered w;
- errors, status 2 before anything runs and no DIR written: a result named
  like a parameter but split another way or of another dtype (both types
  said), no result named like a parameter, --steps 0 / -3 / 2x,
  --log-every without --steps, --repeat with --steps; on MPI said once.

    tests/codegen/check_steps.py [--shardc build/shardc] [--tmp DIR] [--jobs 2]
        [--backend threads,mpi]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import concurrent.futures
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
from check_numpy import mpirun  # noqa: E402

PROG = os.path.join(ROOT, "tests", "codegen", "progs", "steps.tdsl")
TIMEOUT = 300
B, D, E = 8, 6, 5
RTOL, ATOL = 2e-4, 2e-6            # f32 against f64 over tens of steps
LINE = re.compile(r"^step (\d+):((?: \w+ \S+)+)$")


# ---- the same loops in NumPy (f64) ----

def inputs(d):
    rng = np.random.default_rng(15)
    x = rng.standard_normal((B, D))
    w_true = rng.standard_normal((D, E))
    arrays = {
        "x": x, "y": x @ w_true + 0.1 * rng.standard_normal((B, E)),
        "w": 0.1 * rng.standard_normal((D, E)), "v": np.zeros((D, E)),
        "b": 0.1 * rng.standard_normal(E), "t": np.zeros(()),
    }
    arrays = {k: a.astype(np.float32) for k, a in arrays.items()}
    for k, a in arrays.items():
        np.save(os.path.join(d, k + ".npy"), a)
    return arrays


def momentum(a, n):
    """(per-step printed scalars, last step's results, final parameters)."""
    x, y, w, v = (a[k].astype(np.float64) for k in "xywv")
    logs = []
    for _ in range(n):
        r = x @ w - y
        loss, g = (r * r).sum() / 40, 2 * x.T @ r / 40
        v = 0.9 * v + g
        w = w - 0.05 * v
        logs.append({"l": loss})
    return logs, [loss, w, v], {"w": w, "v": v}


def biased(a, n):
    x, y, w, b, t = (a[k].astype(np.float64) for k in "xywbt")
    logs = []
    for _ in range(n):
        r = x @ w + b - y
        loss, gw, gb = (r * r).sum() / 40, 2 * x.T @ r / 40, 2 * r.sum(axis=0) / 40
        lr = 0.2 / (1 + 0.1 * t)
        w, b, t = w - lr * gw, b - lr * gb, t + 1
        norm = np.sqrt((gw * gw).sum())
        logs.append({"l": loss, "result4": norm})
    return logs, [loss, w, b, t, norm, x], {"w": w, "b": b, "t": t, "x": x}


LOOPS = {"momentum": (momentum, "xywv"), "biased": (biased, "xywbt")}


def close(got, want):
    return got.shape == np.shape(want) and np.allclose(got, want, rtol=RTOL, atol=ATOL)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class Harness:
    def __init__(self, args):
        self.shardc = args.shardc
        self.tmp = args.tmp
        self.jobs = args.jobs
        self.tap = Tap()
        have_mpi = script_args.can_run_mpi(self.shardc)
        self.backends = [b for b in (args.backend or "threads,mpi").split(",") if b != "mpi" or have_mpi]
        self.skipped = [] if have_mpi or "mpi" not in (args.backend or "mpi") else ["mpi (not built)"]
        self.exes = {}

    def run(self, argv, tag, env=None):
        """(status, stdout, stderr); an mpirun keeps its session files in its
        own folder and is tried again when it fails to start."""
        env = dict(os.environ, **(env or {}))
        env.pop("SHARDC_LOCAL_DEVICES", None)
        env["OMPI_MCA_orte_tmpdir_base"] = os.path.join(self.tmp, "mpi-session-" + tag)
        os.makedirs(env["OMPI_MCA_orte_tmpdir_base"], exist_ok=True)
        for _ in range(2):
            try:
                p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=TIMEOUT, env=env)
                rc, out, err = p.returncode, p.stdout, p.stderr
            except subprocess.TimeoutExpired:
                rc, out, err = 124, "", "timed out after %d s" % TIMEOUT
            if rc == 0 or "orte_init failed" not in err:
                break
        return rc, out, err

    def build(self, fn, backend):
        exe = os.path.join(self.tmp, "bin", "%s_%s" % (fn, backend))
        rc, out, err = self.run([self.shardc, "build", PROG, "--fn", fn, "--backend", backend, "-o", exe],
                                "build-%s-%s" % (fn, backend))
        return (fn, backend), exe if rc == 0 else None, out + err

    def argv(self, fn, layout, args):
        backend, P, L = layout
        exe = self.exes.get((fn, backend))
        if backend == "threads":
            return [exe] + args
        return mpirun(P) + [exe] + args + ["--local-devices", str(L)]

    def ins(self, fn, d):
        return sum((["--in", "%s=%s" % (k, os.path.join(d, k + ".npy"))] for k in LOOPS[fn][1]), [])

    # ---- a run against NumPy ----

    def check_log(self, out, logs, want_steps, what):
        """The printed lines: exactly want_steps, each with NumPy's scalars
        (of the step before its update) in order."""
        lines = out.splitlines()
        problems = []
        got_steps = []
        for line in lines:
            m = LINE.match(line)
            if not m:
                problems.append("unexpected line %r" % line)
                continue
            s = int(m.group(1))
            got_steps.append(s)
            items = m.group(2).split()
            names, values = items[0::2], items[1::2]
            want = logs[s - 1] if 1 <= s <= len(logs) else {}
            if names != list(want):
                problems.append("step %d prints %s, not %s" % (s, names, list(want)))
                continue
            for k, v in zip(names, values):
                if not np.isclose(float(v), want[k], rtol=RTOL, atol=ATOL):
                    problems.append("step %d: %s %s, NumPy %.7g" % (s, k, v, want[k]))
        if got_steps != want_steps:
            problems.append("printed steps %s, not %s" % (got_steps, want_steps))
        return self.tap.check(not problems, what, "; ".join(problems[:5]))

    def check_files(self, out_dir, last, final, what):
        """DIR: result0.. (the last step's results) and NAME.npy per carried
        parameter, the carried result's bits; nothing else."""
        problems = []
        want_files = {"result%d.npy" % i for i in range(len(last))} | {k + ".npy" for k in final}
        have = set(os.listdir(out_dir)) if os.path.isdir(out_dir) else set()
        if have != want_files:
            return self.tap.check(False, what, "files %s, not %s" % (sorted(have), sorted(want_files)))
        got = {}
        for i, want in enumerate(last):
            got["result%d" % i] = a = np.load(os.path.join(out_dir, "result%d.npy" % i))
            if not close(a, want):
                problems.append("result%d differs from NumPy's by %.3g" % (i, np.max(np.abs(a - want))))
        for k, want in final.items():
            got[k] = a = np.load(os.path.join(out_dir, k + ".npy"))
            if a.dtype != np.float32 or not close(a, want):
                problems.append("%s.npy is not NumPy's final %s (%s, %r vs %r)" % (k, k, a.dtype, a, want))
        return self.tap.check(not problems, what, "; ".join(problems[:4])), got

    def numpy_case(self, fn, n, log_every, argv_of, tag, d):
        """Run argv_of(out_dir) and check its log and files; returns the
        files' arrays or None."""
        loop, _ = LOOPS[fn]
        logs, last, final = loop(self.arrays, n)
        k = log_every or max(1, n // 10)
        want_steps = [s for s in range(1, n + 1) if s == 1 or s % k == 0 or s == n]
        out_dir = os.path.join(d, "out")
        shutil.rmtree(out_dir, ignore_errors=True)
        rc, out, err = self.run(argv_of(out_dir), tag.replace(" ", "-"))
        if not self.tap.check(rc == 0, tag + ": runs", "status %d: %s" % (rc, (err + out)[-1500:])):
            return None
        self.check_log(out, logs, want_steps, tag + ": prints steps %s..%d, NumPy's scalars" % (want_steps[:2], n))
        ok, got = self.check_files(out_dir, last, final, tag + ": the last results and the final parameters "
                                   "are NumPy's")
        # The final parameters are the carried results, bit for bit.
        carried = {"momentum": {"w": 1, "v": 2}, "biased": {"w": 1, "b": 2, "t": 3, "x": 5}}[fn]
        if ok:
            self.tap.check(all(same(got[k], got["result%d" % i]) for k, i in carried.items()),
                           tag + ": NAME.npy holds the carried result's bits")
        return got if ok else None

    def shardc_run(self):
        """Through `shardc run`, which builds and runs."""
        base = None
        for backend, np_ in (("threads", None), ("mpi", 2)):
            if backend not in self.backends:
                continue
            tag = "shardc run momentum --steps 40 --log-every 7 (%s%s)" % (backend, ", --np 2" if np_ else "")
            d = os.path.join(self.tmp, "run-" + backend)
            os.makedirs(d, exist_ok=True)
            extra = ["--backend", "mpi", "--np", str(np_)] if np_ else []

            def argv_of(out_dir, extra=extra):
                return [self.shardc, "run", PROG, "--fn", "momentum", "--steps", "40", "--log-every", "7",
                        "--out", out_dir] + self.ins("momentum", self.data) + extra
            got = self.numpy_case("momentum", 40, 7, argv_of, tag, d)
            if got is not None and base is None:
                base = got
            elif got is not None:
                self.tap.check(all(same(got[k], base[k]) for k in base), tag + ": the threads run's bits")

    def run_check(self):
        """shardc run --check --steps: the one-device run takes the same
        steps, its lines unprinted, and the last results agree."""
        out_dir = os.path.join(self.tmp, "run-check", "out")
        os.makedirs(os.path.dirname(out_dir), exist_ok=True)
        rc, out, err = self.run([self.shardc, "run", PROG, "--fn", "momentum", "--steps", "12", "--log-every", "6",
                                 "--check", "--out", out_dir] + self.ins("momentum", self.data), "run-check")
        errors = [float(e) for e in re.findall(r"^check: result\d: largest absolute error (\S+),", out, re.M)]
        steps = re.findall(r"^step \d+:", out, re.M)
        self.tap.check(rc == 0 and steps == ["step 1:", "step 6:", "step 12:"] and len(errors) == 3 and max(errors) < 1e-4,
                       "shardc run --check --steps 12: one log, the one-device run's last results",
                       "status %d: %s%s" % (rc, out, err[-1000:]))

    def layouts(self):
        """The built programs in each layout, the biased step, default --log-every."""
        layouts = [("threads", 1, 4)] + [("mpi", P, 4 // P) for P in (4, 2, 1) if "mpi" in self.backends]
        base = None
        for lay in layouts:
            if not self.exes.get(("biased", lay[0])):
                continue
            tag = "biased --steps 25 (%s %dx%d)" % lay
            d = os.path.join(self.tmp, "layout-%s-%d" % (lay[0], lay[1]))
            os.makedirs(d, exist_ok=True)
            got = self.numpy_case("biased", 25, None, lambda o, lay=lay: self.argv(
                "biased", lay, self.ins("biased", self.data) + ["--out", o, "--steps", "25"]), tag, d)
            if got is not None and base is None:
                base = got
            elif got is not None:
                self.tap.check(all(same(got[k], base[k]) for k in base), tag + ": the threads run's bits")

    def local_outputs(self):
        """--outputs local on MPI 2x2: w's parts, w.process{p}.npy."""
        if not self.exes.get(("momentum", "mpi")):
            return
        lay, tag = ("mpi", 2, 2), "momentum --steps 12 --outputs local (mpi 2x2)"
        d = os.path.join(self.tmp, "local")
        os.makedirs(d, exist_ok=True)
        _, last, final = momentum(self.arrays, 12)
        rc, out, err = self.run(self.argv("momentum", lay, self.ins("momentum", self.data) + [
            "--out", os.path.join(d, "out"), "--steps", "12", "--outputs", "local"]), "local")
        if not self.tap.check(rc == 0, tag + ": runs", "status %d: %s" % (rc, err[-1500:])):
            return
        problems = []
        want = {"result%d.process%d.npy" % (i, p) for i in range(3) for p in range(2)} | \
            {"%s.process%d.npy" % (k, p) for k in "wv" for p in range(2)}
        have = set(os.listdir(os.path.join(d, "out")))
        if have != want:
            problems.append("files %s, not %s" % (sorted(have), sorted(want)))
        else:
            # w: f32[D, E@Y] is split only over Y, so each process (devices
            # 2p and 2p + 1, both Y coordinates) holds all of it.
            for k in "wv":
                for p in range(2):
                    a = np.load(os.path.join(d, "out", "%s.process%d.npy" % (k, p)))
                    r = np.load(os.path.join(d, "out", "result%d.process%d.npy" % ("_wv".index(k), p)))
                    if not close(a, final[k]) or not same(a, r):
                        problems.append("%s.process%d.npy is not NumPy's final %s / its result's part" % (k, p, k))
        self.tap.check(not problems, tag + ": each process writes its part of w and v", "; ".join(problems))

    # ---- errors ----

    def check_error(self, argv, texts, what, tag, out_dir, status=2):
        rc, out, err = self.run(argv, tag)
        missing = [t for t in texts if t not in err]
        wrote = os.path.exists(out_dir)
        said = err.count(texts[0]) if texts else 1
        self.tap.check(rc == status and not missing and not wrote and said == 1 and "step " not in out, what,
                       "status %d (want %d), missing %r, said %d times, %s: %s" % (
                           rc, status, missing, said, "wrote DIR" if wrote else "no DIR", (err + out)[-1200:]))

    def errors(self):
        d = os.path.join(self.tmp, "errors")
        os.makedirs(d, exist_ok=True)
        out_dir = os.path.join(d, "out")
        ins = sum((["--in", "%s=%s" % (k, os.path.join(self.data, k + ".npy"))] for k in "xyw"), [])
        resharded = ["'resharded' returns w as result1, of type f32[6@Y, 5], but its parameter w is f32[6, 5@Y]",
                     "needs the parameter's type and sharding"]
        retyped = ["'retyped' returns w as result1, of type f64[6, 5@Y], but its parameter w is f32[6, 5@Y]"]
        unnamed = ["no result of 'unnamed' is named like one of its parameters (x, y, w)"]
        layouts = [("threads", 1, 4)] + ([("mpi", 2, 2)] if "mpi" in self.backends else [])
        for lay in layouts:
            for fn, texts in (("resharded", resharded), ("retyped", retyped), ("unnamed", unnamed)):
                if self.exes.get((fn, lay[0])):
                    self.check_error(self.argv(fn, lay, ins + ["--out", out_dir, "--steps", "3"]),
                                     ["error: --steps: " + texts[0]] + texts[1:],
                                     "%s --steps 3 (%s %dx%d) is an error" % ((fn,) + lay), "err", out_dir)
        for lay in layouts:
            if not self.exes.get(("momentum", lay[0])):
                continue
            mins = self.ins("momentum", self.data) + ["--out", out_dir]
            for args, texts in ((["--steps", "0"], ["--steps '0': a whole number of steps from 1 to 2000000000"]),
                                (["--steps", "-3"], ["--steps '-3': a whole number of steps"]),
                                (["--steps", "2x"], ["--steps '2x': a whole number of steps"]),
                                (["--steps", "4", "--log-every", "0"], ["--log-every '0': a whole number of steps"]),
                                (["--log-every", "2"], ["--log-every goes with --steps"]),
                                (["--steps", "4", "--repeat", "2"], ["--repeat and --steps do not combine"])):
                self.check_error(self.argv("momentum", lay, mins + args), ["error: " + texts[0], "usage:"],
                                 "momentum %s (%s %dx%d) is a usage error" % ((" ".join(args),) + lay), "usage",
                                 out_dir)
        # Without --steps, nothing is carried and no NAME.npy is written.
        rc, out, err = self.run(self.argv("momentum", ("threads", 1, 4), self.ins("momentum", self.data) +
                                          ["--out", out_dir]), "plain")
        have = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
        self.tap.check(rc == 0 and have == ["result0.npy", "result1.npy", "result2.npy"] and not out,
                       "momentum without --steps: one run, result files only, nothing printed",
                       "status %d, files %s, stdout %r: %s" % (rc, have, out, err[-800:]))
        shutil.rmtree(out_dir, ignore_errors=True)
        # shardc run checks the values before building.
        for args, text in ((["--steps", "0"], "shardc: error: bad --steps '0'"),
                           (["--log-every", "3"], "shardc: error: --log-every goes with --steps")):
            self.check_error([self.shardc, "run", PROG, "--fn", "momentum", "--out", out_dir] + args +
                             self.ins("momentum", self.data), [text], "shardc run %s is a usage error" % " ".join(args),
                             "shardc-usage", out_dir)
        self.check_error([self.shardc, "run", PROG, "--fn", "unnamed", "--out", out_dir, "--steps", "2"] + ins,
                         ["error: --steps: " + unnamed[0]], "shardc run --fn unnamed --steps 2 is an error",
                         "shardc-unnamed", out_dir)

    def main(self):
        os.makedirs(os.path.join(self.tmp, "bin"))
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        self.arrays = inputs(self.data)
        builds = [(fn, b) for b in self.backends for fn in ("momentum", "biased", "resharded", "retyped", "unnamed")
                  if b == "threads" or fn != "retyped"]
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
            for key, exe, log in pool.map(lambda fb: self.build(*fb), builds):
                self.exes[key] = exe
                self.tap.check(exe is not None, "build %s --backend %s" % key, log[-1500:])
        for s in self.skipped:
            print("skip %s" % s)
        self.shardc_run()
        if "threads" in self.backends:
            self.run_check()
        self.layouts()
        self.local_outputs()
        self.errors()
        return self.tap.summary()


def main():
    ap = script_args.new_parser(__doc__, "check-steps")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--backend", help="comma-separated: threads, mpi (default: both when available)")
    return Harness(script_args.parse(ap)).main()


if __name__ == "__main__":
    sys.exit(main())
