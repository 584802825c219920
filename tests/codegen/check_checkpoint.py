#!/usr/bin/python3
"""Training runs that lose nothing (docs/cli.md, "Checkpoints" and "Files
written"), with the built programs of tests/codegen/progs/steps.tdsl
(momentum: w and v carried, the loss l printed) on the threads backend:

- a run of 6000 steps writing --checkpoint every 250 is killed (SIGKILL)
  once its first checkpoint is there; --resume from it to step 6000 gives
  the uninterrupted run's results and final parameters bit for bit, and
  the same loss lines from the step after the checkpoint's on; the
  checkpoint holds w, v (the parameters' names, so that --in reads it),
  shardc:step and shardc:fn, and after the resumed run is at step 6000;
- the progress on standard error: not on a terminal, a line per
  --log-every K steps and the totals; on one (through script(1)), a line
  rewritten with \\r; standard output keeps only the loss lines, the first
  step's among them; none with SHARDC_PROGRESS=0;
- files whole or absent: no temporary file is left after a run; a result
  that cannot be written (tests/codegen/progs/outputs.tdsl: an i64 past
  2^53) leaves no other result in DIR; a checkpoint that cannot be written
  stops the run with status 1 before its first step;
- records (tests/codegen/progs/records.tdsl's adam_step, Adam on records
  p, m, v): the checkpoint names their fields p.l1.w, ..., and resuming
  from step 3 gives the 6-step run's bits;
- errors: a checkpoint of another fn, one missing a carried parameter, one
  at or past --steps, a file that is no checkpoint, --checkpoint FILE.npy,
  --checkpoint-every without --checkpoint, --resume without --steps;
- `shardc run` passes --checkpoint, --checkpoint-every and --resume on:
  a 40-step run resumed from its step-20 checkpoint by `shardc run
  --check` gives the uninterrupted run's bits, the --check run writing no
  checkpoint and printing no progress of its own;
- on MPI (2 processes x 2 devices, --outputs local), once: the threads
  run's checkpoint resumed, its own checkpoint (gathered) and results the
  threads run's bits.

    tests/codegen/check_checkpoint.py [--shardc build/shardc] [--tmp DIR] [--no-mpi]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from tap import Tap  # noqa: E402
from check_numpy import mpirun  # noqa: E402

STEPS = os.path.join(ROOT, "tests", "codegen", "progs", "steps.tdsl")
OUTPUTS = os.path.join(ROOT, "tests", "codegen", "progs", "outputs.tdsl")
RECORDS = os.path.join(ROOT, "tests", "codegen", "progs", "records.tdsl")
TIMEOUT = 120
N, K, LOG = 6000, 250, 1000
PROGRESS = re.compile(r"^progress: step (\d+) of (\d+), \S+ m?s/step, \S+ steps/s, ETA \S+( s)?$")
TOTALS = re.compile(r"^progress: (\d+) steps?( \(steps (\d+) to (\d+)\))? in \S+( s)?, \S+ m?s/step, \S+ steps/s$")


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class Check:
    def __init__(self, args):
        self.shardc = args.shardc
        self.tmp = args.tmp
        self.tap = Tap()
        self.no_mpi = args.no_mpi
        self.mpi = not args.no_mpi and script_args.can_run_mpi(self.shardc)

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def run(self, argv, env=None):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=TIMEOUT,
                               env=dict(os.environ, **(env or {})))
            return p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            return 124, "", "timed out after %d s" % TIMEOUT

    def build(self, prog, fn, backend="threads"):
        exe = self.path("bin", "%s_%s" % (fn, backend))
        rc, out, err = self.run([self.shardc, "build", prog, "--fn", fn, "--backend", backend, "-o", exe])
        return exe if self.tap.check(rc == 0, "build %s --backend %s" % (fn, backend), (out + err)[-1500:]) else None

    def ins(self):
        return sum((["--in", "%s=%s" % (k, self.path("data", k + ".npy"))] for k in "xywv"), [])

    def outputs(self, d, names=("result0", "result1", "result2", "w", "v")):
        return {k: np.load(os.path.join(d, k + ".npy")) for k in names}

    def no_temps(self, *dirs):
        return [os.path.join(d, f) for d in dirs if os.path.isdir(d) for f in os.listdir(d) if ".tmp" in f]

    # ---- kill and resume ----

    def kill_and_resume(self, mom):
        rc, full_out, err = self.run([mom] + self.ins() + ["--out", self.path("full"), "--steps", str(N),
                                                          "--log-every", str(LOG)])
        if not self.tap.check(rc == 0, "momentum --steps %d runs" % N, err[-800:]):
            return None
        full = self.outputs(self.path("full"))
        ck = self.path("ck", "ck.npz")
        os.makedirs(os.path.dirname(ck))
        with open(self.path("killed.log"), "w") as log:
            p = subprocess.Popen([mom] + self.ins() + ["--out", self.path("killed"), "--steps", str(N), "--log-every",
                                                      str(LOG), "--checkpoint", ck, "--checkpoint-every", str(K)],
                                 stdout=log, stderr=log)
            t0 = time.time()
            while not os.path.exists(ck) and p.poll() is None and time.time() - t0 < TIMEOUT:
                time.sleep(0.002)
            p.send_signal(signal.SIGKILL)
            rc = p.wait()
        self.tap.check(rc == -signal.SIGKILL and not os.path.exists(self.path("killed")),
                       "the run with --checkpoint-every %d is killed after its first checkpoint, before its end" % K,
                       "status %s, DIR %s" % (rc, os.path.exists(self.path("killed"))))
        z = np.load(ck)
        names = sorted(z.files)
        step = int(z["shardc:step"]) if "shardc:step" in names else -1
        fn = bytes(z["shardc:fn"]).decode() if "shardc:fn" in names else None
        if not self.tap.check(names == ["shardc:fn", "shardc:step", "v", "w"] and fn == "momentum" and
                              step % K == 0 and 0 < step < N and z["w"].dtype == np.float32 and z["w"].shape == (6, 5),
                              "the checkpoint is whole: w, v, shardc:step (a multiple of %d), shardc:fn" % K,
                              "arrays %s, step %d, fn %r" % (names, step, fn)):
            return full
        rc, out, err = self.run([mom] + self.ins() + ["--out", self.path("resumed"), "--steps", str(N), "--log-every",
                                                     str(LOG), "--resume", ck, "--checkpoint", ck, "--checkpoint-every",
                                                     str(K)])
        if not self.tap.check(rc == 0, "--resume from step %d runs to %d" % (step, N), err[-800:]):
            return full
        got = self.outputs(self.path("resumed"))
        self.tap.check(all(same(got[k], full[k]) for k in full),
                       "resumed: the uninterrupted run's results and final w, v, bit for bit",
                       "; ".join("%s differs by %.3g" % (k, np.max(np.abs(got[k].astype(float) - full[k])))
                                 for k in full if not same(got[k], full[k])))
        want = ["step %d:" % (step + 1)] + [l for l in full_out.splitlines() if int(l.split()[1][:-1]) > step]
        lines = out.splitlines()
        self.tap.check(lines[:1] and lines[0].startswith(want[0] + " l ") and lines[1:] == want[1:],
                       "resumed: prints step %d's loss, then the uninterrupted run's lines" % (step + 1),
                       "%r, not %r" % (lines, want))
        totals = err.splitlines()[-1:]
        m = TOTALS.match(totals[0]) if totals else None
        self.tap.check(m and m.group(1) == str(N - step) and m.group(3) == str(step + 1) and m.group(4) == str(N),
                       "resumed: the totals say steps %d to %d" % (step + 1, N), repr(err[-400:]))
        z = np.load(ck)
        self.tap.check(int(z["shardc:step"]) == N and same(z["w"], full["w"]) and same(z["v"], full["v"]),
                       "the last checkpoint is at step %d, the final w and v" % N)
        self.tap.check(not self.no_temps(self.path("resumed"), self.path("ck"), self.path("full")),
                       "no temporary file is left", repr(self.no_temps(self.path("resumed"), self.path("ck"))))
        # A checkpoint is an --in archive: the parameters by name.
        rc, out, err = self.run([mom, "--in", ck] + self.ins()[:4] + ["--out", self.path("from-ck")])
        self.tap.check(rc == 0, "--in CHECKPOINT.npz reads w and v from it", err[-600:])
        return full

    # ---- through shardc run ----

    def shardc_run(self, full):
        """shardc run passes the checkpoint options to the program; --check's
        one-device run resumes too, but writes no checkpoint and shows no
        progress."""
        base = [self.shardc, "run", STEPS, "--fn", "momentum"] + self.ins()
        ck = self.path("run-ck", "ck.npz")
        os.makedirs(os.path.dirname(ck))
        rc, out, err = self.run(base + ["--out", self.path("run-first"), "--steps", "20", "--checkpoint", ck,
                                        "--checkpoint-every", "10"])
        z = np.load(ck) if rc == 0 and os.path.exists(ck) else None
        if not self.tap.check(z is not None and int(z["shardc:step"]) == 20,
                              "shardc run --steps 20 --checkpoint --checkpoint-every 10 writes step 20's", err[-600:]):
            return
        rc, full_out, err = self.run(base + ["--out", self.path("run-full"), "--steps", "40"])
        rc2, out, err2 = self.run(base + ["--out", self.path("run-resumed"), "--steps", "40", "--resume", ck,
                                          "--checkpoint", ck, "--check"])
        got = self.outputs(self.path("run-resumed")) if rc2 == 0 else {}
        want = self.outputs(self.path("run-full")) if rc == 0 else {}
        self.tap.check(rc == 0 and rc2 == 0 and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want),
                       "shardc run --resume --check: the 40-step run's bits", (err + err2)[-800:])
        self.tap.check(int(np.load(ck)["shardc:step"]) == 40 and err2.count("progress: 20 steps (steps 21 to 40)") == 1,
                       "--check's one-device run writes no checkpoint and prints no progress", err2[-800:])

    # ---- progress ----

    def progress(self, mom):
        argv = [mom] + self.ins() + ["--out", self.path("progress"), "--steps", "40", "--log-every", "10"]
        rc, out, err = self.run(argv)
        lines = err.splitlines()
        steps = [int(m.group(1)) for m in map(PROGRESS.match, lines[:-1]) if m and m.group(2) == "40"]
        self.tap.check(rc == 0 and steps == [10, 20, 30] and len(lines) == 4 and TOTALS.match(lines[-1]) and
                       TOTALS.match(lines[-1]).group(1) == "40",
                       "not on a terminal: a progress line at steps 10, 20, 30, then the totals", repr(err))
        self.tap.check(re.findall(r"^step (\d+):", out, re.M) == ["1", "10", "20", "30", "40"] and
                       len(out.splitlines()) == 5, "standard output: the loss after steps 1, 10, 20, 30, 40", repr(out))
        rc, quiet, err = self.run(argv, {"SHARDC_PROGRESS": "0"})
        self.tap.check(rc == 0 and quiet == out and err == "", "SHARDC_PROGRESS=0: the loss lines, no progress",
                       repr(err))
        if not shutil.which("script"):
            print("skip the terminal's progress line (no script(1))")
            return
        cmd = " ".join("'%s'" % a for a in argv[:-5] + [self.path("progress-tty"), "--steps", "3000", "--log-every",
                                                         "1000"])
        try:                        # bytes: text mode would read each \r as a line's end
            p = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, timeout=TIMEOUT)
            rc, out, err = p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            rc, out, err = 124, "", "timed out"
        self.tap.check(rc == 0 and "\r\x1b[Kstep " in out and re.search(r"\r\x1b\[Kstep 1000: l \S+\r?\n", out) and
                       re.search(r"progress: 3000 steps in .*steps/s\r?\n", out) and "progress: step" not in out,
                       "on a terminal: one line rewritten (\\r), cleared for each loss line, then the totals",
                       "status %d: %r" % (rc, (out + err)[-600:]))

    # ---- files whole or absent ----

    def files(self, mom):
        late = self.build(OUTPUTS, "late")
        if late:
            np.save(self.path("data", "xl.npy"), np.arange(4, dtype=np.float32))
            np.save(self.path("data", "nl.npy"), np.full(4, 1 << 20, np.int64))
            out_dir = self.path("late")
            rc, out, err = self.run([late, "--in", "x=" + self.path("data", "xl.npy"), "--in",
                                     "n=" + self.path("data", "nl.npy"), "--out", out_dir])
            have = os.listdir(out_dir) if os.path.isdir(out_dir) else []
            self.tap.check(rc == 1 and "result 1: element 0 of the written part is an i64 beyond 2^53" in err and
                           not have, "a result that cannot be written leaves no other result (nor a temporary) in DIR",
                           "status %d, DIR holds %s: %s" % (rc, have, err[-400:]))
        out_dir = self.path("bad-ck-out")
        rc, out, err = self.run([mom] + self.ins() + ["--out", out_dir, "--steps", "4", "--checkpoint",
                                                     self.path("no-such-dir", "ck.npz")])
        self.tap.check(rc == 1 and "error: --checkpoint: cannot write '%s'" % self.path("no-such-dir", "ck.npz") in err
                       and not os.path.exists(out_dir) and not out,
                       "a checkpoint that cannot be written: status 1 before the first step, no results",
                       "status %d, DIR %s: %s" % (rc, os.path.exists(out_dir), err[-400:]))

    # ---- errors ----

    def error(self, argv, text, status, what):
        out_dir = self.path("err-out")
        rc, out, err = self.run(argv + ["--out", out_dir])
        self.tap.check(rc == status and ("error: " + text) in err and not os.path.exists(out_dir), what,
                       "status %d (want %d): %s" % (rc, status, err[-600:]))

    def errors(self, mom, full):
        biased = self.build(STEPS, "biased")
        ins = self.ins()
        if biased:
            ck = self.path("ck-biased.npz")
            rc, out, err = self.run([biased] + ins[:6] + ["--in", "b=" + self.path("data", "b.npy"), "--in",
                                                         "t=" + self.path("data", "t.npy"), "--out",
                                                         self.path("biased-out"), "--steps", "3", "--checkpoint", ck])
            self.tap.check(rc == 0, "biased --steps 3 --checkpoint", err[-600:])
            self.error([mom] + ins + ["--steps", "9", "--resume", ck],
                       "--resume '%s' is a checkpoint of 'biased', not of 'momentum'" % ck, 1,
                       "--resume with another fn's checkpoint")
        w = np.zeros((6, 5), np.float32)
        fn = np.frombuffer(b"momentum", np.uint8)
        missing = self.path("ck-missing.npz")
        np.savez(missing, **{"shardc:step": np.int64(4), "shardc:fn": fn, "w": w})
        self.error([mom] + ins + ["--steps", "9", "--resume", missing],
                   "--resume '%s' has no array 'v', the carried parameter v of 'momentum'" % missing, 1,
                   "--resume with a checkpoint missing a carried parameter")
        at = self.path("ck-at-4.npz")
        np.savez(at, **{"shardc:step": np.int64(4), "shardc:fn": fn, "w": w, "v": w})
        self.error([mom] + ins + ["--steps", "3", "--resume", at],
                   "--resume '%s' is at step 4, beyond --steps 3: give more steps to go on from it" % at, 1,
                   "--resume past --steps")
        self.error([mom] + ins + ["--steps", "4", "--resume", at],
                   "--resume '%s' is at step 4, the last of --steps 4" % at, 1, "--resume at --steps")
        plain = self.path("plain.npz")
        np.savez(plain, w=w, v=w)
        self.error([mom] + ins + ["--steps", "4", "--resume", plain],
                   "--resume '%s' is not a checkpoint: it has no array 'shardc:step'" % plain, 1,
                   "--resume with an archive that is no checkpoint")
        for args, text in ((["--steps", "4", "--checkpoint", "ck.npy"], "--checkpoint 'ck.npy': a checkpoint is a "
                            ".npz archive"),
                           (["--steps", "4", "--checkpoint-every", "2"], "--checkpoint-every goes with --checkpoint"),
                           (["--resume", at], "--resume goes with --steps"),
                           (["--steps", "4", "--checkpoint", "c.npz", "--checkpoint-every", "0"],
                            "--checkpoint-every '0': a whole number of steps")):
            self.error([mom] + ins + args, text, 2, "%s: a usage error" % " ".join(args))

    # ---- records ----

    def records(self):
        """tests/codegen/progs/records.tdsl's adam_step carries records p, m,
        v (Params: l1.w, l1.b, w2, b2) and t: the checkpoint names the fields
        p.l1.w, ..., and resuming gives the uninterrupted run's bits."""
        exe = self.build(RECORDS, "adam_step")
        if not exe:
            return
        rng = np.random.default_rng(5)
        shapes = {"l1.w": (6, 8), "l1.b": (8,), "w2": (8, 4), "b2": (4,)}
        d = self.path("records")
        os.makedirs(d)
        np.save(os.path.join(d, "x.npy"), rng.standard_normal((8, 6)).astype(np.float32))
        np.save(os.path.join(d, "y.npy"), rng.standard_normal((8, 4)).astype(np.float32))
        np.save(os.path.join(d, "t.npy"), np.array(3, np.float32))
        np.savez(os.path.join(d, "state.npz"), **{
            r + "." + k: (rng.standard_normal(s) * (0.5 if r == "p" else 0.1) if r != "v" else
                          rng.uniform(0.01, 0.1, s)).astype(np.float32) for r in "pmv" for k, s in shapes.items()})
        ins = ["--in", os.path.join(d, "state.npz")] + sum((["--in", "%s=%s" % (k, os.path.join(d, k + ".npy"))]
                                                            for k in "xyt"), [])
        ck = os.path.join(d, "ck.npz")
        runs = [self.run([exe] + ins + ["--steps", "6", "--out", os.path.join(d, "full.npz")]),
                self.run([exe] + ins + ["--steps", "3", "--out", os.path.join(d, "three.npz"), "--checkpoint", ck])]
        names = sorted(np.load(ck).files) if runs[1][0] == 0 else []
        want = sorted(["shardc:fn", "shardc:step", "t"] + [r + "." + k for r in "pmv" for k in shapes])
        self.tap.check(all(rc == 0 for rc, _, _ in runs) and names == want,
                       "adam_step --checkpoint: the records' fields by dotted name (p.l1.w, ...) and t",
                       "%s: %s" % (names, "".join(e[-400:] for _, _, e in runs)))
        rc, out, err = self.run([exe] + ins + ["--steps", "6", "--out", os.path.join(d, "resumed.npz"), "--resume", ck])
        if self.tap.check(rc == 0, "adam_step --resume from step 3 to 6", err[-600:]):
            a, b = np.load(os.path.join(d, "full.npz")), np.load(os.path.join(d, "resumed.npz"))
            self.tap.check(sorted(a.files) == sorted(b.files) and all(same(a[k], b[k]) for k in a.files),
                           "adam_step resumed: every result and final record field the uninterrupted run's bits")

    # ---- MPI ----

    def mpi_resume(self, mom):
        exe = self.build(STEPS, "momentum", "mpi")
        if not exe:
            return
        ck10 = self.path("ck10.npz")
        rc, out, err = self.run([mom] + self.ins() + ["--out", self.path("t20"), "--steps", "20"])
        rc2, out, err2 = self.run([mom] + self.ins() + ["--out", self.path("t10"), "--steps", "10", "--checkpoint",
                                                       ck10])
        if not self.tap.check(rc == rc2 == 0, "threads: --steps 20, and --steps 10 --checkpoint", err + err2):
            return
        ckm = self.path("ckm.npz")
        env = {"OMPI_MCA_orte_tmpdir_base": self.path("mpi-session")}
        os.makedirs(env["OMPI_MCA_orte_tmpdir_base"], exist_ok=True)
        rc, out, err = self.run(mpirun(2) + [exe] + self.ins() + [
            "--out", self.path("m20"), "--steps", "20", "--resume", ck10, "--checkpoint", ckm, "--checkpoint-every",
            "5", "--outputs", "local", "--local-devices", "2"], env)
        if not self.tap.check(rc == 0, "MPI 2x2 --outputs local: --resume the threads run's step 10, to 20",
                              err[-800:]):
            return
        want = self.outputs(self.path("t20"), ("w", "v"))
        z = np.load(ckm)
        # w, v: f32[D, E@Y], Y within a process: each process holds all of it.
        parts = all(same(np.load(self.path("m20", "%s.process%d.npy" % (k, p))), want[k]) for k in "wv"
                    for p in range(2))
        self.tap.check(int(z["shardc:step"]) == 20 and same(z["w"], want["w"]) and same(z["v"], want["v"]) and parts,
                       "MPI: its checkpoint (gathered) and each process's w, v are the threads run's bits")

    def main(self):
        os.makedirs(self.path("bin"))
        os.makedirs(self.path("data"))
        rng = np.random.default_rng(15)
        x = rng.standard_normal((8, 6))
        arrays = {"x": x, "y": x @ rng.standard_normal((6, 5)), "w": 0.1 * rng.standard_normal((6, 5)),
                  "v": np.zeros((6, 5)), "b": np.zeros(5), "t": np.zeros(())}
        for k, a in arrays.items():
            np.save(self.path("data", k + ".npy"), a.astype(np.float32))
        mom = self.build(STEPS, "momentum")
        if mom:
            full = self.kill_and_resume(mom)
            self.progress(mom)
            self.files(mom)
            self.errors(mom, full)
            self.shardc_run(full)
            self.records()
            if self.mpi:
                self.mpi_resume(mom)
            else:
                print("skip mpi (%s)" % ("--no-mpi" if self.no_mpi else "not built"))
        return self.tap.summary()


def main():
    ap = script_args.new_parser(__doc__, "check-checkpoint")
    ap.add_argument("--no-mpi", action="store_true")
    return Check(script_args.parse(ap)).main()


if __name__ == "__main__":
    sys.exit(main())
