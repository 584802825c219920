#!/usr/bin/python3
"""Check `shardc interp` (the reference interpreter) against NumPy.

Runs the programs of tests/interp/progs/ and the samples on random inputs
with fixed seeds, and compares every result with the same computation
written independently in NumPy: within a tolerance per dtype (f32 1e-5,
bf16 1e-2, f16 1e-3 relative), exactly for i32, bool and the casts.  Then
checks that bad inputs end in a clear error, exit status 1 (2 for command
line misuse) and no output file.

    tests/interp/check_ops.py [--shardc build/shardc] [--tmp DIR]

Prints PASS/FAIL per check and ends with "N passed, N failed".
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGS = os.path.join(ROOT, "tests", "interp", "progs")
SAMPLES = os.path.join(ROOT, "samples")
MESHES = [(1, 1), (1, 2), (2, 2), (2, 4)]

# ---- dtypes: how each is stored in a .npy file, rounded, and compared ----


def bf16(a):
    """Round to bfloat16 (to nearest, ties to even), kept as float32."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    s16, one = np.uint64(16), np.uint64(1)
    bits = ((bits + np.uint64(0x7FFF) + ((bits >> s16) & one)) >> s16) << s16
    out = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a), np.float32(np.nan), out)


def quantize(a, dt):
    """The values of dtype dt nearest to a, in the array type its .npy file holds."""
    a = np.asarray(a)
    if dt == "f32":
        return a.astype(np.float32)
    if dt == "bf16":
        return bf16(a.astype(np.float32))
    if dt == "f16":
        return a.astype(np.float16)
    if dt == "f64":
        return a.astype(np.float64)
    if dt == "i32":
        return a.astype(np.int32)
    if dt == "bool":
        return a.astype(np.bool_)
    raise ValueError(dt)


STORED = {"f32": np.float32, "bf16": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
          "bool": np.bool_}
TOL = {"f32": 1e-5, "bf16": 1e-2, "f16": 1e-3, "f64": 1e-12}


class Checker:
    def __init__(self, shardc, tmp):
        self.shardc = shardc
        self.tmp = tmp
        self.passed = 0
        self.failed = 0
        self.runs = 0

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

    def interp(self, prog, fn, inputs, mesh=None, consts=None):
        """Run fn of prog on inputs (name -> array); returns (results, error)."""
        d = os.path.join(self.tmp, "run%d" % self.runs)
        os.makedirs(d)
        args = ["interp", prog, "--fn", fn, "--out", os.path.join(d, "out")]
        for name, a in inputs.items():
            path = os.path.join(d, name + ".npy")
            np.save(path, a)
            args += ["--in", "%s=%s" % (name, path)]
        if mesh:
            args += ["--mesh", "X=%d,Y=%d" % mesh]
        if consts:
            args += ["--const", consts]
        p = self.run(args)
        if p.returncode != 0:
            return None, "exit %d: %s" % (p.returncode, p.stderr.strip())
        out = []
        while os.path.exists(os.path.join(d, "out", "result%d.npy" % len(out))):
            out.append(np.load(os.path.join(d, "out", "result%d.npy" % len(out))))
        return out, None

    def compare(self, name, got, want, dt, exact=False):
        want = quantize(want, dt)
        if got.dtype != STORED[dt] or got.shape != want.shape:
            self.check(name, False, "got %s%s, want %s%s" % (got.dtype, got.shape, want.dtype, want.shape))
            return
        if exact or dt in ("i32", "bool"):
            ok = np.array_equal(got, want, equal_nan=dt not in ("i32", "bool"))
        else:
            tol = TOL[dt]
            ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol, equal_nan=True)
        detail = ""
        if not ok:
            with np.errstate(invalid="ignore"):
                diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            k = np.unravel_index(np.nanargmax(diff), diff.shape) if diff.size else ()
            detail = "max difference %g at %s: got %r, want %r" % (np.nanmax(diff), k, got[k], want[k])
        self.check(name, ok, detail)

    def expect(self, name, prog, fn, inputs, wants, mesh=None, exact=False, consts=None):
        """wants: list of (array, dtype); one check per result."""
        got, err = self.interp(prog, fn, inputs, mesh, consts)
        label = name + ("" if mesh is None else " mesh %dx%d" % mesh)
        if err or len(got) != len(wants):
            self.check(label, False, err or "%d results, want %d" % (len(got), len(wants)))
            return None
        for i, (w, dt) in enumerate(wants):
            self.compare("%s result %d" % (label, i), got[i], w, dt, exact)
        return got


def prog(name):
    return os.path.join(PROGS, name)


# ---- elementwise ----

def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def check_unary(c):
    rng = np.random.default_rng(1)
    x64 = rng.uniform(-3, 3, (5, 7))
    p64 = rng.uniform(0.1, 4, (5, 7))
    ops = [np.negative, np.exp, None, np.tanh, None, None, np.abs, np.sin, np.cos, np.square,
           lambda v: np.maximum(v, 0), gelu, lambda v: 1 / (1 + np.exp(-v))]
    for dt in ("f32", "bf16", "f16", "f64"):
        x, p = quantize(x64, dt), quantize(p64, dt)
        xd, pd = x.astype(np.float64), p.astype(np.float64)
        wants = []
        for i, op in enumerate(ops):
            w = np.log(pd) if i == 2 else np.sqrt(pd) if i == 4 else 1 / np.sqrt(pd) if i == 5 else op(xd)
            wants.append((w, dt))
        c.expect("unary_" + dt, prog("unary.tdsl"), "unary_" + dt, {"x": x, "p": p}, wants)
    xi = rng.integers(-1000, 1000, (5, 7)).astype(np.int32)
    xi[0, :4] = [2**31 - 1, -2**31, 100000, -46341]         # wrapping negation and squares
    with np.errstate(over="ignore"):
        wants = [(-xi, "i32"), (np.abs(xi), "i32"), (xi * xi, "i32"), (np.maximum(xi, 0), "i32")]
    c.expect("unary_i32", prog("unary.tdsl"), "unary_i32", {"x": xi}, wants)


def check_binary(c):
    rng = np.random.default_rng(2)
    a64 = rng.uniform(-4, 4, (4, 6))
    b64 = rng.uniform(0.5, 3, (4, 6)) * rng.choice([-1, 1], (4, 6))
    p64 = rng.uniform(0.5, 4, (4, 6))
    for dt in ("f32", "bf16", "f16", "f64"):
        a, b, p = quantize(a64, dt), quantize(b64, dt), quantize(p64, dt)
        ad, bd, pd = a.astype(np.float64), b.astype(np.float64), p.astype(np.float64)
        wants = [(ad + bd, dt), (ad - bd, dt), (ad * bd, dt), (ad / bd, dt), (np.mod(ad, bd), dt),
                 (np.maximum(ad, bd), dt), (np.minimum(ad, bd), dt), (pd ** bd, dt)]
        c.expect("binary_" + dt, prog("binary.tdsl"), "binary_" + dt, {"a": a, "b": b, "p": p}, wants)
    ai = rng.integers(-50, 50, (4, 6)).astype(np.int32)
    bi = rng.integers(1, 9, (4, 6)).astype(np.int32) * rng.choice([-1, 1], (4, 6)).astype(np.int32)
    ai[0] = [2**31 - 1, -2**31, 2**30, -7, 7, 123456789]     # + and * wrap; floor / and %
    bi[0] = [1, -2, 4, 2, -2, 1000]
    with np.errstate(over="ignore"):
        wants = [(ai + bi, "i32"), (ai - bi, "i32"), (ai * bi, "i32"), (np.floor_divide(ai, bi), "i32"),
                 (np.mod(ai, bi), "i32"), (np.maximum(ai, bi), "i32"), (np.minimum(ai, bi), "i32")]
    c.expect("binary_i32", prog("binary.tdsl"), "binary_i32", {"a": ai, "b": bi}, wants)
    a = quantize(a64, "f32")
    wants = [(2 * a.astype(np.float64) - 0.5, "f32"), (np.floor_divide(bi, 3) + 1, "i32"), (np.mod(-7, bi), "i32")]
    c.expect("scalars", prog("binary.tdsl"), "scalars", {"a": a, "i": bi}, wants)
    b = quantize(b64, "f32")
    b[0] = a[0]                                                # equal elements for ==, <=, >=
    wants = [(a < b, "bool"), (a <= b, "bool"), (a > b, "bool"), (a >= b, "bool"), (a == b, "bool"),
             (a != b, "bool"), (np.where(a < b, a, b * 2), "f32")]
    c.expect("compare_f32", prog("binary.tdsl"), "compare_f32", {"a": a, "b": b}, wants)
    bi2 = np.where(rng.random((4, 6)) < 0.3, ai, bi).astype(np.int32)
    cb = rng.random((4, 6)) < 0.5
    wants = [(ai < bi2, "bool"), (ai == bi2, "bool"), (ai != bi2, "bool"), (np.where(cb, ai, bi2), "i32"),
             (np.where(ai >= bi2, cb, ai == bi2), "bool")]
    c.expect("compare_i32", prog("binary.tdsl"), "compare_i32", {"a": ai, "b": bi2, "c": cb}, wants)


def check_casts(c):
    e8, e11 = 2.0 ** -8, 2.0 ** -11
    x = np.array([1 + e8, 1 + 3 * e8, -(1 + 3 * e8), 1 + e11, 1 + 3 * e11, 65520, 70000, 3e-8,
                  -2.7, 2.7, 3e9, -3e9, np.nan, np.inf, -0.0, 1e-41], dtype=np.float32)
    i = np.array([257, 259, -257, 16777217, 0, -1, 2**31 - 1, -2**31, 3, 100, 1023, 1025, 7, -9, 65535, 12],
                 dtype=np.int32)
    with np.errstate(invalid="ignore", over="ignore"):
        trunc = np.nan_to_num(np.clip(np.trunc(x.astype(np.float64)), -2**31, 2**31 - 1), nan=0).astype(np.int32)
        wants = [(bf16(x), "bf16"), (x.astype(np.float16), "f16"), (trunc, "i32"), (i.astype(np.float32), "f32"),
                 (x.astype(np.float64), "f64"), ((x > 0).astype(np.float32), "f32"), (bf16(x), "f32"),
                 (bf16(i.astype(np.float32)), "bf16")]
    c.expect("casts", prog("casts.tdsl"), "casts", {"x": x, "i": i}, wants, exact=True)
    rng = np.random.default_rng(3)
    xb, yb = bf16(rng.uniform(-3, 3, 16)), bf16(rng.uniform(-3, 3, 16))
    s = bf16(bf16(xb.astype(np.float64) * yb) + xb)           # rounded after each op
    wants = [(s, "bf16"), (s.astype(np.float64) * 3, "f32"), (s.astype(np.float16), "f16")]
    c.expect("bf16_chain", prog("casts.tdsl"), "bf16_chain", {"x": xb, "y": yb}, wants, exact=True)
    xs = np.array([1, 2.0 ** -8, 2.0 ** -30], np.float32)
    ones = np.ones((3, 2), np.float32)
    c.expect("bf16 sums accumulate in f32", prog("casts.tdsl"), "bf16_sums", {"x": xs, "w": ones},
             [(np.float32(1), "bf16"), (np.ones(2), "bf16")], exact=True)
    wants = [(np.int32(2), "i32"), (np.float32(1) / np.float32(3), "f32"), (bf16(np.float32(1 / 3)), "bf16"),
             (np.int32(-2), "i32")]
    c.expect("number_casts", prog("casts.tdsl"), "number_casts", {}, wants, exact=True)


# ---- index statements ----

def check_einsum(c):
    rng = np.random.default_rng(4)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    d = lambda a: a.astype(np.float64)
    x, w, bias = f32(6, 8), f32(8, 5), f32(5)
    c.expect("matmul", prog("einsum.tdsl"), "matmul", {"x": x, "w": w}, [(d(x) @ d(w), "f32")])
    c.expect("matmul_bias", prog("einsum.tdsl"), "matmul_bias", {"x": x, "w": w, "bias": bias},
             [(d(x) @ d(w) + d(bias), "f32")])
    c.expect("matmul_transposed", prog("einsum.tdsl"), "matmul_transposed", {"x": x, "w": w}, [((d(x) @ d(w)).T, "f32")])
    q, k = f32(2, 3, 4, 5), f32(2, 6, 4, 5)
    s = np.einsum("bihe,bjhe->bhij", d(q), d(k))
    c.expect("batched", prog("einsum.tdsl"), "batched", {"q": q, "k": k},
             [(s, "f32"), (np.einsum("bihe,bjhe->hbij", d(q), d(k)) * 0.5, "f32")])
    x3, y = f32(3, 4, 5), f32(5, 6)
    c.expect("one_side", prog("einsum.tdsl"), "one_side", {"x": x3, "y": y},
             [(np.einsum("ade,ec->ac", d(x3), d(y)), "f32")])
    r = f32(4, 5, 6)
    wants = [(d(r).sum((1, 2)), "f32"), (d(r).max((0, 2)), "f32"), (d(r).min(1), "f32"), (d(r).mean((0, 1)), "f32"),
             (d(r).sum(), "f32"), (np.exp(d(r)).sum((1, 2)), "f32")]
    c.expect("reductions", prog("einsum.tdsl"), "reductions", {"x": r}, wants)
    lg = f32(4, 10)
    e = np.exp(d(lg) - d(lg).max(1, keepdims=True))
    c.expect("softmax", prog("einsum.tdsl"), "softmax", {"logits": lg}, [(e / e.sum(1, keepdims=True), "f32")])
    h, yv, z, sc = f32(3, 4), f32(3), f32(2), np.float32(1.5)
    wants = [((d(h) * d(yv)[:, None]).T, "f32"), (d(h)[:, :, None] + (d(yv)[:, None] * d(z)[None, :] * sc)[:, None, :], "f32"),
             (d(h) * sc, "f32")]
    c.expect("broadcasts", prog("einsum.tdsl"), "broadcasts", {"h": h, "y": yv, "z": z, "s": sc}, wants)
    xb, wb = bf16(rng.standard_normal((6, 32))), bf16(rng.standard_normal((32, 4)))
    v = rng.standard_normal((6, 32)).astype(np.float16)
    ii, jj = rng.integers(-100, 100, (6, 32)).astype(np.int32), rng.integers(-100, 100, (32, 4)).astype(np.int32)
    f32acc = lambda a: a.astype(np.float32)           # the f32 accumulator, rounded once more by quantize
    wants = [(f32acc(d(xb) @ d(wb)), "bf16"), (f32acc(d(xb).sum(1)), "bf16"), (f32acc(d(v).sum(1)), "f16"),
             (ii @ jj, "i32"), (ii.max(1), "i32")]
    c.expect("low_precision", prog("einsum.tdsl"), "low_precision", {"x": xb, "w": wb, "v": v, "i": ii, "j": jj}, wants)
    wm, route, am = f32(10, 6, 8), np.array([3, 0, 9, 3, 5], dtype=np.int32), f32(5, 6)
    c.expect("moe", prog("einsum.tdsl"), "moe", {"w": wm, "route": route, "a": am},
             [(np.einsum("sdf,sd->sf", d(wm)[route], d(am)), "f32")])


# ---- shapes, slices, gathers, creation, loops, calls ----

def check_shape(c):
    rng = np.random.default_rng(5)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    x = f32(4, 6)
    wants = [(x.reshape(24), "f32"), (x.reshape(2, 3, 4), "f32"), (x.reshape(3, 8), "f32"), (x.reshape(6, 4), "f32")]
    c.expect("reshapes", prog("shape.tdsl"), "reshapes", {"x": x}, wants, exact=True)
    a, b, cc = f32(2, 3), f32(4, 3), f32(2, 5)
    wants = [(np.concatenate([a, b]), "f32"), (np.concatenate([a, cc], 1), "f32"), (np.concatenate([b, a, a]), "f32")]
    c.expect("concats", prog("shape.tdsl"), "concats", {"a": a, "b": b, "c": cc}, wants, exact=True)
    r = f32(5, 4)
    wants = [(np.roll(r, 2, 0), "f32"), (np.roll(r, 3, 1), "f32"), (r, "f32")]
    c.expect("rolls", prog("shape.tdsl"), "rolls", {"x": r}, wants, exact=True)
    s = f32(8, 6, 5)
    wants = [(s[-3:, :, 2], "f32"), (s[2:5, 1], "f32"), (s[1], "f32"), (s[:, 4:], "f32"), (s[7, 5, 4], "f32")]
    c.expect("slices", prog("shape.tdsl"), "slices", {"x": s}, wants, exact=True)
    g = f32(4, 6)
    i = np.array([0, 3, 5, -1, 2], dtype=np.int32)              # 5 and -1 are clamped to 3 and 0
    j = np.array([[0, 5, 7], [2, -3, 1]], dtype=np.int32)
    wants = [(g[np.clip(i, 0, 3)], "f32"), (g[:, np.clip(j, 0, 5)], "f32"), (g[np.clip(j, 0, 3)], "f32")]
    c.expect("gathers", prog("shape.tdsl"), "gathers", {"x": g, "i": i, "j": j}, wants, exact=True)
    wants = [(np.zeros((3, 4)), "f32"), (np.full((3, 4), 7), "i32"), (bf16(np.full(5, 0.1, np.float32)), "bf16"),
             (np.ones((2, 2)), "bool"), (np.tile(np.arange(3.0), (2, 1)), "f32"),
             (np.tile(np.arange(4)[:, None], (1, 3)), "i32"), (np.full(3, 2.5), "f32")]
    c.expect("creation", prog("shape.tdsl"), "creation", {}, wants, exact=True)
    p = f32(4)
    acc = p
    for k in range(1, 4):
        acc = (acc * p).astype(np.float32) + np.float32(k)
    c.expect("loop powers", prog("shape.tdsl"), "powers", {"x": p}, [(acc, "f32")], exact=True)
    a1, b1 = p + np.float32(1), p * np.float32(2)
    wants = [(a1, "f32"), ((b1 + np.float32(1)) * (b1 * np.float32(2)), "f32"), (a1 * np.float32(2), "f32")]
    c.expect("calls", prog("shape.tdsl"), "uses_pair", {"x": p}, wants, exact=True)
    ia = rng.integers(-100, 100, 8).astype(np.int32)
    ib = (rng.integers(1, 12, 8) * rng.choice([-1, 1], 8)).astype(np.int32)
    q, m = np.floor_divide(ia, ib), np.mod(ia, ib)
    c.expect("int floor div/mod", prog("shape.tdsl"), "int_arith", {"a": ia, "b": ib},
             [(q, "i32"), (m, "i32"), (ia, "i32")])


# ---- spmd fns ----

def check_spmd_misc(c):
    rng = np.random.default_rng(6)
    for mesh in [(2, 4), (1, 1), (2, 2)]:
        nx, ny = mesh
        x = rng.standard_normal((16, 3)).astype(np.float32)
        starts = [min(5 * k, 14) for k in range(ny)]           # clamped like jax.lax.dynamic_slice
        c.expect("dynamic slice", prog("spmd_misc.tdsl"), "dyn_rows", {"x": x},
                 [(np.concatenate([x[s:s + 2] for s in starts]), "f32")], mesh, exact=True)
        gx, gy = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
        c.expect("axis_index", prog("spmd_misc.tdsl"), "coords", {"x": rng.standard_normal((4, 4)).astype(np.float32)},
                 [(gx * 10 + gy, "i32"), (gy * nx + gx, "i32")], mesh)
        y = rng.standard_normal((2 * nx, 2 * ny)).astype(np.float32)
        c.expect("spmd calls fn", prog("spmd_misc.tdsl"), "calls_fn", {"x": y}, [(y * 3 + 1, "f32")], mesh)
        c.expect("fn calls spmd", prog("spmd_misc.tdsl"), "calls_spmd", {"x": y}, [(y * 3 + 2, "f32")], mesh)
        z = rng.standard_normal((8, 4)).astype(np.float32)
        c.expect("constraint copy", prog("spmd_misc.tdsl"), "constrained", {"x": z}, [(z * 2, "f32")], mesh, exact=True)


def check_collectives(c):
    rng = np.random.default_rng(7)
    col = prog("collectives.tdsl")
    for mesh in MESHES:
        nx, ny = mesh
        n, w = nx * ny, 8 // ny
        x = rng.standard_normal((8, 8)).astype(np.float32)
        blocks = x.astype(np.float64).reshape(8, ny, w)
        wants = [(blocks.sum(1), "f32"), (blocks.max(1), "f32"), (blocks.min(1), "f32"), (blocks.mean(1), "f32")]
        c.expect("psum/pmax/pmin/pmean", col, "psums", {"x": x}, wants, mesh)
        x3 = rng.standard_normal((8, 3)).astype(np.float32)
        i3 = rng.integers(-1000, 1000, (8, 3)).astype(np.int32)
        b = 8 // n
        wants = [(x3.astype(np.float64).reshape(n, b, 3).sum(0), "f32"), (i3.reshape(n, b, 3).sum(0), "i32"),
                 (x3.astype(np.float64).reshape(nx, ny * b, 3).sum(0), "f32")]
        c.expect("psum over (X, Y) and X", col, "psum_all", {"x": x3, "i": i3}, wants, mesh)
        y = rng.standard_normal((8, 2)).astype(np.float32)
        c.expect("all_gather", col, "gathers", {"x": x, "y": y}, [(x, "f32"), (y, "f32"), (y, "f32")], mesh, exact=True)
        bb = bf16(rng.standard_normal((8, 4)))
        c.expect("psum_scatter", col, "scatters", {"x": x, "b": bb},
                 [(x.astype(np.float64) * ny, "f32"), (bb.astype(np.float64) * n, "bf16")], mesh)
        c.expect("all_to_all", col, "to_alls", {"x": x}, [(x, "f32"), (x, "f32")], mesh, exact=True)
        xb = x.reshape(8, ny, w)
        wants = [(np.roll(xb, 1, 1).reshape(8, 8), "f32"), (np.roll(xb, -1, 1).reshape(8, 8), "f32")]
        c.expect("ppermute shift", col, "permutes", {"x": x}, wants, mesh, exact=True)
        want = np.zeros((nx, 8 // nx, 8), np.float32)
        want[nx - 1] = x.reshape(nx, 8 // nx, 8)[0]
        c.expect("ppermute pair over X", col, "permute_x", {"x": x}, [(want.reshape(8, 8), "f32")], mesh, exact=True)
        if ny >= 2:
            want = np.zeros_like(xb)
            want[:, 0], want[:, 1] = xb[:, 1], xb[:, 0]
            c.expect("ppermute pairs, non-receivers zero", prog("permute_pairs.tdsl"), "permute_pairs", {"x": x},
                     [(want.reshape(8, 8), "f32")], mesh, exact=True)


# ---- samples: spmd fns against their auto-partitioned twins and NumPy ----

def check_samples(c):
    rng = np.random.default_rng(8)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    d = lambda a: a.astype(np.float64)
    path, small = os.path.join(SAMPLES, "collective_matmul.tdsl"), "B=8,D=16,F=8"    # the samples' sizes are large
    for mesh in [(2, 4), (2, 2), (1, 1)]:
        lhs, rhs = f32(8, 16), f32(16, 8)
        want = d(lhs) @ d(rhs)
        spmd = c.expect("collective_matmul", path, "collective_matmul", {"lhs": lhs, "rhs": rhs}, [(want, "f32")], mesh,
                        consts=small)
        auto = c.expect("matmul", path, "matmul", {"lhs": lhs, "rhs": rhs}, [(want, "f32")], mesh, consts=small)
        if spmd and auto:
            c.compare("collective_matmul == matmul mesh %dx%d" % mesh, spmd[0], auto[0], "f32")
    x, w_in, w_out = f32(8, 16), f32(16, 32), f32(32, 16)
    c.expect("sample mlp", os.path.join(SAMPLES, "mlp.tdsl"), "mlp", {"x": x, "w_in": w_in, "w_out": w_out},
             [(gelu(d(x) @ d(w_in)) @ d(w_out), "f32")], consts="B=8,D=16,F=32")
    w1, w2 = f32(16, 32), f32(32, 16)
    c.expect("sample two_matmul", os.path.join(SAMPLES, "two_matmul_constraint.tdsl"), "two_matmul",
             {"x": x, "w1": w1, "w2": w2}, [(np.maximum(d(x) @ d(w1), 0) @ d(w2), "f32")], consts="B=8,D=16,F=32")
    xa, wq, wk, wv, wo = f32(2, 8, 16), f32(16, 4, 4), f32(16, 4, 4), f32(16, 4, 4), f32(4, 4, 16)
    q, k, v = (np.einsum("bsd,dhk->bshk", d(xa), d(m)) for m in (wq, wk, wv))
    logits = np.einsum("bshk,bthk->bhst", q, k) * 0.125
    e = np.exp(logits - logits.max(3, keepdims=True))
    o = np.einsum("bhst,bthk->bshk", e / e.sum(3, keepdims=True), v)
    c.expect("sample attention", os.path.join(SAMPLES, "attention.tdsl"), "attention",
             {"x": xa, "wq": wq, "wk": wk, "wv": wv, "wo": wo}, [(np.einsum("bshk,hke->bse", o, d(wo)), "f32")],
             consts="B=2,S=8,D=16,H=4,K=4")
    sa = os.path.join(SAMPLES, "shard_average.tdsl")
    rw = os.path.join(SAMPLES, "roll_within_shards.tdsl")
    for mesh in [None, (2, 2), (4, 2)]:
        nx, ny = mesh or (2, 4)
        a = rng.standard_normal((64, 128)).astype(np.float32)
        want = a.astype(np.float64).reshape(nx, 64 // nx, ny, 128 // ny).mean((1, 3))
        auto = c.expect("shard_average", sa, "shard_average", {"a": a}, [(want, "f32")], mesh)
        spmd = c.expect("shard_average_spmd", sa, "shard_average_spmd", {"a": a}, [(want, "f32")], mesh)
        if spmd and auto:
            c.compare("shard_average == spmd twin mesh %dx%d" % (nx, ny), spmd[0], auto[0], "f32")
        blocks = a.reshape(nx, 64 // nx, 128)
        want = (np.roll(blocks, 3, 1) - blocks).reshape(64, 128)
        auto = c.expect("roll_within_shards", rw, "roll_within_shards", {"x": a}, [(want, "f32")], mesh)
        spmd = c.expect("roll_within_shards_spmd", rw, "roll_within_shards_spmd", {"x": a}, [(want, "f32")], mesh)
        if spmd and auto:
            c.compare("roll_within_shards == spmd twin mesh %dx%d" % (nx, ny), spmd[0], auto[0], "f32", exact=True)
        xi = rng.integers(-1000, 1000, 512).astype(np.int32)
        want = xi.reshape(nx * ny, -1)[:, :4].astype(np.float64).mean(0)
        c.expect("slice_and_average", os.path.join(SAMPLES, "slice_and_average.tdsl"), "slice_and_average",
                 {"x": xi}, [(want, "f32")], mesh)


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
        "wrong dtype f64": (good.astype(np.float64), "holds <f8 (f64) data, but f32 is needed"),
        "wrong dtype i64": (good.astype(np.int64), "'<i8'"),
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
    for dt in ("f32", "f64", "f16", "i32", "bool"):
        a = quantize(np.arange(6).reshape(2, 3) % 4 - 1, dt)
        c.expect("npy: %s round trip" % dt, prog("formats.tdsl"), "id_" + dt, {"x": a}, [(a, dt)], exact=True)


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardc", default=os.path.join(ROOT, "build", "shardc"))
    ap.add_argument("--tmp", default=os.path.join(ROOT, "build", "interp-tmp"))
    args = ap.parse_args()
    shutil.rmtree(args.tmp, ignore_errors=True)
    os.makedirs(args.tmp)
    c = Checker(os.path.abspath(args.shardc), os.path.abspath(args.tmp))
    for step in (check_unary, check_binary, check_casts, check_einsum, check_shape, check_spmd_misc,
                 check_collectives, check_samples, check_errors, check_npy_formats, check_npy_mutations):
        try:
            step(c)
        except Exception as e:                      # a broken step is a failure, not a crash
            c.check(step.__name__, False, "%s: %s" % (type(e).__name__, e))
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
