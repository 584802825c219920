#!/usr/bin/python3
"""Inputs as NumPy users have them (docs/cli.md, "Inputs: NumPy's dtypes
and .npz archives"): tests/codegen/progs/inputs.tdsl's `mix` (f32, i32, f16
and bf16 parameters; results named y and n, and one unnamed) run through
`shardc interp`, `shardc run` (threads backend, 2x2 mesh) and a program
built by `shardc build`, against NumPy:

- float64 and int64 arrays (NumPy's defaults) whose values are exact in the
  parameter's dtype are read, with one warning per such input on standard
  error; with --cast, silently;
- a float64 value not exact in f32 (0.1) is an error without --cast (status
  1, naming the element, the dtype to use and both fixes; nothing written)
  and rounds to f32 with --cast; an int64 value outside i32's range is an
  error with and without --cast, naming the element;
- int64 for an f32 parameter is an error that names f32 and astype;
- `ids`: int64 and uint8 files for i64 and u8 parameters read as they are,
  without a warning, up to 2^53 in magnitude; 2^53 + 1 is an error naming
  the element and the limit; int32 for an i64 parameter names astype(np.int64)
  (interp and run);
- .npz in: `--in data.npz` (every parameter by name), `--in x=data.npz`
  (the array x), `--in x=data.npz:KEY`; a missing array names the archive's
  arrays; np.savez_compressed's archive is refused, naming np.savez;
- .npz out: `--out results.npz` holds result0, result1, result2 and the
  named results y and n, which np.load reads; with --check too;
- a built program's command line: --in=NAME=FILE, --out=DIR, --help, and
  "did you mean" for a misspelled option or --in parameter (also through
  shardc run).

- on MPI (2 processes x 2 devices, when built): each process converts
  only its part, an inexact value in process 1's rows is named by process
  1 with its global index, and archives in and out.

    tests/codegen/check_inputs.py [--shardc build/shardc] [--tmp DIR] [--only REGEX]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from check_numpy import mpirun  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "tests", "codegen", "progs", "inputs.tdsl")


class Checker:
    def __init__(self, shardc, tmp, only):
        self.shardc, self.tmp, self.only = shardc, tmp, re.compile(only or "")
        self.passed = self.failed = 0
        self.prog = None

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok %d - %s" % (self.passed + self.failed, name))
        else:
            self.failed += 1
            print("not ok %d - %s\n    %s" % (self.passed + self.failed, name, detail))
        sys.stdout.flush()

    def runner(self, cmd):
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)

    def run(self, how, args):
        """Run mix by `how` (interp, run or prog) with these arguments."""
        if how == "prog":
            cmd = [self.prog] + args
        else:
            cmd = [self.shardc, how, PROG, "--fn", "mix"] + args
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)


def inputs(rng):
    """Values exact in each parameter's dtype, as float32/int32/float16."""
    x = (rng.integers(-8, 8, (4, 3)) * 0.25).astype(np.float32)
    k = rng.integers(-1000, 1000, 4).astype(np.int32)
    h = np.array([1.5, -2.0, 0.125], np.float16)
    b = np.array([3.0, 0.5, -4.0], np.float32)       # exact in bf16
    return dict(x=x, k=k, h=h, b=b)


def expected(a):
    x, k, h, b = (a[n].astype(np.float32) if n != "k" else a[n] for n in "xkhb")
    return [x * 2, (k + k).astype(np.int32), h.astype(np.float32) + b]


def ins_args(d, name, arrays):
    out = []
    for n, v in arrays.items():
        p = os.path.join(d, "%s.%s.npy" % (name, n))
        np.save(p, v)
        out += ["--in", "%s=%s" % (n, p)]
    return out


def results_of(out, n=3):
    if out.endswith(".npz"):
        z = np.load(out)
        return [z["result%d" % i] for i in range(n)], z
    return [np.load(os.path.join(out, "result%d.npy" % i)) for i in range(n)], None


def same(got, want):
    return all(g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))


def check_widths(c, how, d):
    """float64 and int64 inputs: exact ones read with a warning (--cast: none),
    inexact or out of range ones an error, --cast rounding."""
    rng = np.random.default_rng(1)
    a = inputs(rng)
    wide = dict(x=a["x"].astype(np.float64), k=a["k"].astype(np.int64), h=a["h"].astype(np.float64),
                b=a["b"].astype(np.float64))
    args = ins_args(d, how + "-wide", wide)
    for cast in ([], ["--cast"]):
        out = os.path.join(d, "%s-wide%s" % (how, "-cast" if cast else ""))
        p = c.run(how, args + ["--out", out] + cast)
        warnings = [l for l in p.stderr.splitlines() if "warning:" in l]
        ok = p.returncode == 0 and same(results_of(out)[0], expected(a))
        want_warn = 0 if cast else 4
        ok = ok and len(warnings) == want_warn and all("read as" in w and "--cast" in w for w in warnings)
        ok = ok and (cast or ("holds float64 data" in p.stderr and "holds int64 data" in p.stderr))
        c.check("%s: float64/int64 inputs with exact values%s" % (how, " and --cast" if cast else ""), ok,
                "status %d, stderr %r" % (p.returncode, p.stderr))

    # 0.1 is not exact in f32: an error without --cast, rounded with it.
    inexact = dict(wide, x=wide["x"] + 0.1)
    args = ins_args(d, how + "-inexact", inexact)
    out = os.path.join(d, how + "-inexact")
    p = c.run(how, args + ["--out", out])
    ok = (p.returncode == 1 and "holds float64 data, but f32 is needed" in p.stderr and "element [0, 0]" in p.stderr
          and "astype(np.float32)" in p.stderr and "--cast" in p.stderr and not os.path.exists(out))
    c.check("%s: inexact float64 without --cast is an error" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))
    p = c.run(how, args + ["--out", out, "--cast"])
    want = expected(dict(a, x=inexact["x"].astype(np.float32)))
    ok = p.returncode == 0 and same(results_of(out)[0], want) and "warning" not in p.stderr
    c.check("%s: inexact float64 with --cast rounds to f32" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))

    # bf16 rounding with --cast: 1 + 2^-9 is not a bf16; it rounds to 1.
    args = ins_args(d, how + "-bf16", dict(wide, b=np.array([1 + 2.0 ** -9, 2.0, 3.0])))
    out = os.path.join(d, how + "-bf16")
    p = c.run(how, args + ["--out", out])
    ok = p.returncode == 1 and "but bf16 is needed" in p.stderr and "element [0]" in p.stderr
    c.check("%s: float64 not exact in bf16 is an error" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))
    p = c.run(how, args + ["--out", out, "--cast"])
    got = results_of(out)[0] if p.returncode == 0 else None
    ok = got is not None and np.array_equal(got[2], a["h"].astype(np.float32) + np.array([1, 2, 3], np.float32))
    c.check("%s: --cast rounds float64 to bf16" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))

    for cast in ([], ["--cast"]):
        big = dict(wide, k=np.array([1, 2, 3000000000, 4], np.int64))
        args = ins_args(d, how + "-big", big)
        out = os.path.join(d, how + "-big")
        p = c.run(how, args + ["--out", out] + cast)
        ok = (p.returncode == 1 and "holds int64 data" in p.stderr and "element [2] (3000000000)" in p.stderr
              and "outside i32's range" in p.stderr and not os.path.exists(out))
        c.check("%s: int64 outside i32's range is an error%s" % (how, " with --cast" if cast else ""), ok,
                "status %d, stderr %r" % (p.returncode, p.stderr))

    args = ins_args(d, how + "-i64f32", dict(a, x=a["x"].astype(np.int64)))
    p = c.run(how, args + ["--out", os.path.join(d, how + "-i64f32")])
    ok = p.returncode == 1 and "holds <i8 (int64) data, but f32 is needed" in p.stderr and "astype(np.float32)" in p.stderr
    c.check("%s: int64 for an f32 parameter names the fix" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))


def check_ids(c, how, d):
    """i64 and u8 parameters: NumPy's int64 and uint8 arrays as they are."""
    def run(name, t, b):
        args = ins_args(d, how + "-" + name, dict(t=t, b=b))
        out = os.path.join(d, how + "-" + name)
        return c.runner([c.shardc, how, PROG, "--fn", "ids"] + args + ["--out", out]), out

    t = np.array([2**53, -(2**53), 3000000000, -1, 7], np.int64)
    b = np.array([0, 255, 128, 3], np.uint8)
    p, out = run("ids", t, b)
    ok = p.returncode == 0 and "warning" not in p.stderr and same(results_of(out)[0], [t, b, t.astype(np.int32)])
    c.check("%s: int64 and uint8 files for i64 and u8 parameters, exact to 2^53" % how, ok,
            "status %d, stderr %r" % (p.returncode, p.stderr))
    p, out = run("ids-big", np.array([1, 2, 2**53 + 1, 4, 5], np.int64), b)
    ok = (p.returncode == 1 and "element [2] (9007199254740993) is beyond 2^53" in p.stderr
          and not os.path.exists(out))
    c.check("%s: an int64 value beyond 2^53 for an i64 parameter is an error" % how, ok,
            "status %d, stderr %r" % (p.returncode, p.stderr))
    p, out = run("ids-i32", t.astype(np.int32), b)
    ok = p.returncode == 1 and "but i64 is needed" in p.stderr and "astype(np.int64)" in p.stderr
    c.check("%s: int32 for an i64 parameter names the fix" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))


def check_npz(c, how, d):
    """.npz archives in and out."""
    rng = np.random.default_rng(2)
    a = inputs(rng)
    arch = os.path.join(d, how + "-in.npz")
    np.savez(arch, **a)
    for out in (os.path.join(d, how + "-out.npz"), os.path.join(d, how + "-outdir")):
        p = c.run(how, ["--in", arch, "--out", out])
        got, z = results_of(out) if p.returncode == 0 else ([], None)
        ok = p.returncode == 0 and same(got, expected(a))
        if z is not None:
            ok = ok and sorted(z.files) == ["n", "result0", "result1", "result2", "y"]
            ok = ok and np.array_equal(z["y"], z["result0"]) and np.array_equal(z["n"], z["result1"])
        c.check("%s: --in data.npz (every parameter), --out %s" % (how, os.path.basename(out)), ok,
                "status %d, stderr %r" % (p.returncode, p.stderr))

    # One array by name, one by key, an explicit --in beside the archive.
    other = os.path.join(d, how + "-other.npz")
    x2 = (a["x"] + 1).astype(np.float32)
    np.savez(other, arr_0=x2, k=a["k"])
    out = os.path.join(d, how + "-keys.npz")
    p = c.run(how, ["--in", "x=%s:arr_0" % other, "--in", "k=" + other, "--in", arch, "--out=" + out])
    ok = p.returncode == 0 and same(results_of(out)[0], expected(dict(a, x=x2)))
    c.check("%s: --in x=data.npz:arr_0, --in k=data.npz and an archive for the rest" % how, ok,
            "status %d, stderr %r" % (p.returncode, p.stderr))

    # float64 in an archive converts as a .npy does.
    wide = os.path.join(d, how + "-wide.npz")
    np.savez(wide, x=a["x"].astype(np.float64), k=a["k"].astype(np.int64), h=a["h"], b=a["b"])
    out = os.path.join(d, how + "-wide-out.npz")
    p = c.run(how, ["--in", wide, "--out", out])
    ok = p.returncode == 0 and same(results_of(out)[0], expected(a)) and p.stderr.count("warning:") == 2
    c.check("%s: float64 and int64 arrays in an archive" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))

    p = c.run(how, ["--in", "x=%s:nope" % other, "--in", arch, "--out", os.path.join(d, how + "-nope")])
    ok = p.returncode == 1 and "has no array named 'nope' (it has: arr_0, k)" in p.stderr
    c.check("%s: a missing array names the archive's" % how, ok, "status %d, stderr %r" % (p.returncode, p.stderr))

    comp = os.path.join(d, how + "-compressed.npz")
    np.savez_compressed(comp, **a)
    out = os.path.join(d, how + "-comp")
    p = c.run(how, ["--in", comp, "--out", out])
    ok = p.returncode == 1 and "np.savez, not np.savez_compressed" in p.stderr and not os.path.exists(out)
    c.check("%s: a compressed archive is refused, naming np.savez" % how, ok,
            "status %d, stderr %r" % (p.returncode, p.stderr))


def check_cli(c, d):
    """A generated program's command line: --opt=VALUE, --help, and the
    nearest name for a misspelled option or --in parameter (shardc run's
    --in goes to the program)."""
    a = inputs(np.random.default_rng(5))
    args = ins_args(d, "cli", a)
    out = os.path.join(d, "cli-out")
    p = c.run("prog", ["--in=x=" + args[1].split("=", 1)[1]] + args[2:] + ["--out=" + out, "--cast"])
    ok = p.returncode == 0 and same(results_of(out)[0], expected(a))
    c.check("prog: --in=NAME=FILE and --out=DIR", ok, "status %d, stderr %r" % (p.returncode, p.stderr))
    p = c.run("prog", ["--help"])
    ok = p.returncode == 0 and p.stdout.startswith("usage: ") and "--in FILE.npz" in p.stdout and "--cast" in p.stdout
    c.check("prog: --help", ok, "status %d, stdout %r" % (p.returncode, p.stdout))
    p = c.run("prog", args + ["--ot", out])
    ok = p.returncode == 2 and "error: unknown option '--ot'; did you mean '--out'?" in p.stderr
    c.check("prog: a misspelled option names the nearest", ok, "status %d, stderr %r" % (p.returncode, p.stderr))
    for how in ("prog", "run"):
        bad = ["--in", "X=" + args[1].split("=", 1)[1]] + args[2:]
        out = os.path.join(d, how + "-cli-bad")
        p = c.run(how, bad + ["--out", out])
        ok = (p.returncode == 1 and "has no parameter named 'X'; did you mean 'x'?" in p.stderr
              and not os.path.exists(out))
        c.check("%s: a misspelled --in parameter names the nearest" % how, ok,
                "status %d, stderr %r" % (p.returncode, p.stderr))


def check_run_check(c, d):
    """shardc run --check with --out results.npz reads the archive back."""
    a = inputs(np.random.default_rng(3))
    arch = os.path.join(d, "check-in.npz")
    np.savez(arch, **a)
    out = os.path.join(d, "check-out.npz")
    p = c.run("run", ["--in", arch, "--out", out, "--check"])
    ok = p.returncode == 0 and p.stdout.count("largest absolute error 0,") == 3 and same(results_of(out)[0], expected(a))
    c.check("run --check --out results.npz", ok, "status %d, stdout %r, stderr %r" % (p.returncode, p.stdout, p.stderr))


def check_mpi(c, d):
    """A built MPI program as 2 processes x 2 devices: each process reads only
    its rows of x, converting them; an inexact value in process 1's rows is
    named by process 1 at its global index; an archive is read by both."""
    exe = os.path.join(c.tmp, "mix-mpi")
    p = subprocess.run([c.shardc, "build", PROG, "--fn", "mix", "--backend", "mpi", "-o", exe], capture_output=True,
                       text=True)
    if p.returncode:
        c.check("build mix for MPI", False, p.stderr)
        return
    a = inputs(np.random.default_rng(4))
    wide = dict(x=a["x"].astype(np.float64), k=a["k"].astype(np.int64), h=a["h"], b=a["b"])
    env = dict(os.environ, OMPI_MCA_orte_tmpdir_base=os.path.join(c.tmp, "mpi-session"))
    env.pop("SHARDC_LOCAL_DEVICES", None)
    os.makedirs(env["OMPI_MCA_orte_tmpdir_base"], exist_ok=True)

    def mpi(args):
        return subprocess.run(mpirun(2) + [exe, "--local-devices", "2"] + args, capture_output=True, text=True, errors="replace",
                              timeout=300, env=env)
    out = os.path.join(d, "mpi-wide")
    p = mpi(ins_args(d, "mpi-wide", wide) + ["--out", out])
    ok = p.returncode == 0 and same(results_of(out)[0], expected(a)) and p.stderr.count("warning:") == 2
    c.check("mpi 2x2: float64/int64 inputs, each process its part", ok, "status %d, stderr %r" % (p.returncode, p.stderr))
    x = wide["x"].copy()
    x[3, 1] += 0.1                                  # in process 1's rows only
    out = os.path.join(d, "mpi-inexact")
    p = mpi(ins_args(d, "mpi-inexact", dict(wide, x=x)) + ["--out", out])
    ok = p.returncode == 1 and "process 1: --in x:" in p.stderr and "element [3, 1]" in p.stderr and not os.path.exists(out)
    c.check("mpi 2x2: an inexact value in process 1's part is named there", ok,
            "status %d, stderr %r" % (p.returncode, p.stderr))
    arch = os.path.join(d, "mpi-in.npz")
    np.savez(arch, **a)
    out = os.path.join(d, "mpi-out.npz")
    p = mpi(["--in", arch, "--out", out])
    ok = p.returncode == 0 and same(results_of(out)[0], expected(a))
    c.check("mpi 2x2: --in data.npz, --out results.npz", ok, "status %d, stderr %r" % (p.returncode, p.stderr))


def main():
    ap = script_args.new_parser(__doc__, "check-inputs")
    ap.add_argument("--only", help="run only the checks of these ways (interp, run, prog, mpi), a regex")
    args = script_args.parse(ap)
    c = Checker(args.shardc, args.tmp, args.only)
    c.prog = os.path.join(c.tmp, "mix")
    built = False
    if c.only.search("prog"):
        p = subprocess.run([c.shardc, "build", PROG, "--fn", "mix", "-o", c.prog], capture_output=True, text=True,
                           errors="replace")
        c.check("build mix", p.returncode == 0, p.stderr)
        built = p.returncode == 0
    for how in ("interp", "run", "prog"):
        if not c.only.search(how) or (how == "prog" and not built):
            continue
        d = os.path.join(c.tmp, how)
        os.makedirs(d)
        for step in (check_widths, check_npz) + ((check_ids,) if how != "prog" else ()):
            try:
                step(c, how, d)
            except Exception as e:                  # a broken step is a failure, not a crash
                c.check("%s %s" % (how, step.__name__), False, "%s: %s" % (type(e).__name__, e))
    if c.only.search("run"):
        check_run_check(c, c.tmp)
    if built:
        check_cli(c, c.tmp)
    have_mpi = script_args.can_run_mpi(c.shardc)
    if c.only.search("mpi") and have_mpi:
        check_mpi(c, c.tmp)
    elif c.only.search("mpi"):
        print("skip mpi: not built")
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
