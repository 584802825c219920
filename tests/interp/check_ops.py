#!/usr/bin/python3
"""Check `shardc interp` (the reference interpreter) against NumPy.

Runs every case of the oracle table (tests/interp/oracles.py: the programs of
tests/interp/progs/, the samples and the partitioning golden programs) on
random inputs with fixed seeds, and compares every result with the same
computation written independently in NumPy: within a tolerance per dtype
(f32 1e-5, bf16 1e-2, f16 1e-3 relative), exactly for i32, bool and the
casts.  An spmd fn and its auto-partitioned twin must also agree with each
other.  Then checks that bad inputs end in a clear error, exit status 1 (2
for command line misuse) and no output file.  The same table drives the
generated programs' check, tests/codegen/check_numpy.py.

    tests/interp/check_ops.py [--shardc build/shardc] [--tmp DIR]

Prints PASS/FAIL per check and ends with "N passed, N failed".
"""
import concurrent.futures
import os
import re
import subprocess
import sys

import numpy as np

from oracles import CASES, PROGS, ROOT, bf16, compare, seed

sys.path.insert(0, os.path.join(ROOT, "tests", "codegen"))
import script_args  # noqa: E402


class Checker:
    def __init__(self, shardc, tmp):
        self.shardc = shardc
        self.tmp = tmp
        self.passed = 0
        self.failed = 0
        self.runs = 0
        self.meshes = {}

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("PASS", name)
        else:
            self.failed += 1
            print("FAIL", name + (": " + detail if detail else ""))

    def run(self, args):
        self.runs += 1
        return subprocess.run([self.shardc] + args, capture_output=True, text=True, errors="replace")

    def mesh_of(self, path):
        """The program's mesh: [(axis, size)] as written ([] for one device)."""
        if path not in self.meshes:
            p = self.run(["dump", path, "--stage", "parsed"])
            first = p.stdout.splitlines()[0] if p.returncode == 0 and p.stdout else ""
            self.meshes[path] = [(a, int(n)) for a, n in re.findall(r"(\w+)=(\d+)", first)]
        return self.meshes[path]

    def interp(self, prog, fn, inputs, mesh=None, consts=None, flags=()):
        """Run fn of prog on inputs (name -> array); returns (results, error).
        mesh: a --mesh value, or sizes for the program's axes in order."""
        d = os.path.join(self.tmp, "run%d" % self.runs)
        os.makedirs(d)
        args = ["interp", prog, "--fn", fn, "--out", os.path.join(d, "out")]
        for name, a in inputs.items():
            path = os.path.join(d, name + ".npy")
            np.save(path, a)
            args += ["--in", "%s=%s" % (name, path)]
        if mesh and not isinstance(mesh, str):
            mesh = ",".join("%s=%d" % (a, n) for (a, _), n in zip(self.mesh_of(prog), mesh))
        if mesh:
            args += ["--mesh", mesh]
        if consts:
            args += ["--const", consts]
        p = self.run(args + list(flags))
        if p.returncode != 0:
            return None, "exit %d: %s" % (p.returncode, p.stderr.strip())
        out = []
        while os.path.exists(os.path.join(d, "out", "result%d.npy" % len(out))):
            out.append(np.load(os.path.join(d, "out", "result%d.npy" % len(out))))
        return out, None

    def compare(self, name, got, want, dt, exact=False, scaled=False):
        ok, detail = compare(got, want, dt, exact, scaled)
        self.check(name, ok, detail)

    def expect(self, name, prog, fn, inputs, wants, mesh=None, exact=False, consts=None, scaled=False, flags=()):
        """wants: list of (array, dtype); one check per result."""
        got, err = self.interp(prog, fn, inputs, mesh, consts, flags)
        label = name + ("" if mesh is None else " mesh %s" % (mesh if isinstance(mesh, str) else
                                                              "x".join(str(n) for n in mesh)))
        if err or len(got) != len(wants):
            self.check(label, False, err or "%d results, want %d" % (len(got), len(wants)))
            return None
        for i, (w, dt) in enumerate(wants):
            self.compare("%s result %d" % (label, i), got[i], w, dt, exact, scaled)
        return got


def prog(name):
    return os.path.join(PROGS, name)


# ---- the oracle table (tests/interp/oracles.py), through the interpreter ----

class Recorder(Checker):
    """A Checker whose checks wait in `lines` (for one case run beside
    others), with a folder of its own and the shared mesh cache."""
    def __init__(self, c, tmp):
        super().__init__(c.shardc, tmp)
        self.meshes, self.lines = c.meshes, []
        os.makedirs(tmp)

    def check(self, name, ok, detail=""):
        self.lines.append((name, ok, detail))


def check_table(c, only=None, jobs=2):
    """Every case (whose name matches `only`) on each of its interpreter
    meshes; twins (several fns in a case) must also agree with each other.
    `jobs` cases run at once (each is `shardc interp` runs); their checks
    are printed in the table's order."""
    cases = [case for case in CASES if not only or re.search(only, case.name)]

    def one(i):
        r = Recorder(c, os.path.join(c.tmp, "case%d" % i))
        check_case(r, cases[i])
        return r

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for r in pool.map(one, range(len(cases))):
            for line in r.lines:
                c.check(*line)


def check_case(c, case):
    for mesh in case.interp:
        try:
            axes = c.mesh_of(case.prog)
            sizes = [n for _, n in axes] if mesh is None else list(mesh)
            m = {a: n for (a, _), n in zip(axes, sizes)}
            rng = np.random.default_rng(seed(case.name, *sizes))
            made = case.make(rng, m)
            if made is None:
                continue
            inputs, wants = made
            got = []
            for fn in case.fns:
                name = case.name if len(case.fns) == 1 else "%s (%s)" % (case.name, fn)
                got.append(c.expect(name, case.prog, fn, inputs, wants, mesh, case.exact, case.consts(m),
                                    case.scaled, case.flags(m) + (["--stage", "partitioned"] if case.partitioned else [])))
            for fn, g in zip(case.fns[1:], got[1:]):
                if g is not None and got[0] is not None:
                    for i, (_, dt) in enumerate(wants):
                        c.compare("%s == %s mesh %s result %d" % (fn, case.fns[0], "x".join(map(str, sizes)), i),
                                  g[i], got[0][i], dt, case.exact)
        except Exception as e:                  # a broken oracle is a failure, not a crash
            c.check("%s mesh %s" % (case.name, mesh), False, "%s: %s" % (type(e).__name__, e))


# ---- errors: a clear message, exit 1 (2 for misuse), no output ----

def npy_bytes(header, data=b"", version=(1, 0)):
    h = header.encode("latin1")
    if version[0] == 1:
        return b"\x93NUMPY" + bytes(version) + len(h).to_bytes(2, "little") + h + data
    return b"\x93NUMPY" + bytes(version) + len(h).to_bytes(4, "little") + h + data


def check_errors(c):
    d = os.path.join(c.tmp, "errors")
    os.makedirs(d)
    good = np.arange(4, dtype=np.float32)
    data = good.tobytes()
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n"
    files = {
        "bad magic": (b"not a numpy file at all", "not a .npy file"),
        "empty file": (b"", "not a .npy file"),
        "version 3.0": (npy_bytes(hdr, data, (3, 0)), "version 3.0"),
        "truncated header": (npy_bytes(hdr)[:20], "truncated inside its header"),
        "bad header": (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,) \n", data), "bad header"),
        "header not a dict": (npy_bytes("[1, 2, 3]\n", data), "not a dict"),
        "unknown key": (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}\n", data), "unknown"),
        "missing key": (npy_bytes("{'descr': '<f4', 'shape': (4,)}\n", data), "lacks"),
        "truncated data": (npy_bytes(hdr, data[:10]), "truncated"),
        "trailing bytes": (npy_bytes(hdr, data + b"xx"), "bytes after"),
        "fortran order": (npy_bytes(hdr.replace("False", "True"), data), "Fortran order"),
        "big-endian": (npy_bytes(hdr.replace("<f4", ">f4"), data), "'>f4'"),
        "structured dtype": (npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }\n", data),
                             "structured"),
        "huge shape": (npy_bytes(hdr.replace("(4,)", "(99999999999, 99999999999)"), data), "elements"),
        "nine dims": (npy_bytes(hdr.replace("(4,)", "(1, 1, 1, 1, 1, 1, 1, 1, 4)"), data), "more than 8 dims"),
    }
    arrays = {
        # float64 converts only when every value is exact in f32 (check_inputs.py); 0.1 is not.
        "wrong dtype f64": (good.astype(np.float64) + 0.1, "holds float64 data, but f32 is needed, and element"),
        "wrong dtype i64": (good.astype(np.int64), "holds <i8 (int64) data, but f32 is needed"),
        "wrong shape": (np.zeros(5, np.float32), "has shape (5,), but (4,) is needed"),
        "wrong rank": (np.zeros((4, 1), np.float32), "has shape (4, 1)"),
    }
    twice = ["interp", prog("shape.tdsl"), "--fn", "twice"]

    def expect_fail(name, args, status, message, out):
        p = c.run(args + ["--out", out])
        leftovers = [f for f in os.listdir(out)] if os.path.isdir(out) else []
        ok = p.returncode == status and message in p.stderr and not leftovers and "Sanitizer" not in p.stderr
        c.check("error: " + name, ok, "exit %d, stderr %r, output %r" % (p.returncode, p.stderr.strip(), leftovers))

    for i, (name, (raw, message)) in enumerate(files.items()):
        path = os.path.join(d, "f%d.npy" % i)
        with open(path, "wb") as f:
            f.write(raw)
        expect_fail(name, twice + ["--in", "x=" + path], 1, message, os.path.join(d, "out%d" % i))
    for i, (name, (a, message)) in enumerate(arrays.items()):
        path = os.path.join(d, "a%d.npy" % i)
        np.save(path, a)
        expect_fail(name, twice + ["--in", "x=" + path], 1, message, os.path.join(d, "outa%d" % i))
    gp = os.path.join(d, "good.npy")
    np.save(gp, good)
    out = os.path.join(d, "out-cli")
    expect_fail("no such file", twice + ["--in", "x=" + os.path.join(d, "nothere.npy")], 1, "cannot read", out)
    expect_fail("missing --in", twice, 1, "no --in for parameter 'x' of 'twice'", out)
    expect_fail("extra --in", twice + ["--in", "x=" + gp, "--in", "y=" + gp], 1, "no parameter named 'y'", out)
    expect_fail("--in twice", twice + ["--in", "x=" + gp, "--in", "x=" + gp], 1, "twice", out)
    expect_fail("--in without =", twice + ["--in", "x"], 2, "expected NAME=FILE.npy", out)
    expect_fail("unknown --fn", ["interp", prog("shape.tdsl"), "--fn", "nope"], 2, "no function named 'nope'", out)
    expect_fail("--in with dump", ["dump", prog("shape.tdsl"), "--stage", "parsed", "--in", "x=" + gp], 2,
                "--in and --out go with interp", out)
    expect_fail("nested spmd", ["interp", os.path.join(PROGS, "nested_spmd.tdsl"), "--fn", "outer", "--in",
                                "x=" + gp], 1, "spmd fns do not nest", out)
    p = c.run(twice + ["--in", "x=" + gp])
    c.check("error: missing --out", p.returncode == 2 and "needs --fn and --out" in p.stderr, p.stderr.strip())
    p = c.run(twice + ["--in", "x=" + gp, "--out", "/dev/null/sub"])
    c.check("error: unwritable --out", p.returncode == 1 and "cannot create" in p.stderr, p.stderr.strip())


def check_npy_formats(c):
    """Inputs in format 2.0, scalars, every dtype; outputs as NumPy writes them."""
    d = os.path.join(c.tmp, "formats")
    os.makedirs(d)
    path = os.path.join(d, "v2.npy")
    with open(path, "wb") as f:
        np.lib.format.write_array(f, np.arange(4, dtype=np.float32) - 1.5, version=(2, 0))
    out = os.path.join(d, "out")
    p = c.run(["interp", prog("shape.tdsl"), "--fn", "twice", "--in", "x=" + path, "--out", out])
    ok = p.returncode == 0 and np.array_equal(np.load(os.path.join(out, "result0.npy")), (np.arange(4) - 1.5) * 2)
    c.check("npy: reads format 2.0", ok, p.stderr.strip())
    raw = open(os.path.join(out, "result0.npy"), "rb").read() if ok else b""
    hlen = int.from_bytes(raw[8:10], "little") if ok else 0
    ok = raw[:8] == b"\x93NUMPY\x01\x00" and (10 + hlen) % 64 == 0 and raw[10 + hlen - 1:10 + hlen] == b"\n"
    c.check("npy: writes format 1.0 with a 64-byte aligned header", ok)
    got = c.expect("npy: scalar result", prog("shape.tdsl"), "slices",
                   {"x": np.arange(240, dtype=np.float32).reshape(8, 6, 5)},
                   [(np.arange(240).reshape(8, 6, 5)[-3:, :, 2], "f32"), (np.arange(240).reshape(8, 6, 5)[2:5, 1], "f32"),
                    (np.arange(240).reshape(8, 6, 5)[1], "f32"), (np.arange(240).reshape(8, 6, 5)[:, 4:], "f32"),
                    (np.float32(239), "f32")], exact=True)
    c.check("npy: scalar has shape ()", got is not None and got[4].shape == ())
    # f32 values that are not bf16 values: rounded to bf16 on reading.
    x = (1 + np.arange(16, dtype=np.float32) * np.float32(2.0 ** -10)) * np.float32(3.3)
    xb = bf16(x)
    c.expect("npy: bf16 input rounded on reading", prog("casts.tdsl"), "bf16_chain",
             {"x": x, "y": np.zeros(16, np.float32)},
             [(xb, "bf16"), (xb.astype(np.float64) * 3, "f32"), (xb.astype(np.float16), "f16")], exact=True)
    # Each dtype's round trip is a case of the table (formats.tdsl).


def check_npy_mutations(c):
    """Damaged files (bytes flipped, cut, inserted) end in a result or an error, never a crash."""
    d = os.path.join(c.tmp, "mutations")
    os.makedirs(d)
    base = os.path.join(d, "base.npy")
    np.save(base, np.arange(4, dtype=np.float32))
    raw = open(base, "rb").read()
    rng = np.random.default_rng(9)
    bad = []
    for i in range(60):
        b = bytearray(raw)
        kind = i % 3
        at = int(rng.integers(0, 80 if i % 2 else len(b)))    # mostly in the header
        if kind == 0:
            b[at] = int(rng.integers(0, 256))
        elif kind == 1:
            del b[at:]
        else:
            b[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 5))).astype(np.uint8))
        path = os.path.join(d, "m%d.npy" % i)
        with open(path, "wb") as f:
            f.write(bytes(b))
        p = c.run(["interp", prog("shape.tdsl"), "--fn", "twice", "--in", "x=" + path, "--out", os.path.join(d, "o%d" % i)])
        if p.returncode not in (0, 1) or "Sanitizer" in p.stderr or (p.returncode == 1 and "error:" not in p.stderr):
            bad.append("m%d.npy: exit %d %s" % (i, p.returncode, p.stderr.strip()[:200]))
    c.check("npy: 60 damaged files end in a result or a clear error", not bad, "; ".join(bad[:3]))


def main():
    ap = script_args.new_parser(__doc__, "interp-tmp")
    ap.add_argument("--only", help="run only the oracle cases whose name matches this regex (no error checks)")
    args = script_args.parse(ap)
    c = Checker(args.shardc, args.tmp)
    steps = (check_table, check_errors, check_npy_formats, check_npy_mutations)
    for step in steps[:1] if args.only else steps:
        try:
            step(c, args.only) if step is check_table else step(c)
        except Exception as e:                      # a broken step is a failure, not a crash
            c.check(step.__name__, False, "%s: %s" % (type(e).__name__, e))
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
