"""NumPy oracles: what each tested function computes, written independently
of shardc, in NumPy, from the function's source.

One table (CASES) drives two harnesses:
  - tests/interp/check_ops.py runs each case through the reference
    interpreter (`shardc interp`) on the meshes in `interp`;
  - tests/codegen/check_numpy.py runs each case through generated programs
    (`shardc build`/`run`, every backend; and under ASan+UBSan and TSan) on
    meshes of 1, 2, 4 and 8 devices and an uneven one.

A case names a program, one or more functions that must all compute the same
thing on the same inputs (an `spmd fn` and its auto-partitioned twin), and a
`make(rng, m)` that returns (inputs, wants) for the mesh m actually used (a
dict axis -> size; {} for a program without a mesh), or None when the case
does not apply to that mesh.  inputs maps parameter names to arrays; wants is
a list of (array, dtype), one per result, compared within a tolerance per
dtype (TOL) or exactly.  `consts` is a --const string or a function of m
giving one, so that sizes fit the mesh (an spmd fn's blocks must divide
evenly; an fn's may not, and the uneven meshes are there to test that).
`flags`, likewise a list or a function of m, are more shardc options that
change how the program compiles (--device-memory SIZE).

To add a case: write its function (under tests/interp/progs/ or elsewhere),
then a `make` below that builds inputs and the results NumPy computes, and a
Case line in the table.
"""
import math
import os

import numpy as np

import gpt_ref

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGS = os.path.join(ROOT, "tests", "interp", "progs")
SAMPLES = os.path.join(ROOT, "samples")
GOLDEN = os.path.join(ROOT, "tests", "lit", "partitioned")

# ---- dtypes: how each is stored in a .npy file, rounded, and compared ----


def bf16(a):
    """Round to bfloat16 (to nearest, ties to even), kept as float32."""
    a = np.asarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    s16, one = np.uint64(16), np.uint64(1)
    bits = ((bits + np.uint64(0x7FFF) + ((bits >> s16) & one)) >> s16) << s16
    out = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a), np.float32(np.nan), out)


def quantize(a, dt):
    """The values of dtype dt nearest to a, in the array type its .npy file holds."""
    a = np.asarray(a)
    if dt == "bf16":
        return bf16(a.astype(np.float32))
    if dt not in STORED:
        raise ValueError(dt)
    return a.astype(STORED[dt])


STORED = {"f32": np.float32, "bf16": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
          "bool": np.bool_, "u32": np.uint32, "i64": np.int64, "u8": np.uint8}
TOL = {"f32": 1e-5, "bf16": 1e-2, "f16": 1e-3, "f64": 1e-12}


def compare(got, want, dt, exact=False, scaled=False):
    """(ok, detail) for one result against its oracle.  Floats agree within
    TOL[dt] relative and absolute (elementwise); with scaled, the absolute
    part is relative to the largest |want| instead: for long sums that a
    partitioned program adds in another order (or whose partial results it
    rounds to a low-precision dtype), where the error follows the size of
    the terms, not of the result (a sum that cancels to nearly 0 has the
    error of its terms).  i32, bool and exact cases must be equal."""
    want = quantize(want, dt)
    if got.dtype != STORED[dt] or got.shape != want.shape:
        return False, "got %s%s, want %s%s" % (got.dtype, got.shape, want.dtype, want.shape)
    if dt == "i64":            # compared as integers: a double does not hold every i64
        bad = got != want
        excess = bad.astype(np.float64)
        if not bad.any():
            return True, ""
        k = np.unravel_index(np.argmax(excess), excess.shape) if excess.ndim else ()
        return False, "%d of %d elements differ; the first at %s: got %r, want %r" % (
            int(bad.sum()), got.size, tuple(int(i) for i in k), got[k], want[k])
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    if exact or dt in ("i32", "bool", "u32", "u8"):
        with np.errstate(invalid="ignore"):
            bad = ~((g64 == w64) | (np.isnan(g64) & np.isnan(w64)))
        excess = bad.astype(np.float64)
    else:
        tol = TOL[dt]
        finite = np.abs(w64[np.isfinite(w64)])
        atol = tol * max(1.0, float(finite.max()) if finite.size else 0.0) if scaled else tol
        with np.errstate(invalid="ignore"):
            same = (g64 == w64) | (np.isnan(g64) & np.isnan(w64))     # infinities and NaNs must match
            excess = np.where(same, 0.0, np.abs(g64 - w64) / (atol + tol * np.abs(w64)))
        excess = np.where(np.isnan(excess), np.inf, excess)
        bad = excess > 1
    if not bad.any():
        return True, ""
    k = np.unravel_index(np.argmax(excess), excess.shape) if excess.ndim else ()
    return False, "%d of %d elements differ; the worst at %s: got %r, want %r" % (
        int(bad.sum()), got.size, tuple(int(i) for i in k), got[k], want[k])


class Case:
    """One oracle: see the module's docstring.  interp: the meshes (tuples of
    sizes in the program's axis order, or None for the program's own) on
    which check_ops.py runs it through the interpreter; [] for none.  runs:
    how many input sets check_numpy.py gives each build of the case.
    codegen: which of check_partition.meshes (0: one device, 1: two, 2: four,
    3: eight, 4: uneven) check_numpy.py builds it for; None for all.
    partitioned: check_ops.py runs the partitioned program (`--stage
    partitioned`, each mesh's devices simulated) instead of the global one."""

    def __init__(self, name, prog, fns, make, consts=None, exact=False, scaled=False, interp=(None,), runs=2,
                 codegen=None, flags=(), partitioned=False):
        self.name, self.prog, self.make = name, prog, make
        self.fns = [fns] if isinstance(fns, str) else list(fns)
        self._consts, self.exact, self.scaled = consts, exact, scaled
        self.interp, self.runs, self.codegen = list(interp), runs, codegen
        self._flags, self.partitioned = flags, partitioned

    def consts(self, m):
        return self._consts(m) if callable(self._consts) else self._consts

    def flags(self, m):
        return list(self._flags(m) if callable(self._flags) else self._flags)


def up(n, k):
    """n rounded up to a multiple of k: a size that k devices split evenly."""
    return -(-n // k) * k


def lcm(*ks):
    out = 1
    for k in ks:
        out = out * k // math.gcd(out, k)
    return out


def prog(name):
    return os.path.join(PROGS, name)


def d(a):
    return np.asarray(a).astype(np.float64)


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


CASES = []

# Families of many small variants of one lowering (reshards, slices, batched
# gathers) build C for the 8-device and the uneven mesh only: each build
# takes a second or two, and check_partition.py already runs every variant
# partitioned on every mesh in the interpreter.
VARIANT_MESHES = [3, 4]


def case(*args, **kw):
    CASES.append(Case(*args, **kw))


# ---- elementwise (tests/interp/progs/unary.tdsl, binary.tdsl) ----

def unary(dt):
    def make(rng, m):
        x = quantize(rng.uniform(-3, 3, (5, 7)), dt)
        p = quantize(rng.uniform(0.1, 4, (5, 7)), dt)
        xd, pd = d(x), d(p)
        ws = [-xd, np.exp(xd), np.log(pd), np.tanh(xd), np.sqrt(pd), 1 / np.sqrt(pd), np.abs(xd), np.sin(xd),
              np.cos(xd), np.square(xd), np.maximum(xd, 0), gelu(xd), 1 / (1 + np.exp(-xd))]
        return {"x": x, "p": p}, [(w, dt) for w in ws]
    return make


def unary_i32(rng, m):
    xi = rng.integers(-1000, 1000, (5, 7)).astype(np.int32)
    xi[0, :4] = [2**31 - 1, -2**31, 100000, -46341]         # wrapping negation and squares
    with np.errstate(over="ignore"):
        return {"x": xi}, [(-xi, "i32"), (np.abs(xi), "i32"), (xi * xi, "i32"), (np.maximum(xi, 0), "i32")]


def binary_inputs(rng, dt):
    a = quantize(rng.uniform(-4, 4, (4, 6)), dt)
    b = quantize(rng.uniform(0.5, 3, (4, 6)) * rng.choice([-1, 1], (4, 6)), dt)
    return a, b


def binary(dt):
    def make(rng, m):
        a, b = binary_inputs(rng, dt)
        p = quantize(rng.uniform(0.5, 4, (4, 6)), dt)
        ad, bd, pd = d(a), d(b), d(p)
        ws = [ad + bd, ad - bd, ad * bd, ad / bd, np.mod(ad, bd), np.maximum(ad, bd), np.minimum(ad, bd), pd ** bd]
        return {"a": a, "b": b, "p": p}, [(w, dt) for w in ws]
    return make


def int_pair(rng):
    ai = rng.integers(-50, 50, (4, 6)).astype(np.int32)
    bi = rng.integers(1, 9, (4, 6)).astype(np.int32) * rng.choice([-1, 1], (4, 6)).astype(np.int32)
    ai[0] = [2**31 - 1, -2**31, 2**30, -7, 7, 123456789]     # + and * wrap; floor / and %
    bi[0] = [1, -2, 4, 2, -2, 1000]
    return ai, bi


def binary_i32(rng, m):
    ai, bi = int_pair(rng)
    with np.errstate(over="ignore"):
        ws = [ai + bi, ai - bi, ai * bi, np.floor_divide(ai, bi), np.mod(ai, bi), np.maximum(ai, bi),
              np.minimum(ai, bi)]
    return {"a": ai, "b": bi}, [(w, "i32") for w in ws]


def scalars(rng, m):
    a, _ = binary_inputs(rng, "f32")
    _, bi = int_pair(rng)
    return {"a": a, "i": bi}, [(2 * d(a) - 0.5, "f32"), (np.floor_divide(bi, 3) + 1, "i32"), (np.mod(-7, bi), "i32")]


def compare_f32(rng, m):
    a, b = binary_inputs(rng, "f32")
    b[0] = a[0]                                                # equal elements for ==, <=, >=
    return {"a": a, "b": b}, [(a < b, "bool"), (a <= b, "bool"), (a > b, "bool"), (a >= b, "bool"),
                              (a == b, "bool"), (a != b, "bool"), (np.where(a < b, a, b * 2), "f32")]


def compare_i32(rng, m):
    ai, bi = int_pair(rng)
    bi2 = np.where(rng.random((4, 6)) < 0.3, ai, bi).astype(np.int32)
    cb = rng.random((4, 6)) < 0.5
    return {"a": ai, "b": bi2, "c": cb}, [(ai < bi2, "bool"), (ai == bi2, "bool"), (ai != bi2, "bool"),
                                          (np.where(cb, ai, bi2), "i32"), (np.where(ai >= bi2, cb, ai == bi2), "bool")]


for _dt in ("f32", "bf16", "f16", "f64"):
    case("unary_" + _dt, prog("unary.tdsl"), "unary_" + _dt, unary(_dt))
case("unary_i32", prog("unary.tdsl"), "unary_i32", unary_i32)
for _dt in ("f32", "bf16", "f16", "f64"):
    case("binary_" + _dt, prog("binary.tdsl"), "binary_" + _dt, binary(_dt))
case("binary_i32", prog("binary.tdsl"), "binary_i32", binary_i32)
case("scalars", prog("binary.tdsl"), "scalars", scalars)
case("compare_f32", prog("binary.tdsl"), "compare_f32", compare_f32)
case("compare_i32", prog("binary.tdsl"), "compare_i32", compare_i32)


# ---- logic (tests/interp/progs/logic.tdsl) ----

def logic_inputs(rng):
    a = rng.integers(-3, 4, (9, 5)).astype(np.float32)     # small integers: ties on every comparison
    b = rng.integers(-3, 4, (9, 5)).astype(np.float32)
    return a, b, rng.random((9, 5)) < 0.5


def logic(rng, m):
    a, b, p = logic_inputs(rng)
    mm = (~(a < b) & p) | ((b > 2) ^ p)
    return {"a": a, "b": b, "p": p}, [((a < b) & (b < 1), "bool"), ((a < 0) | p, "bool"), (p ^ (a > b), "bool"),
                                      (~p, "bool"), (mm, "bool"), (np.where((0 < a) & (a < 2), a, b), "f32")]


def scalar_mask(rng, m):
    a, _, _ = logic_inputs(rng)
    s = np.float32(rng.choice([-1, 1]))
    return {"a": a, "s": s}, [((a > 1) ^ (s < 0), "bool"), (((a > 0) & (s > 0)) | ~(a < -1), "bool")]


def masked_grad(rng, m):
    w, x, _ = logic_inputs(rng)
    mask = ((x > 0) & ~(w < -1)) | (x > 2)
    return {"w": w, "x": x}, [(np.where(mask, x, 0), "f32")]


def mixed(rng, m):
    p, q = rng.random((8, 6)) < 0.5, rng.random((8, 6)) < 0.5
    return {"p": p, "q": q}, [(p ^ q, "bool"), (~p | q, "bool")]


# Two meshes that split the rows unevenly (2 and 8 devices) and one device.
case("logic", prog("logic.tdsl"), "logic", logic, exact=True, interp=[None, (1,), (4,)], codegen=[0, 1, 3])
case("logic.scalar_mask", prog("logic.tdsl"), "scalar_mask", scalar_mask, exact=True, interp=[None, (3,)],
     codegen=[1, 4])
case("logic.mixed", prog("logic.tdsl"), "mixed", mixed, exact=True, interp=[None, (4,)], codegen=[1, 3])
case("logic.masked_grad", prog("logic.tdsl"), "masked_grad", masked_grad, exact=True, interp=[None, (3,)],
     codegen=[1, 4])


# ---- i64 and u8 (tests/interp/progs/dtypes.tdsl) ----

def dtypes(rng, m):
    t = rng.integers(-2, 11, (6, 5)).astype(np.int64)      # ids 0..8, and some out of the table's range
    t[0, 0], t[1, 1], t[2, 2], t[5, 4] = 2**32 + 1, -(2**33) - 3, 2**40 + 300, 2**31   # clamped, not wrapped
    b = rng.integers(0, 256, (6, 5)).astype(np.uint8)
    x = rng.uniform(-300, 300, (6, 5)).astype(np.float32)
    wte = normal(rng, 9, 4)
    s = rng.integers(-2**40, 2**40, (6, 5)).astype(np.int64)
    s[0, :2] = t[0, :2]                                      # equal elements for ==
    toward0 = np.trunc(x.astype(np.float64)).astype(np.int64)
    return ({"t": t, "b": b, "x": x, "wte": wte, "s": s},
            [(wte[np.clip(t, 0, 8)], "f32"), (t.astype(np.uint8), "u8"), (t.astype(np.int32), "i32"),
             ((b.astype(np.int32) * 7).astype(np.uint8), "u8"), (toward0, "i64"), (toward0.astype(np.uint8), "u8"),
             (np.where(t > 3, s, b.astype(np.int64)), "i64"), (t == s, "bool"), (b < 100, "bool"),
             (t.astype(np.float64), "f64"), (b.astype(np.float32), "f32")])


def dtypes_row(rng, m):
    wte = normal(rng, 9, 4)
    p = np.int64(rng.choice([0, 5, 8, 2**33]))           # 2^33: clamped to the last row
    return {"wte": wte, "p": p}, [(wte[min(int(p), 8)], "f32")]


case("dtypes", prog("dtypes.tdsl"), "dtypes", dtypes, exact=True, interp=[None, (1,), (4,)], codegen=[1, 4])
case("dtypes.row", prog("dtypes.tdsl"), "row", dtypes_row, exact=True, interp=[None, (3,)], codegen=[1, 4])


def dtypes_embed_grad(rng, m):
    wte = normal(rng, 9, 4)
    tok = rng.integers(0, 9, 6).astype(np.int64)
    tok[1], tok[4] = 2**40, -5                             # clamped to rows 8 and 0
    rows = np.clip(tok, 0, 8)
    want = np.zeros((9, 4), np.float64)
    np.add.at(want, rows, 2 * d(wte)[rows])
    return {"wte": wte, "tok": tok}, [(want, "f32")]


def dtypes_wide_casts(rng, m):
    # 1e19 and -1e19 saturate (NumPy's astype leaves them undefined: the wanted values are written out).
    x = np.array([1e19, -1e19, 2.0**60 + 2.0**12, -7.9, float(rng.integers(-2**40, 2**40))])
    t = np.array([2**63 - 1, -2**63, 2**60 + 2**12, -7, int(x[4])], np.int64)
    return {"x": x}, [(t, "i64"), (t.astype(np.int32), "i32"), (t.astype(np.uint8), "u8"), (t.astype(np.uint32), "u32")]


case("dtypes.wide_casts", prog("dtypes.tdsl"), "wide_casts", dtypes_wide_casts, exact=True, interp=[None, (4,)],
     codegen=[1])
case("dtypes.embed_grad", prog("dtypes.tdsl"), "embed_grad", dtypes_embed_grad, interp=[None, (4,)], codegen=[1, 4])



def dtypes_arith(rng, m):
    a = rng.integers(-2**25, 2**25, (6, 4)).astype(np.int64)       # products within 2^53 for the interpreter
    b = rng.integers(-2**25, 2**25, (6, 4)).astype(np.int64)
    b[b == 0] = 3
    a[0, :2], b[0, :2] = [-20, -20], [7, -7]                  # floor: -20 / 7 = -3, -20 % -7 = -6
    p = rng.integers(0, 256, (6, 4)).astype(np.uint8)
    q = rng.integers(1, 256, (6, 4)).astype(np.uint8)
    p[0, 0], q[0, 0] = 200, 100                              # 200 + 100 = 44
    u = rng.integers(0, 2**32, (6, 4), dtype=np.uint64).astype(np.uint32)
    v = rng.integers(1, 2**32, (6, 4), dtype=np.uint64).astype(np.uint32)
    u[0, 0], v[0, 0] = 2**31 + 5, 3                          # product past 2^32
    with np.errstate(over="ignore"):
        ws = [(a + b, "i64"), (a - b, "i64"), (a * b, "i64"), (a // b, "i64"), (a % b, "i64"),
              (np.maximum(a, b), "i64"), (-a + 3, "i64"), (np.abs(a) * 2, "i64"),
              (p + q, "u8"), (p - q, "u8"), (p * q, "u8"), (p // q, "u8"), (p % q, "u8"), (-p, "u8"),
              (np.minimum(p, q) + np.uint8(200), "u8"),
              (u * v, "u32"), (u + v, "u32"), (u - v, "u32"), (u // v, "u32"), (u % np.uint32(7), "u32"),
              (u - np.uint32(1), "u32"), (np.maximum(u, v), "u32")]
    return {"a": a, "b": b, "p": p, "q": q, "u": u, "v": v}, ws


def dtypes_arith_big(rng, m):
    a = rng.integers(-2**22, 2**22, 6).astype(np.int64)
    b = rng.integers(-2**40, 2**40, 6).astype(np.int64)
    c = rng.integers(1, 2**20, 6).astype(np.int64) * rng.choice([-1, 1], 6)
    with np.errstate(over="ignore"):
        big = a * 2**40 + b
        t = np.sum(big * c)
        return {"a": a, "b": b, "c": c}, [((big // c).astype(np.int32), "i32"), ((big % 4294967291).astype(np.uint32), "u32"),
                                          ((big * c).astype(np.uint32), "u32"), ((big // 1000003 - big).astype(np.int32), "i32"),
                                          (np.int32(t // 4294967296), "i32"), (np.uint32(t & 0xffffffff), "u32")]


def dtypes_reduce(rng, m):
    a = rng.integers(-2**50, 2**50, (6, 4)).astype(np.int64)       # sums within 2^53 for the interpreter
    p = rng.integers(0, 256, (6, 4)).astype(np.uint8)
    p[:, 0] = 200                                                   # 1200 wraps to 176
    u = rng.integers(0, 2**32, (6, 4), dtype=np.uint64).astype(np.uint32)
    with np.errstate(over="ignore"):
        return {"a": a, "p": p, "u": u}, [
            (a.sum(0), "i64"), (p.sum(0, dtype=np.uint8), "u8"), (u.sum(1, dtype=np.uint32), "u32"), (a.max(0), "i64"),
            (p.min(1), "u8"), (u.min(0), "u32"), (np.uint32((u * np.uint32(3)).sum(dtype=np.uint32)), "u32"),
            (np.cumsum(a, 0), "i64"), (np.cumsum(p, 0, dtype=np.uint8), "u8"), (np.cumsum(u, 1, dtype=np.uint32), "u32")]


# The interpreter holds values as doubles (i64 exact within 2^53): arith_big
# (tests/codegen/progs/int64_big.tdsl) runs in generated C only.  Both are built on every mesh (codegen=None), so
# check_run.py leaves them here: its random i64 inputs reach 2^53, where
# products leave what a double holds and the interpreter is not exact.
case("dtypes.arith", prog("dtypes.tdsl"), "arith", dtypes_arith, exact=True, interp=[None, (4,)], runs=1)
case("dtypes.arith_big", os.path.join(ROOT, "tests", "codegen", "progs", "int64_big.tdsl"), "arith_big", dtypes_arith_big, exact=True, interp=[], runs=1)
case("dtypes.reduce", prog("dtypes.tdsl"), "reduce_ints", dtypes_reduce, exact=True, interp=[None, (4,)], runs=1)


# ---- inf, -inf, nan (tests/interp/progs/nonfinite.tdsl) ----

def specials(rng, m):
    x = normal(rng, 8)
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    with np.errstate(invalid="ignore"):
        return {"x": x}, [(np.where(x > 0, inf, -inf), "f32"), (np.full(8, np.nan), "f64"), (np.full(8, inf), "bf16"),
                          (np.full(8, -np.inf), "f16"), (np.isfinite(x), "bool"), (np.full(8, nan), "f32"),
                          (np.float32(-np.inf), "f32")]


def causal(rng, m):
    s = normal(rng, 6, 6)
    z = np.where(np.tril(np.ones((6, 6), bool)), d(s), -np.inf)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return {"s": s}, [(e / e.sum(axis=1, keepdims=True), "f32")]


case("nonfinite.specials", prog("nonfinite.tdsl"), "specials", specials, exact=True, interp=[None, (3,)],
     codegen=[0, 1, 3])
case("nonfinite.causal", prog("nonfinite.tdsl"), "causal", causal, interp=[None, (4,)], codegen=[1, 4])

# ---- casts (tests/interp/progs/casts.tdsl) ----

def casts(rng, m):
    e8, e11 = 2.0 ** -8, 2.0 ** -11
    x = np.array([1 + e8, 1 + 3 * e8, -(1 + 3 * e8), 1 + e11, 1 + 3 * e11, 65520, 70000, 3e-8,
                  -2.7, 2.7, 3e9, -3e9, np.nan, np.inf, -0.0, 1e-41], dtype=np.float32)
    i = np.array([257, 259, -257, 16777217, 0, -1, 2**31 - 1, -2**31, 3, 100, 1023, 1025, 7, -9, 65535, 12],
                 dtype=np.int32)
    with np.errstate(invalid="ignore", over="ignore"):
        trunc = np.nan_to_num(np.clip(np.trunc(d(x)), -2**31, 2**31 - 1), nan=0).astype(np.int32)
        return {"x": x, "i": i}, [(bf16(x), "bf16"), (x.astype(np.float16), "f16"), (trunc, "i32"),
                                  (i.astype(np.float32), "f32"), (d(x), "f64"), ((x > 0).astype(np.float32), "f32"),
                                  (bf16(x), "f32"), (bf16(i.astype(np.float32)), "bf16")]


def bf16_chain(rng, m):
    xb, yb = bf16(rng.uniform(-3, 3, 16)), bf16(rng.uniform(-3, 3, 16))
    s = bf16(bf16(d(xb) * yb) + xb)                        # rounded after each op
    return {"x": xb, "y": yb}, [(s, "bf16"), (d(s) * 3, "f32"), (s.astype(np.float16), "f16")]


def bf16_sums(rng, m):
    xs = np.array([1, 2.0 ** -8, 2.0 ** -30], np.float32)   # 1 + 2^-8 is not a bf16: sums accumulate in f32
    return {"x": xs, "w": np.ones((3, 2), np.float32)}, [(np.float32(1), "bf16"), (np.ones(2), "bf16")]


def number_casts(rng, m):
    return {}, [(np.int32(2), "i32"), (np.float32(1) / np.float32(3), "f32"), (bf16(np.float32(1 / 3)), "bf16"),
                (np.int32(-2), "i32")]


case("casts", prog("casts.tdsl"), "casts", casts, exact=True)
case("bf16_chain", prog("casts.tdsl"), "bf16_chain", bf16_chain, exact=True)
case("bf16 sums accumulate in f32", prog("casts.tdsl"), "bf16_sums", bf16_sums, exact=True)
case("number_casts", prog("casts.tdsl"), "number_casts", number_casts, exact=True)


def identity(dt):
    def make(rng, m):
        a = quantize(rng.integers(-1, 3, (2, 3)), dt)
        if dt == "i64":                      # the whole range that .npy input takes: to 2^53
            a = rng.integers(-2**53, 2**53 + 1, (2, 3)).astype(np.int64)
        return {"x": a}, [(a, dt)]
    return make


for _dt in ("f32", "f64", "f16", "i32", "bool", "u32", "i64", "u8"):
    case("npy: %s round trip" % _dt, prog("formats.tdsl"), "id_" + _dt, identity(_dt), exact=True)


# ---- random numbers (tests/interp/progs/random.tdsl) ----
# Threefry-2x32 and JAX's partitionable draws, written from the paper and
# JAX's definitions: element i of a draw is threefry(key, (0, i)), i its
# row-major index in the whole tensor.

def rotl(x, r):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k0, k1, x0, x1):
    """(out0, out1) for uint32 arrays of counts x0, x1 under key (k0, k1)."""
    k0, k1 = np.uint32(k0), np.uint32(k1)
    ks = [k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA)]
    x0 = np.asarray(x0, np.uint32) + ks[0]
    x1 = np.asarray(x1, np.uint32) + ks[1]
    rots = [[13, 15, 26, 6], [17, 29, 16, 24]]
    with np.errstate(over="ignore"):
        for g in range(5):
            for r in rots[g % 2]:
                x0 = x0 + x1
                x1 = rotl(x1, r) ^ x0
            x0 = x0 + ks[(g + 1) % 3]
            x1 = x1 + ks[(g + 2) % 3] + np.uint32(g + 1)
    return x0, x1


# The known-answer vectors of Random123's kat_vectors (threefry2x32_20).
for _k, _x, _want in [((0, 0), (0, 0), (0x6b200159, 0x99ba4efe)),
                      ((0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff), (0x1cb996fc, 0xbb002be7)),
                      ((0x13198a2e, 0x03707344), (0x243f6a88, 0x85a308d3), (0xc4923a9c, 0x483df7a0))]:
    assert tuple(int(v) for v in threefry2x32(*_k, *_x)) == _want, "threefry2x32 known answer"


def rng_words(key, n):
    """Both words of threefry(key, (0, i)) for i < n."""
    return threefry2x32(key[0], key[1], np.zeros(n, np.uint32), np.arange(n, dtype=np.uint32))


def rng_bits(key, shape):
    w0, w1 = rng_words(key, int(np.prod(shape)))
    return (w0 ^ w1).reshape(shape)


def rng_split(key, n):
    return np.stack(rng_words(key, n), axis=1)


def rng_fold_in(key, data):
    w0, w1 = threefry2x32(key[0], key[1], np.zeros(1, np.uint32), np.array([data], np.uint32))
    return np.array([w0[0], w1[0]], np.uint32)


def rng_uniform(key, shape, dt):
    """[0, 1) from the top mantissa bits: 23 of 32 (f32), 52 of 64 (f64), 10 of the low 16 (f16)."""
    n = int(np.prod(shape))
    w0, w1 = rng_words(key, n)
    if dt == "f64":
        b = (w0.astype(np.uint64) << np.uint64(32)) | w1.astype(np.uint64)
        return ((b >> np.uint64(12)).astype(np.float64) * 2.0 ** -52).reshape(shape)
    if dt == "f16":
        return ((((w0 ^ w1) & np.uint32(0xffff)) >> np.uint32(6)).astype(np.float64) * 2.0 ** -10).reshape(shape)
    return (((w0 ^ w1) >> np.uint32(9)).astype(np.float64) * 2.0 ** -23).reshape(shape)


_erf = np.vectorize(math.erf)


def erfinv(y):
    """By bisection on math.erf (no SciPy here), to double precision."""
    y = np.asarray(y, np.float64)
    lo, hi = np.full(y.shape, -6.0), np.full(y.shape, 6.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        below = _erf(mid) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def rng_normal(key, shape, lo=None, hi=None):
    """f32: sqrt(2) erfinv(u), u uniform in [a, b) computed in f32 as JAX does."""
    u = rng_uniform(key, shape, "f32").astype(np.float32)
    f = np.float32
    if lo is None:
        a, b = np.nextafter(f(-1), f(1)), f(1)
    else:
        a, b = f(math.erf(f(lo) / f(np.sqrt(2)))), f(math.erf(f(hi) / f(np.sqrt(2))))
    v = np.maximum(a, u * (b - a) + a)
    y = np.sqrt(2) * erfinv(v.astype(np.float64))
    if lo is not None:
        y = np.clip(y, np.nextafter(f(lo), f(np.inf)), np.nextafter(f(hi), f(-np.inf)))
    return y


def rng_randint(key, shape, lo, hi):
    """JAX's randint: two draws from split(key, 2) combined modulo the span, in u32."""
    k = rng_split(key, 2)
    hb, lb = rng_bits(k[0], shape).astype(np.uint64), rng_bits(k[1], shape).astype(np.uint64)
    span = np.uint64(hi - lo if hi > lo else 1)
    mult = np.uint64(65536) % span
    mult = (mult * mult) % span
    off = ((hb % span) * mult % np.uint64(2**32) + lb % span) % np.uint64(2**32) % span
    return (lo + off.astype(np.int64)).astype(np.int32)


def rng_draws(rng, m):
    r, c = 8, 6
    k = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
    p, i = np.float32(rng.uniform(0.2, 0.8)), np.int32(rng.integers(-5, 100))
    ks = rng_split(k, 4)
    u = rng_uniform(k, (r, c), "f32")
    g = np.maximum(np.float32(-2), u.astype(np.float32) * np.float32(5) + np.float32(-2))
    wants = [(np.array([0, 42]), "u32"), (ks, "u32"), (rng_fold_in(k, 7), "u32"),
             (rng_bits(rng_fold_in(ks[1], np.uint32(i)), (r, c)), "u32"), (u, "f32"),
             (rng_uniform(rng_fold_in(k, 1), (r, c), "f64"), "f64"), (rng_normal(k, (r, c)), "f32"),
             (rng_normal(ks[2], (r, c), -0.5, 2.0), "f32"), (u.astype(np.float32) < p, "bool"),
             (rng_randint(ks[3], (r, c), -3, 1000), "i32"), (g, "f32"), (rng_uniform(k, (r, c), "f16"), "f16")]
    return {"k": k, "p": p, "i": i}, wants


def casts_u32(rng, m):
    x = np.array([-1, 0, 7, 2**31 - 1, -2**31], np.int32)
    y = np.array([3.7, -0.5, 4294967295.0, 1e10, 7.0], np.float32)
    u = x.astype(np.int64) % 2**32
    uy = np.array([3, 0, 4294967295, 4294967295, 7])
    return {"x": x, "y": y}, [(u, "u32"), (uy, "u32"), (np.minimum(u, 2**31 - 1), "i32"),
                              (u.astype(np.float32), "f32"), (u == uy, "bool")]


def dropout_step(rng, m):
    b, dd, f = 8, 4, 6
    x, w = normal(rng, b, dd), normal(rng, dd, f)
    k = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
    keep = rng_uniform(k, (b, f), "f32").astype(np.float32) < np.float32(0.75)
    y = np.where(keep, d(x) @ d(w) / 0.75, 0.0)
    return {"x": x, "w": w, "k": k}, [(np.sum(y * y), "f32"), (d(x).T @ (2 * y * keep / 0.75), "f32")]


case("random draws", prog("random.tdsl"), "draws", rng_draws, interp=[(1, 1), (2, 2)], codegen=[3, 4], runs=1)
case("dropout with a gradient", prog("random.tdsl"), "dropout_step", dropout_step, scaled=True,
     interp=[(1, 1), (2, 2)], codegen=[3], runs=1)
case("u32 casts", prog("random.tdsl"), "casts_u32", casts_u32, exact=True, codegen=[0], runs=1)


# ---- index statements (tests/interp/progs/einsum.tdsl) ----

def matmul(rng, m):
    x, w = normal(rng, 6, 8), normal(rng, 8, 5)
    return {"x": x, "w": w}, [(d(x) @ d(w), "f32")]


def matmul_bias(rng, m):
    x, w, bias = normal(rng, 6, 8), normal(rng, 8, 5), normal(rng, 5)
    return {"x": x, "w": w, "bias": bias}, [(d(x) @ d(w) + d(bias), "f32")]


def matmul_transposed(rng, m):
    x, w = normal(rng, 6, 8), normal(rng, 8, 5)
    return {"x": x, "w": w}, [((d(x) @ d(w)).T, "f32")]


def batched(rng, m):
    q, k = normal(rng, 2, 3, 4, 5), normal(rng, 2, 6, 4, 5)
    return {"q": q, "k": k}, [(np.einsum("bihe,bjhe->bhij", d(q), d(k)), "f32"),
                              (np.einsum("bihe,bjhe->hbij", d(q), d(k)) * 0.5, "f32")]


def one_side(rng, m):
    x, y = normal(rng, 3, 4, 5), normal(rng, 5, 6)
    return {"x": x, "y": y}, [(np.einsum("ade,ec->ac", d(x), d(y)), "f32")]


def reductions(rng, m):
    r = d(normal(rng, 4, 5, 6))
    return {"x": r.astype(np.float32)}, [(r.sum((1, 2)), "f32"), (r.max((0, 2)), "f32"), (r.min(1), "f32"),
                                         (r.mean((0, 1)), "f32"), (r.sum(), "f32"), (np.exp(r).sum((1, 2)), "f32")]


def row_softmax(rng, m):
    lg = normal(rng, 4, 10)
    e = np.exp(d(lg) - d(lg).max(1, keepdims=True))
    return {"logits": lg}, [(e / e.sum(1, keepdims=True), "f32")]


def broadcasts(rng, m):
    h, y, z, s = normal(rng, 3, 4), normal(rng, 3), normal(rng, 2), np.float32(1.5)
    return {"h": h, "y": y, "z": z, "s": s}, [
        ((d(h) * d(y)[:, None]).T, "f32"),
        (d(h)[:, :, None] + (d(y)[:, None] * d(z)[None, :] * s)[:, None, :], "f32"), (d(h) * s, "f32")]


def low_precision(rng, m):
    xb, wb = bf16(rng.standard_normal((6, 32))), bf16(rng.standard_normal((32, 4)))
    v = rng.standard_normal((6, 32)).astype(np.float16)
    ii, jj = rng.integers(-100, 100, (6, 32)).astype(np.int32), rng.integers(-100, 100, (32, 4)).astype(np.int32)
    f32acc = lambda a: a.astype(np.float32)           # the f32 accumulator, rounded once more by quantize
    return {"x": xb, "w": wb, "v": v, "i": ii, "j": jj}, [
        (f32acc(d(xb) @ d(wb)), "bf16"), (f32acc(d(xb).sum(1)), "bf16"), (f32acc(d(v).sum(1)), "f16"),
        (ii @ jj, "i32"), (ii.max(1), "i32")]


def moe(rng, m):
    w, route, a = normal(rng, 10, 6, 8), np.array([3, 0, 9, 3, 5], dtype=np.int32), normal(rng, 5, 6)
    return {"w": w, "route": route, "a": a}, [(np.einsum("sdf,sd->sf", d(w)[route], d(a)), "f32")]


for _fn in (matmul, matmul_bias, matmul_transposed, batched, one_side, reductions, row_softmax, broadcasts,
            low_precision, moe):
    case(_fn.__name__, prog("einsum.tdsl"), _fn.__name__, _fn)


# ---- shapes, slices, gathers, creation, loops, calls (tests/interp/progs/shape.tdsl) ----

def reshapes(rng, m):
    x = normal(rng, 4, 6)
    return {"x": x}, [(x.reshape(24), "f32"), (x.reshape(2, 3, 4), "f32"), (x.reshape(3, 8), "f32"),
                      (x.reshape(6, 4), "f32")]


def concats(rng, m):
    a, b, c = normal(rng, 2, 3), normal(rng, 4, 3), normal(rng, 2, 5)
    return {"a": a, "b": b, "c": c}, [(np.concatenate([a, b]), "f32"), (np.concatenate([a, c], 1), "f32"),
                                      (np.concatenate([b, a, a]), "f32")]


def rolls(rng, m):
    r = normal(rng, 5, 4)
    return {"x": r}, [(np.roll(r, 2, 0), "f32"), (np.roll(r, 3, 1), "f32"), (r, "f32")]


def slices(rng, m):
    s = normal(rng, 8, 6, 5)
    return {"x": s}, [(s[-3:, :, 2], "f32"), (s[2:5, 1], "f32"), (s[1], "f32"), (s[:, 4:], "f32"), (s[7, 5, 4], "f32")]


def gathers(rng, m):
    g = normal(rng, 4, 6)
    i = np.array([0, 3, 5, -1, 2], dtype=np.int32)              # 5 and -1 are clamped to 3 and 0
    j = np.array([[0, 5, 7], [2, -3, 1]], dtype=np.int32)
    return {"x": g, "i": i, "j": j}, [(g[np.clip(i, 0, 3)], "f32"), (g[:, np.clip(j, 0, 5)], "f32"),
                                      (g[np.clip(j, 0, 3)], "f32")]


def creation(rng, m):
    return {}, [(np.zeros((3, 4)), "f32"), (np.full((3, 4), 7), "i32"), (bf16(np.full(5, 0.1, np.float32)), "bf16"),
                (np.ones((2, 2)), "bool"), (np.tile(np.arange(3.0), (2, 1)), "f32"),
                (np.tile(np.arange(4)[:, None], (1, 3)), "i32"), (np.full(3, 2.5), "f32")]


def powers(rng, m):
    p = normal(rng, 4)
    acc = p
    for k in range(1, 4):
        acc = (acc * p).astype(np.float32) + np.float32(k)
    return {"x": p}, [(acc, "f32")]


def uses_pair(rng, m):
    p = normal(rng, 4)
    a1, b1 = p + np.float32(1), p * np.float32(2)
    return {"x": p}, [(a1, "f32"), ((b1 + np.float32(1)) * (b1 * np.float32(2)), "f32"), (a1 * np.float32(2), "f32")]


def int_arith(rng, m):
    ia = rng.integers(-100, 100, 8).astype(np.int32)
    ib = (rng.integers(1, 12, 8) * rng.choice([-1, 1], 8)).astype(np.int32)
    return {"a": ia, "b": ib}, [(np.floor_divide(ia, ib), "i32"), (np.mod(ia, ib), "i32"), (ia, "i32")]


for _fn in (reshapes, concats, rolls, slices, gathers, creation):
    case(_fn.__name__, prog("shape.tdsl"), _fn.__name__, _fn, exact=True)
case("loop powers", prog("shape.tdsl"), "powers", powers, exact=True)
case("calls", prog("shape.tdsl"), "uses_pair", uses_pair, exact=True)
case("int floor div/mod", prog("shape.tdsl"), "int_arith", int_arith)


# ---- spmd fns beside the collectives (tests/interp/progs/spmd_misc.tdsl) ----

SPMD_MESHES = [(2, 4), (1, 1), (2, 2)]


def dyn_rows(rng, m):
    x = normal(rng, 16, 3)
    starts = [min(5 * k, 14) for k in range(m["Y"])]             # clamped like jax.lax.dynamic_slice
    return {"x": x}, [(np.concatenate([x[s:s + 2] for s in starts]), "f32")]


def coords(rng, m):
    gx, gy = np.meshgrid(np.arange(m["X"]), np.arange(m["Y"]), indexing="ij")
    return {"x": normal(rng, 4, 4)}, [(gx * 10 + gy, "i32"), (gy * m["X"] + gx, "i32")]


def calls_fn(plus):
    def make(rng, m):
        y = normal(rng, 2 * m["X"], 2 * m["Y"])
        return {"x": y}, [(d(y) * 3 + plus, "f32")]
    return make


def constrained(rng, m):
    z = normal(rng, 8, 4)
    return {"x": z}, [(z * 2, "f32")]


case("dynamic slice", prog("spmd_misc.tdsl"), "dyn_rows", dyn_rows, exact=True, interp=SPMD_MESHES)
case("axis_index", prog("spmd_misc.tdsl"), "coords", coords, interp=SPMD_MESHES)
case("spmd calls fn", prog("spmd_misc.tdsl"), "calls_fn", calls_fn(1), interp=SPMD_MESHES)
case("fn calls spmd", prog("spmd_misc.tdsl"), "calls_spmd", calls_fn(2), interp=SPMD_MESHES)
case("constraint copy", prog("spmd_misc.tdsl"), "constrained", constrained, exact=True, interp=SPMD_MESHES)


# ---- collectives (tests/interp/progs/collectives.tdsl, permute_pairs.tdsl) ----
# N (8 by default) is the smallest multiple of the device count from 8 up, so
# that every block divides evenly on any mesh (12 on 3x2).

COLL_MESHES = [(1, 1), (1, 2), (2, 2), (2, 4)]


def coll_n(m):
    return up(8, lcm(m["X"] * m["Y"]))


def coll_consts(m):
    return "N=%d" % coll_n(m)


def psums(rng, m):
    n, ny = coll_n(m), m["Y"]
    x = normal(rng, n, n)
    blocks = d(x).reshape(n, ny, n // ny)
    return {"x": x}, [(blocks.sum(1), "f32"), (blocks.max(1), "f32"), (blocks.min(1), "f32"), (blocks.mean(1), "f32")]


def psum_all(rng, m):
    n, nx, ny = coll_n(m), m["X"], m["Y"]
    devs = nx * ny
    b = n // devs
    x3 = normal(rng, n, 3)
    i3 = rng.integers(-1000, 1000, (n, 3)).astype(np.int32)
    return {"x": x3, "i": i3}, [(d(x3).reshape(devs, b, 3).sum(0), "f32"), (i3.reshape(devs, b, 3).sum(0), "i32"),
                                (d(x3).reshape(nx, ny * b, 3).sum(0), "f32")]


def coll_gathers(rng, m):
    n = coll_n(m)
    x, y = normal(rng, n, n), normal(rng, n, 2)
    return {"x": x, "y": y}, [(x, "f32"), (y, "f32"), (y, "f32")]


def scatters(rng, m):
    n = coll_n(m)
    x, bb = normal(rng, n, n), bf16(rng.standard_normal((n, 4)))
    return {"x": x, "b": bb}, [(d(x) * m["Y"], "f32"), (d(bb) * (m["X"] * m["Y"]), "bf16")]


def to_alls(rng, m):
    x = normal(rng, coll_n(m), coll_n(m))
    return {"x": x}, [(x, "f32"), (x, "f32")]


def permutes(rng, m):
    n, ny = coll_n(m), m["Y"]
    x = normal(rng, n, n)
    xb = x.reshape(n, ny, n // ny)
    return {"x": x}, [(np.roll(xb, 1, 1).reshape(n, n), "f32"), (np.roll(xb, -1, 1).reshape(n, n), "f32")]


def permute_x(rng, m):
    n, nx = coll_n(m), m["X"]
    x = normal(rng, n, n)
    want = np.zeros((nx, n // nx, n), np.float32)
    want[nx - 1] = x.reshape(nx, n // nx, n)[0]
    return {"x": x}, [(want.reshape(n, n), "f32")]


def pairs_n(m):
    return up(8, lcm(m["X"], m["Y"]))


def permute_pairs(rng, m):
    n, ny = pairs_n(m), m["Y"]
    if ny < 2:
        return None                                     # the pairs name devices 0 and 1 of Y
    x = normal(rng, n, n)
    xb = x.reshape(n, ny, n // ny)
    want = np.zeros_like(xb)
    want[:, 0], want[:, 1] = xb[:, 1], xb[:, 0]
    return {"x": x}, [(want.reshape(n, n), "f32")]


_col = prog("collectives.tdsl")
case("psum/pmax/pmin/pmean", _col, "psums", psums, consts=coll_consts, interp=COLL_MESHES)
case("psum over (X, Y) and X", _col, "psum_all", psum_all, consts=coll_consts, interp=COLL_MESHES)
case("all_gather", _col, "gathers", coll_gathers, consts=coll_consts, exact=True, interp=COLL_MESHES)
case("psum_scatter", _col, "scatters", scatters, consts=coll_consts, interp=COLL_MESHES)
case("all_to_all", _col, "to_alls", to_alls, consts=coll_consts, exact=True, interp=COLL_MESHES)
case("ppermute shift", _col, "permutes", permutes, consts=coll_consts, exact=True, interp=COLL_MESHES)
case("ppermute pair over X", _col, "permute_x", permute_x, consts=coll_consts, exact=True, interp=COLL_MESHES)
case("ppermute pairs, non-receivers zero", prog("permute_pairs.tdsl"), "permute_pairs", permute_pairs,
     consts=lambda m: "N=%d" % pairs_n(m), exact=True, interp=COLL_MESHES)


# ---- concats along split dims (tests/interp/progs/concat_split.tdsl) ----

def join3(rng, m):
    a, b, c = normal(rng, 8, 6), normal(rng, 4, 6), normal(rng, 20, 6)
    return {"a": a, "b": b, "c": c}, [(np.concatenate([a, b, c]), "f32")]


def periodic(rng, m):
    x = normal(rng, 16, 4)
    return {"x": x}, [(np.concatenate([x[12:], x, x[:4]]), "f32")]


case("concat of three split operands", prog("concat_split.tdsl"), "join3", join3, exact=True)
case("periodic padding by concat", prog("concat_split.tdsl"), "periodic", periodic, exact=True)


def concat_of(dim, *shapes):
    """The concat along dim of operands a, b, c... of the given shapes."""
    def make(rng, m):
        xs = [normal(rng, *sh) for sh in shapes]
        return dict(zip("abc", xs)), [(np.concatenate(xs, dim), "f32")]
    return make


case("concat_split.uneven", prog("concat_split.tdsl"), "uneven", concat_of(1, (14, 257), (14, 116)), exact=True,
     codegen=VARIANT_MESHES)
case("concat_split.uneven3", prog("concat_split.tdsl"), "uneven3", concat_of(0, (5, 3), (7, 3), (2, 3)), exact=True,
     codegen=VARIANT_MESHES)


# ---- cumsum (tests/interp/progs/cumsum.tdsl) ----
# Inclusive prefix sums; the values are small multiples of 1/8, so every
# prefix is exact in f32 and bf16 rounds the same prefix on any mesh.

def cumsum_of(dt, shape, dim, scale=1.0):
    def make(rng, m):
        x = quantize(rng.integers(-16, 17, shape) * scale, dt)
        return {"x": x}, [(np.cumsum(d(x), dim), dt)]
    return make


def onehot(rng, n, e):
    return np.eye(e, dtype=np.int32)[rng.integers(0, e, n)]


def positions(dt):
    def make(rng, m):
        h = onehot(rng, 22, 4)
        return {"onehot": quantize(h, dt)}, [(np.cumsum(h, 0) - 1, dt)]
    return make


_cs = prog("cumsum.tdsl")
case("cumsum.along", _cs, "along", cumsum_of("f32", (22, 5), 0, 0.125), exact=True)
case("cumsum.across", _cs, "across", cumsum_of("f32", (22, 5), 1, 0.125), exact=True)
case("cumsum.inner", _cs, "inner", cumsum_of("f32", (3, 22), 1, 0.125), exact=True)
case("cumsum.ints", _cs, "ints", cumsum_of("i32", (22, 3), 0))
case("cumsum.narrow", _cs, "narrow", cumsum_of("bf16", (22, 4), 0, 0.125), exact=True)
case("cumsum.two_axes", _cs, "two_axes", cumsum_of("f32", (30, 3), 0, 0.125), exact=True)
case("cumsum.positions", _cs, "positions", positions("i32"))
case("cumsum.positions_f32", _cs, "positions_f32", positions("f32"), exact=True)


# ---- batched gathers, take_along_axis (tests/interp/progs/gather_batch.tdsl) ----
# Indices outside the gathered dim are clamped into it (docs/language.md),
# which np.clip gives; the labels of the cross-entropy cases stay in range.

def take(x, idx, axis):
    """np.take_along_axis with shardc's clamped indices."""
    return np.take_along_axis(d(x), np.clip(idx, 0, x.shape[axis] - 1), axis)


def logsumexp(x):
    peak = x.max(1)
    return np.log(np.exp(x - peak[:, None]).sum(1)) + peak


def xent(rng, m):
    logits, label = normal(rng, 8, 16), rng.integers(0, 16, 8).astype(np.int32)
    loss = logsumexp(d(logits)) - take(logits, label[:, None], 1)[:, 0]
    return {"logits": logits, "label": label}, [(loss, "f32"), (loss.mean(), "f32")]


def xent_vocab_split(rng, m):
    inputs, wants = xent(rng, m)
    return inputs, wants[:1]


def pick(rng, m):
    x, idx = normal(rng, 4, 6, 10), rng.integers(-2, 12, (4, 6, 3)).astype(np.int32)
    return {"x": x, "idx": idx}, [(take(x, idx, 2), "f32")]


def rows(rng, m):
    table, idx = normal(rng, 5, 8, 4), rng.integers(-1, 6, (8, 3)).astype(np.int32)
    # y[b, k, f] = table[idx[b, k], b, f]: the batch dim first, as take_along_axis wants it.
    return {"table": table, "idx": idx}, [(take(table.transpose(1, 0, 2), idx[:, :, None], 1), "f32")]


def middle(rng, m):
    x, idx = normal(rng, 6, 5, 7), rng.integers(0, 7, (6, 4)).astype(np.int32)
    # y[b, k, c] = x[b, c, idx[b, k]]
    return {"x": x, "idx": idx}, [(take(x, idx[:, None, :], 2).transpose(0, 2, 1), "f32")]


for _fn in (xent, xent_vocab_split, pick, rows, middle):
    case("batched gather " + _fn.__name__, prog("gather_batch.tdsl"), _fn.__name__, _fn, interp=[None, (3, 2)],
         codegen=VARIANT_MESHES)


# ---- mixture-of-experts products (tests/interp/progs/moe.tdsl) ----
# Routes run from -1 to E: a gather clamps those into the expert dim.

def routed(w, a, route):
    """out[s, ..., f] = a[s] @ w[route[s, ...]], with w[e] as [d, f]."""
    wr = d(w)[np.clip(route, 0, w.shape[0] - 1)]
    return np.einsum("s...df,sd->s...f", wr, d(a))


def routes(rng, e, *shape):
    return rng.integers(-1, e + 1, shape).astype(np.int32)


def experts_split(rng, m):
    w, a, route = normal(rng, 8, 16, 12), normal(rng, 10, 16), routes(rng, 8, 10)
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route), "f32")]


def experts_transposed(rng, m):
    w, a, route = normal(rng, 6, 12, 16), normal(rng, 10, 16), routes(rng, 6, 10)
    return {"w": w, "a": a, "route": route}, [(routed(w.transpose(0, 2, 1), a, route), "f32")]


def top2(rng, m):
    w, a, route = normal(rng, 8, 16, 12), normal(rng, 10, 16), routes(rng, 8, 10, 2)
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route), "f32")]


def experts_bf16(rng, m):
    w, a, route = quantize(normal(rng, 4, 8, 6), "bf16"), quantize(normal(rng, 6, 8), "bf16"), routes(rng, 4, 6)
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route), "bf16")]


def shared(rng, m):
    w, a, route = normal(rng, 4, 8, 6), normal(rng, 5, 8), routes(rng, 4, 5)
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route), "f32"),
                                              (d(w)[np.clip(route, 0, 3)], "f32")]


for _fn in (experts_split, experts_transposed, top2, experts_bf16, shared):
    case("moe " + _fn.__name__, prog("moe.tdsl"), _fn.__name__, _fn, interp=[None, (3, 2)])


# ---- scatter-add (tests/interp/progs/scatter.tdsl) ----
# Positions outside the operand in any scattered dim are dropped (negative
# ones too), duplicates add up: np.add.at on the positions that survive.

def scatter_add(buf, dims, idxs, upd):
    """buf with upd[I, ...] added at idxs[j][I] along dims[j], in range only."""
    out, n = d(buf).copy(), idxs[0].size
    keep = np.ones(n, bool)
    for dim, idx in zip(dims, idxs):
        keep &= (idx.ravel() >= 0) & (idx.ravel() < buf.shape[dim])
    rest = [a for a in range(buf.ndim) if a not in dims]
    moved = np.moveaxis(out, list(dims) + rest, range(buf.ndim))      # a view: scattered dims first
    np.add.at(moved, tuple(idx.ravel()[keep] for idx in idxs), d(upd).reshape((n,) + moved.shape[len(dims):])[keep])
    return out


def positions(rng, n, size):
    """Indices into a dim of n with duplicates and a few out of range."""
    return rng.integers(-1, n + 2, size).astype(np.int32)


def sc_plain(rng, m):
    buf, x, route = normal(rng, 5, 4), normal(rng, 4, 7), positions(rng, 5, 7)
    return {"buf": buf, "route": route, "x": x}, [(scatter_add(buf, [0], [route], 2 * d(x).T), "f32")]


def sc_dispatch(rng, m):
    x, route, pos = normal(rng, 12, 8), positions(rng, 4, 12), positions(rng, 3, 12)
    return {"x": x, "route": route, "pos": pos}, [(scatter_add(np.zeros((4, 3, 8)), [0, 1], [route, pos], x), "f32")]


def sc_tokens(rng, m):
    buf, x, route = normal(rng, 5, 6), normal(rng, 10, 6), positions(rng, 5, 10)
    return {"buf": buf, "x": x, "route": route}, [(scatter_add(buf, [0], [route], x), "f32")]


def sc_table(rng, m):
    t, x, tok = normal(rng, 64, 6), normal(rng, 3, 5, 6), positions(rng, 64, (3, 5))
    tok[1, :2] = tok[0, 0]       # one row from several devices' tokens
    return ({"t": t, "x": x, "tok": tok},
            [(scatter_add(np.zeros((64, 6)), [0], [tok], x), "f32"), (scatter_add(t, [0], [tok], x), "f32")])


def sc_features(rng, m):
    buf, x, route = normal(rng, 6, 8), normal(rng, 10, 8), positions(rng, 6, 10)
    return {"buf": buf, "x": x, "route": route}, [(scatter_add(buf, [0], [route], x), "f32")]


def sc_counts(rng, m):
    route, ones = positions(rng, 6, (3, 4)), rng.integers(1, 4, (3, 4)).astype(np.int32)
    acc, w, v = normal(rng, 3, 5), normal(rng, 3, 2), normal(rng, 2, 5)
    return ({"route": route, "ones": ones, "acc": acc, "w": w, "v": v},
            [(scatter_add(np.zeros(6), [0], [route], ones), "i32"), (d(acc) + d(w) @ d(v), "f32")])


for _name, _fns, _fn in (("plain", "plain", sc_plain), ("dispatch", ("dispatch", "experts_split"), sc_dispatch),
                         ("tokens split", "tokens_split", sc_tokens), ("table grad", "table_grad", sc_table), ("features split", "features_split", sc_features),
                         ("counts", "counts", sc_counts)):
    case("scatter " + _name, prog("scatter.tdsl"), _fns, _fn, interp=[None, (3, 2)])


# ---- run-time positions from i32[] scalars (tests/interp/progs/dynidx.tdsl) ----
# A position clamps into the dim so the slice or the written slot stays
# inside it (jax.lax.dynamic_slice / dynamic_update_slice); the positions
# drawn include some past either end.

def clamp(t, n, size=1):
    return min(max(int(t), 0), n - size)


def i32(t):
    return np.array(t, dtype=np.int32)


def dyn_pick(rng, m):
    data, t = normal(rng, 5, 4, 6), int(rng.integers(-2, 8))
    return {"data": data, "t": i32(t)}, [(data[clamp(t, 5)], "f32")]


def dyn_window(rng, m):
    x, t = normal(rng, 6, 4), int(rng.integers(-3, 6))
    at = clamp(t + 1, 6, 3)
    return {"x": x, "t": i32(t)}, [(x[at:at + 3], "f32")]


def dyn_pick_summed(rng, m):
    x, idx = normal(rng, 5, 4), rng.integers(-1, 3, 4).astype(np.int32)
    return {"x": x, "idx": idx}, [(x[clamp(idx.sum(), 5)], "f32")]


def dyn_update(scale):
    def make(rng, m):
        cache, row, pos = normal(rng, 2, 4, 6, 4), normal(rng, 4, 4), int(rng.integers(-2, 9))
        want = d(cache).copy()
        for layer in range(2):
            want[layer, :, clamp(pos, 6)] = scale(d(row), layer)
        return {"cache": cache, "pos": i32(pos), "row": row}, [(want, "f32")]
    return make


def scatter_batch(rng, m):
    g, label, dd = normal(rng, 4, 5), positions(rng, 5, 4), normal(rng, 4)
    return {"g": g, "label": label, "d": dd}, [(scatter_add(g, [1, 0], [label, np.arange(4)], dd), "f32")]


def scatter_batch2(rng, m):
    g, label, dd = normal(rng, 4, 5, 4), positions(rng, 5, (4, 4)), normal(rng, 4, 4)
    b, e = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    return {"g": g, "label": label, "d": dd}, [(scatter_add(g, [1, 0, 2], [label, b, e], dd), "f32")]


def dyn_g_slice(rng, m):
    def loss(x, w, t):
        at = clamp(t, 6, 3)
        y = x[at:at + 3]
        return (y * y * w).sum()
    return with_grads(loss, {"x": normal(rng, 6, 4), "w": normal(rng, 3, 4), "t": i32(rng.integers(-2, 7))}, ["x"])


def dyn_g_update(rng, m):
    def loss(cache, row, w, pos):
        c = cache.copy()
        c[1, :, clamp(pos, 6)] = row * row
        return (c * c * w).sum()
    inputs = {"cache": normal(rng, 2, 4, 6), "row": normal(rng, 4), "w": normal(rng, 2, 4, 6),
              "pos": i32(rng.integers(-2, 8))}
    return with_grads(loss, inputs, ["cache", "row"])


def dyn_g_scatter(rng, m):
    def loss(g, label, d, w):
        return (scatter_add(g, [1, 0], [label, np.arange(4)], d * d) ** 2 * w).sum()
    inputs = {"g": normal(rng, 4, 5), "label": positions(rng, 5, 4), "d": normal(rng, 4), "w": normal(rng, 4, 5)}
    return with_grads(loss, inputs, ["g", "d"])


_dy = prog("dynidx.tdsl")
for _name, _fns, _fn, _exact in (("pick", ("pick", "pick_split"), dyn_pick, True), ("window", "window", dyn_window, True),
                                 ("pick_summed", "pick_summed", dyn_pick_summed, True),
                                 ("update_mid", "update_mid", dyn_update(lambda r, l: r * (l + 1)), True),
                                 ("update_split", "update_split", dyn_update(lambda r, l: r - l), True),
                                 ("scatter_batch", "scatter_batch", scatter_batch, False),
                                 ("scatter_batch2", "scatter_batch2", scatter_batch2, False),
                                 ("g_slice", "g_slice", dyn_g_slice, False), ("g_update", "g_update", dyn_g_update, False),
                                 ("g_scatter", "g_scatter", dyn_g_scatter, False)):
    # Generated C on the uneven mesh only (split dims, padded blocks, both
    # backends); check_partition.py covers the other meshes in the interpreter.
    case("dynidx " + _name, _dy, _fns, _fn, exact=_exact, interp=[None, (3, 2)], codegen=[4], runs=1)


# ---- argmax, argmin, top_k (tests/interp/progs/topk.tdsl) ----
# Values are a few multiples of 1/2, so rows have many ties: the indices of
# equal values must come lowest first, which a stable argsort of -x gives.

def tied(rng, *shape):
    return (rng.integers(-3, 4, shape) * 0.5).astype(np.float32)


def top_k(x, k):
    i = np.argsort(-d(x), axis=-1, kind="stable")[..., :k].astype(np.int32)
    return np.take_along_axis(d(x), i, -1), i


def top_of(k, dt, *shape):
    def make(rng, m):
        x = quantize(tied(rng, *shape) * (2 if dt == "i32" else 1), dt)
        v, i = top_k(x, k)
        return {"x": x}, [(v, dt), (i, "i32")]
    return make


def arg_of(*shape):
    """argmax and argmin; rows of -inf and of +inf tie with the padding of
    uneven blocks, which must lose (it lies after every real index)."""
    def make(rng, m):
        x = tied(rng, *shape)
        x[0], x[-1] = -np.inf, np.inf
        return {"x": x}, [(np.argmax(x, -1).astype(np.int32), "i32"), (np.argmin(x, -1).astype(np.int32), "i32")]
    return make


arg_best = arg_of(8, 7)


def router(rng, m):
    logits = tied(rng, 8, 8)
    v, i = top_k(logits, 2)
    e = np.exp(v - v.max(-1, keepdims=True))
    return {"logits": logits}, [(e / e.sum(-1, keepdims=True), "f32"), (i, "i32")]


for _name, _make in (("top3", top_of(3, "f32", 8, 12)), ("sort_all", top_of(5, "f32", 6, 5)),
                     ("top_i32", top_of(4, "i32", 4, 2, 9)), ("top_bf16", top_of(2, "bf16", 8, 10)),
                     ("arg_best", arg_best), ("top_split", top_of(3, "f32", 8, 16)), ("router", router),
                     ("top_wide", top_of(3, "f32", 4, 64)), ("arg_split", arg_of(6, 9)),
                     ("top_many", top_of(6, "f32", 4, 10)), ("top_bf16_split", top_of(2, "bf16", 8, 64)),
                     ("top_i32_split", top_of(4, "i32", 3, 100))):
    case("top_k " + _name, prog("topk.tdsl"), _name, _make, exact=_name != "router", interp=[None, (3, 2), (2, 4)])


# ---- training staples (tests/interp/progs/staples.tdsl) ----

erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_exact(x):
    return 0.5 * x * np.vectorize(math.erfc, otypes=[np.float64])(-x / math.sqrt(2))


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_logsumexp(x, axis):
    m = x.max(axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.exp(x - m).sum(axis))


def np_log_softmax(x, axis):
    return x - np.expand_dims(np_logsumexp(x, axis), axis)


def staples_elementwise(rng, m):
    x = (rng.uniform(-4, 4, (6, 8))).astype(np.float32)
    return {"x": x}, [(erf(d(x)), "f32"), (gelu_exact(d(x)), "f32"), (2 * d(x), "f32")]


def staples_elementwise_bf16(rng, m):
    x = quantize(rng.uniform(-4, 4, (6, 8)), "bf16")
    return {"x": x}, [(erf(d(x)), "bf16"), (gelu_exact(d(x)), "bf16")]


def staples_normalize(rng, m):
    x = normal(rng, 6, 8) * 4
    x[0, 3] = 60                 # exp(60) overflows f32 unless the max is subtracted first
    return {"x": x}, [(np_softmax(d(x), 1), "f32"), (np_log_softmax(d(x), 1), "f32"), (np_logsumexp(d(x), 1), "f32")]


def staples_normalize2(rng, m):
    x = normal(rng, 2, 6, 8) * 4
    p = np_softmax(d(x).reshape(2, 48), 1).reshape(2, 6, 8).transpose(2, 0, 1)
    return {"x": x}, [(p, "f32"), (np_logsumexp(d(x).reshape(2, 48), 1), "f32")]


def staples_grad(rng, m):
    x, c = normal(rng, 6, 8) * 2, normal(rng, 6, 8)
    x0 = d(x)                    # stop_gradient(x): a constant to the finite differences
    def loss(x, c):
        u = erf(x) + gelu_exact(x) * x0
        l = np_logsumexp(x, 1)
        return (c * (np_softmax(x, 1) + 0.5 * np_log_softmax(x, 1) + u)).sum() + 0.25 * (l * l).sum()
    return with_grads(loss, {"x": x, "c": c}, ["x"])


def staples_sorts(rng, m):
    x = tied(rng, 6, 8)
    x[1, 2] = x[1, 5] = x[4, 0] = np.nan              # NaNs sort last, in index order
    x[2, 3], x[3, 7] = -np.inf, np.inf
    st = lambda f, a: f(x, axis=a, kind="stable")
    return {"x": x}, [(st(np.sort, 1), "f32"), (st(np.argsort, 1).astype(np.int32), "i32"), (st(np.sort, 0), "f32"),
                      (st(np.argsort, 0).astype(np.int32), "i32")]


def staples_sorts_i32(rng, m):
    x = rng.integers(-4, 5, (6, 8)).astype(np.int32)
    x[0, :2] = [2**31 - 1, -2**31]
    return {"x": x}, [(np.sort(x, 1, kind="stable"), "i32"), (np.argsort(x, 1, kind="stable").astype(np.int32), "i32")]


def staples_sort_grad(rng, m):
    x, c = normal(rng, 6, 8), normal(rng, 6, 8)
    def loss(x, c):
        y = np.sort(x, 1)
        return (c * y * y).sum()
    return with_grads(loss, {"x": x, "c": c}, ["x"])


# Generated C on 4 devices (2x2) and the uneven 3x2, both splitting t by Y;
# check_partition.py runs every function on every mesh in the interpreter.
for _fn in (staples_elementwise, staples_elementwise_bf16, staples_normalize, staples_normalize2, staples_sorts,
            staples_sorts_i32):
    case("staples " + _fn.__name__[8:], prog("staples.tdsl"), _fn.__name__[8:], _fn, interp=[None, (2, 4), (3, 2)],
         codegen=[2, 4])
case("staples grad", prog("staples.tdsl"), "g_staples", staples_grad, scaled=True, interp=[None, (2, 4), (3, 2)],
     codegen=[2, 4])
case("staples sort grad", prog("staples.tdsl"), "g_sort", staples_sort_grad, scaled=True, interp=[None, (2, 4), (3, 2)],
     codegen=[2, 4])


# ---- bf16 and f16 partial sums in f32 (tests/interp/progs/partial_f32.tdsl) ----
# Integers whose sums f32 holds exactly and bf16 (f16) does not: one large
# element (256; 2048 for f16) among small ones.  Every mesh must give the
# bits of the one rounding of the exact sum, as one device does; rounding
# each device's partial sum first gives other bits.

def big_and_small(rng, dt, *shape):
    x = rng.integers(0, 3, shape).astype(np.float32)
    x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 20))] = 2048 if dt == "f16" else 256
    return x


def summed(dt, fn):
    def make(rng, m):
        x = big_and_small(rng, dt, *((26,) if fn.startswith("sum") else (3, 26)))
        return {"x": x.astype(np.float16) if dt == "f16" else x}, [(quantize(x.astype(np.float64).sum(-1), dt), dt)]
    return make


def dotted(dt, rows, cols, chained=False, columns=None):
    def make(rng, m):
        a = big_and_small(rng, dt, rows, 26)
        b = rng.integers(0, 2, (26, cols)).astype(np.float32)
        want = quantize(d(a) @ d(b if columns is None else b[:, columns]), dt)
        inputs = {"a": a.astype(np.float16) if dt == "f16" else a, "b": b.astype(np.float16) if dt == "f16" else b}
        if chained:
            c = rng.integers(0, 2, (cols, 3)).astype(np.float32)
            inputs["c"], want = c, quantize(d(want) @ d(c), dt)
        return inputs, [(want, dt)]
    return make


# One device rounds each dot's product before the add: only inputs whose
# products bf16 holds give the bits the partial sums give.
def added_dots(rows, cols):
    def make(rng, m):
        b = rng.integers(0, 2, (26, cols)).astype(np.float32)
        # u and v are exact in bf16 (below 256), so one device's rounded
        # u + v is the one rounding of the sum, as the partial sums give.
        a, c = rng.integers(0, 3, (rows, 26)).astype(np.float32), rng.integers(0, 3, (rows, 26)).astype(np.float32)
        e = rng.integers(0, 2, (26, cols)).astype(np.float32)
        return {"a": a, "b": b, "c": c, "e": e}, [(quantize(d(a) @ d(b) + d(c) @ d(e), "bf16"), "bf16")]
    return make


# The dots' generated C (sk_epilogue's f32_out) is built for 4 devices and
# the uneven 3 (threads and MPI) only, and for the all-reduce, the
# reduce-scatter and (uneven only) the strided operand: the interpreter
# checks the others on every mesh.
for _fn, _make, _codegen in (("sum_bf16", summed("bf16", "sum"), None), ("sum_f16", summed("f16", "sum"), None),
                             ("rows_bf16", summed("bf16", "rows"), None), ("dot_bf16", dotted("bf16", 4, 5), [2, 4]),
                             ("dot_f16", dotted("f16", 4, 5), []), ("scatter_bf16", dotted("bf16", 8, 4), [2, 4]),
                             ("chain_bf16", dotted("bf16", 4, 5, chained=True), []),
                             ("strided_bf16", dotted("bf16", 4, 10, columns=slice(2, 7)), [4]),
                             ("add_bf16", added_dots(4, 5), None)):
    case("partial f32 " + _fn, prog("partial_f32.tdsl"), _fn, _make, exact=True,
         interp=[None, (1,), (3,), (4,), (8,)], codegen=_codegen, partitioned=True)


# ---- reshards that move axes between dims (tests/interp/progs/reshard_moves.tdsl) ----

def reshard_of(dt, *shape):
    """A reshard: the result is the input, of dtype dt (f32 or i32)."""
    def make(rng, m):
        x = rng.integers(-1000, 1000, shape).astype(np.int32) if dt == "i32" else normal(rng, *shape)
        return {"x": x}, [(x, dt)]
    return make


def scaled(rng, m):
    x = normal(rng, 7, 31, 16)
    return {"x": x}, [(x * np.float32(2), "f32")]


_moves = prog("reshard_moves.tdsl")
for _fn, _dt, _shape in (("uneven_move", "f32", (7, 31, 16)), ("uneven_back", "f32", (7, 31, 16)),
                         ("two_dims", "f32", (16, 16, 16, 16)), ("two_dims_uneven", "f32", (5, 7, 9, 3)),
                         ("one_dim", "f32", (10, 6)), ("reordered", "f32", (12, 4)), ("in_turn", "f32", (12, 10, 6)),
                         ("two_into_one", "f32", (6, 8, 10)), ("one_into_two", "f32", (8, 6, 4)),
                         ("ints", "i32", (7, 5, 3)), ("swap_order", "f32", (12, 5)), ("swap_dims", "f32", (8, 6)),
                         ("subgroup", "f32", (16, 12)), ("nest_merge", "f32", (4, 15, 15)),
                         ("regather", "f32", (7, 6)), ("owners", "f32", (2, 5)),
                         ("drop_first", "f32", (8, 7)), ("halo_grow", "f32", (7, 3)),
                         ("halo_shrink", "f32", (7, 3))):
    case("reshard_moves." + _fn, _moves, _fn, reshard_of(_dt, *_shape), exact=True, codegen=VARIANT_MESHES)
case("reshard_moves.scaled", _moves, "scaled", scaled, exact=True, codegen=VARIANT_MESHES)


# ---- slices along split dims (tests/interp/progs/split_slices.tdsl) ----

def sliced(dt, shape, *bounds, scale=1):
    """x[bounds] (times scale) for x of the given shape and dtype."""
    def make(rng, m):
        x = rng.integers(-1000, 1000, shape).astype(np.int32) if dt == "i32" else normal(rng, *shape)
        y = x[tuple(slice(lo, hi) for lo, hi in bounds)]
        return {"x": x}, [(y * np.float32(scale) if scale != 1 else y, dt)]
    return make


_sl = prog("split_slices.tdsl")
for _fn, _dt, _shape, _bounds in (
        ("narrow", "f32", (16, 4), [(1, 15)]), ("middle", "f32", (16, 3), [(2, 12)]),
        ("head", "f32", (64, 2), [(0, 8)]), ("tail", "f32", (17, 3), [(5, 14)]),
        ("drop_last", "f32", (31, 2), [(0, 30)]), ("window", "f32", (40, 3), [(30, 37)]),
        ("columns", "f32", (3, 40), [(0, 3), (7, 28)]), ("ints", "i32", (33, 2), [(13, 33)]),
        ("both_dims", "f32", (12, 6), [(2, 7), (1, 5)]), ("two_axes", "f32", (32, 3), [(5, 26)])):
    case("split_slices." + _fn, _sl, _fn, sliced(_dt, _shape, *_bounds), exact=True, codegen=VARIANT_MESHES)
case("split_slices.other_axis", _sl, "other_axis", sliced("f32", (9, 30), (0, 9), (13, 24), scale=2), exact=True,
     codegen=VARIANT_MESHES)


# ---- pads and convolution windows along split dims (tests/interp/progs/halo_pads.tdsl) ----

def padded(dt, shape, dim, low, high, fill=0):
    """x padded along dim with `fill`."""
    def make(rng, m):
        x = rng.integers(-1000, 1000, shape).astype(np.int32) if dt == "i32" else normal(rng, *shape)
        width = [(0, 0)] * len(shape)
        width[dim] = (low, high)
        return {"x": x}, [(np.pad(x, width, constant_values=fill).astype(x.dtype), dt)]
    return make


def last_padded(rng, m):
    p = rng.standard_normal(64)
    return {"p": p}, [(np.concatenate([p[63:], np.zeros(10)]), "f64")]


def conv1d(rng, m):
    x, w = normal(rng, 4, 64), normal(rng, 3)
    xp = np.pad(d(x), [(0, 0), (1, 1)])
    return {"x": x, "w": w}, [(sum(xp[:, i:i + 64] * d(w[i]) for i in range(3)), "f32")]


def conv2d(rng, m):
    x, w = normal(rng, 16, 20), normal(rng, 3, 3)
    xp = np.pad(d(x), [(1, 1), (1, 1)])
    return {"x": x, "w": w}, [(sum(xp[r:r + 16, c:c + 20] * d(w[r, c]) for r in range(3) for c in range(3)), "f32")]


_hp = prog("halo_pads.tdsl")
for _fn, _make in (("pad_high", padded("f32", (14, 257), 1, 0, 2)), ("pad_low", padded("f32", (30, 3), 0, 3, 0, 1.5)),
                   ("pad_both", padded("f32", (29, 2), 0, 2, 4)), ("pad_ints", padded("i32", (17, 2), 0, 0, 1, 7))):
    case("halo_pads." + _fn, _hp, _fn, _make, exact=True)
case("halo_pads.last_padded", _hp, "last_padded", last_padded, exact=True)
case("halo_pads.conv1d", _hp, "conv1d", conv1d)
case("halo_pads.conv2d", _hp, "conv2d", conv2d)


# ---- slices to fewer rows than blocks (tests/interp/progs/halo_slices.tdsl) ----

_hs = prog("halo_slices.tdsl")
for _fn, _shape, _bounds in (("first", (512,), [(0, 1)]), ("last", (64,), [(63, 64)]), ("two", (30, 3), [(14, 16)]),
                             ("rows", (16, 8), [(6, 9)])):
    case("halo_slices." + _fn, _hs, _fn, sliced("f32", _shape, *_bounds), exact=True)
case("halo_slices.cols", _hs, "cols", sliced("f32", (5, 30), (0, 5), (13, 15), scale=2), exact=True)
case("halo_slices.elem", _hs, "elem", sliced("f32", (64, 4), (37, 38)), exact=True, codegen=VARIANT_MESHES)


def slot_written(rng, m):
    x, v = normal(rng, 13, 3), normal(rng, 3)
    pos = int(rng.integers(0, 13))
    y = x.copy()
    y[pos] = v
    return {"x": x, "pos": np.array(pos, dtype=np.int32), "v": v}, [(y, "f32")]


case("halo_slices.slot", _hs, "slot", slot_written, exact=True, codegen=VARIANT_MESHES)


# ---- rotations: concats of slices of one value (tests/interp/progs/halo_rotations.tdsl) ----

def rotated(dt, shape, dim, start):
    """x rotated along dim: row i of the result is row (i + start) mod n of x."""
    def make(rng, m):
        x = (rng.integers(-1000, 1000, shape).astype(np.int32) if dt == "i32" else
             rng.integers(0, 2, shape).astype(np.bool_) if dt == "bool" else normal(rng, *shape))
        return {"x": x}, [(np.roll(x, -start, axis=dim), dt)]
    return make


_hr = prog("halo_rotations.tdsl")
for _fn, _dt, _shape, _dim, _start in (("right", "f32", (12,), 0, 10), ("aligned", "f32", (6,), 0, 4),
                                       ("unaligned", "f32", (10,), 0, 4), ("three", "f32", (7, 3), 0, 5),
                                       ("cols", "i32", (3, 9), 1, 7), ("rolled", "f32", (9, 3), 0, 4)):
    case("halo_rotations." + _fn, _hr, _fn, rotated(_dt, _shape, _dim, _start), exact=True, codegen=VARIANT_MESHES)
case("halo_rotations.whole", _hr, "whole", rotated("f32", (12,), 0, 5), exact=True, codegen=VARIANT_MESHES)
case("halo_rotations.flags", _hr, "flags", rotated("bool", (10,), 0, 3), exact=True, codegen=VARIANT_MESHES)


def rotated_shared(rng, m):
    x = normal(rng, 10)
    s = x[4:10]
    return {"x": x}, [(np.concatenate([s, x[0:4]]) + np.concatenate([s, s[0:4]]), "f32")]


case("halo_rotations.shared", _hr, "shared", rotated_shared, exact=True, codegen=VARIANT_MESHES)


def pieces_of(shape, *bounds):
    """The concat along dim 0 of the rows [lo, hi) of x, for each (lo, hi)."""
    def make(rng, m):
        x = normal(rng, *shape)
        return {"x": x}, [(np.concatenate([x[lo:hi] for lo, hi in bounds]), "f32")]
    return make


for _fn, _shape, _bounds in (("shuffle", (16,), [(4, 8), (0, 4), (12, 16), (8, 12)]),
                             ("longer", (10, 3), [(7, 10), (0, 10)]), ("twice", (6, 4), [(0, 6), (0, 6)])):
    case("halo_rotations." + _fn, _hr, _fn, pieces_of(_shape, *_bounds), exact=True, codegen=VARIANT_MESHES)


# ---- reshapes that move a split dim's boundaries (tests/interp/progs/halo_reshapes.tdsl) ----

def reshaped(dt, shape, to):
    def make(rng, m):
        x = rng.integers(-1000, 1000, shape).astype(np.int32) if dt == "i32" else normal(rng, *shape)
        return {"x": x}, [(x.reshape(to), dt)]
    return make


_hr = prog("halo_reshapes.tdsl")
for _fn, _dt, _shape, _to in (("merge", "i32", (2, 3, 7, 10), (3, 2, 1, 14, 5)), ("split", "f32", (14, 5), (7, 10)),
                              ("flatten", "f32", (5, 6), (30,)), ("unflatten", "f32", (36,), (4, 9))):
    case("halo_reshapes." + _fn, _hr, _fn, reshaped(_dt, _shape, _to), exact=True)


# ---- fused elementwise chains (tests/interp/progs/fusion.tdsl) ----

def i32_wrap(a):
    return (np.asarray(a, np.int64) + 2**31) % 2**32 - 2**31


def fusion_affine(rng, m):
    x, w, b = normal(rng, 8, 4), normal(rng, 8, 4), normal(rng, 4)
    return {"x": x, "w": w, "b": b}, [(gelu(d(x) * d(w) + d(b)), "f32")]


def fusion_after_loop(rng, m):
    x, w, y = normal(rng, 4, 4), normal(rng, 4, 4), normal(rng, 8)
    a = np.abs(d(x) @ d(w))
    return {"x": x, "w": w, "y": y}, [(a * 3 - a, "f32"), (d(y) * 3, "f32")]


def fusion_wider(rng, m):
    x, w, c, p = rng.standard_normal((8, 8)), rng.standard_normal(8), rng.random((8, 4)) < 0.5, normal(rng, 8)
    q = normal(rng, 8, 3)
    t = d(quantize(x @ w, "f32")) + d(p)
    r = np.where(c[:, 1], t, d(p))
    return {"x": x, "w": w, "c": c, "p": p, "q": q}, [(d(quantize(r, "f32")) * d(quantize(t, "f32")), "f32"),
                                                      (d(quantize(r, "f32")) @ d(q), "f32")]


def fusion_scalars(rng, m):
    x, n = np.float32(rng.standard_normal()), np.int32(rng.integers(-100, 100))
    return {"x": np.array(x), "n": np.array(n)}, [((d(x) * 2 + 1) / 3, "f32"), (np.mod(int(n) * 7 + 1, 5), "i32")]


def fusion_overlap(rng, m):
    x, y = normal(rng, 8, 4), normal(rng, 8, 4)
    nx = m["X"]
    a = d(x) * d(y) + 1
    s = np.tile(a.reshape(nx, -1, 4).sum(0), (nx, 1))
    b = a * 2 - d(y)
    t = np.roll(b.reshape(nx, -1, 4), 1, 0).reshape(8, 4)       # block k goes to k + 1
    c = b + t * a
    return {"x": x, "y": y}, [(s * c, "f32"), (np.maximum(c, 0) + s, "f32")]


def softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def fusion_long_rows(rng, m):
    x, w, y = normal(rng, 3, 100), normal(rng, 3, 100), normal(rng, 2, 64)
    e = np.exp(d(x) - d(x).max(-1, keepdims=True))
    s = e.sum(-1)
    return {"x": x, "w": w, "y": y}, [(e / s[:, None] * d(w), "f32"), (s, "f32"),
                                      (d(y) - d(y).min(-1, keepdims=True), "f32")]


def fusion_long_softmax(rng, m):
    x = normal(rng, 4, 80)
    return {"x": x}, [(softmax_np(d(x)), "f32")]


case("fusion.affine_gelu", prog("fusion.tdsl"), "affine_gelu", fusion_affine)
case("fusion.long_rows", prog("fusion.tdsl"), "long_rows", fusion_long_rows)
case("fusion.long_softmax", prog("fusion.tdsl"), "long_softmax", fusion_long_softmax)
case("fusion.after_loop", prog("fusion.tdsl"), "after_loop", fusion_after_loop)
case("fusion.wider", prog("fusion.tdsl"), "wider", fusion_wider)
case("fusion.scalars", prog("fusion.tdsl"), "scalars", fusion_scalars)
case("fusion.overlap", prog("fusion.tdsl"), "overlap", fusion_overlap,
     consts=None, interp=[None, (4,)])


# ---- sharding-generic functions (tests/interp/progs/generic.tdsl) ----

def norm_np(x, gain):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * gain


def generic_layers(rng, m):
    x, w, gain = normal(rng, 8, 4, 16), normal(rng, 3, 16, 16) * 0.5, normal(rng, 16) * 0.5 + 1
    h = d(x)
    for layer in range(3):
        h = norm_np(h, d(gain)) @ d(w)[layer]
    return {"x": x, "w": w.astype(np.float32), "gain": gain.astype(np.float32)}, [(h, "f32")]


def generic_split_d(rng, m):
    x, gain = normal(rng, 8, 4, 16), normal(rng, 16) * 0.5 + 1
    n = norm_np(d(x), d(gain))
    return {"x": x, "gain": gain.astype(np.float32)}, [(n, "f32"), (n.sum(-1), "f32")]


case("generic.layers", prog("generic.tdsl"), ["layers", "plain_layers"], generic_layers, scaled=True,
     interp=[None, (1, 2)])
case("generic.split_d", prog("generic.tdsl"), "split_d", generic_split_d, scaled=True)


# ---- loops that stay loops (tests/interp/progs/loops.tdsl) ----

def loops_accum(rng, m):
    x = normal(rng, 8)
    acc = d(x)
    for i in range(300):
        acc = acc * 0.99 + d(x) * (i % 7)
    return {"x": x}, [(acc, "f32"), (np.float64(300), "f32")]


def loops_rnn(rng, m):
    h0, w, xs = normal(rng, 4, 8), normal(rng, 8, 8) * 0.5, normal(rng, 100, 4, 8)
    h = d(h0)
    for t in range(100):
        h = np.tanh(h @ d(w) + d(xs)[t])
    return {"h0": h0, "w": w.astype(np.float32), "xs": xs}, [(h, "f32")]


def loops_stacked(rng, m):
    x, ws, bs = normal(rng, 4, 8), normal(rng, 20, 8, 8) * 0.5, normal(rng, 20, 8)
    h = d(x)
    for layer in range(20):
        y = h @ d(ws)[layer] + d(bs)[layer]
        h = np.maximum(y, 0) * 0.5 + h * 0.5
    return {"x": x, "ws": ws.astype(np.float32), "bs": bs}, [(h, "f32"), (y, "f32")]


def loops_nested(rng, m):
    x = normal(rng, 8)
    acc = d(x)
    for a in range(12):
        for b in range(40):
            acc = acc * 0.9 + d(x) * (a - b)
        acc = acc * 0.5
    return {"x": x}, [(acc, "f32")]


def loops_rnn_steps(rng, m):
    h0, w, xs = normal(rng, 4, 8), normal(rng, 8, 8) * 0.5, normal(rng, 100, 4, 8)
    n = int(rng.integers(0, 101))
    h = d(h0)
    for t in range(n):
        h = np.tanh(h @ d(w) + d(xs)[t])
    return {"h0": h0, "w": w.astype(np.float32), "xs": xs, "n": np.array(n, np.int32)}, [(h, "f32")]


def loops_window(rng, m):
    x, lo = normal(rng, 8), int(rng.integers(-20, 20))
    mask = (rng.random(100) < 0.3).astype(np.int32)
    acc = d(x)
    for t in range(lo, lo + int(mask.sum())):
        acc = acc * 0.9 + d(x) * (t % 7)
    return {"x": x, "lo": np.array(lo, np.int32), "mask": mask}, [(acc, "f32"), (x, "f32")]


def loops_ring(rng, m):
    x = normal(rng, 12, 8)
    nx, ny = m["X"], m["Y"]
    acc = d(x)
    for r in range(40):
        nxt = np.roll(acc, 12 // nx, axis=0)               # block k of X receives block k - 1's
        blocks = acc.reshape(12, ny, 8 // ny)
        total = np.tile(blocks.mean(axis=1), (1, ny))       # the mean over Y of the blocks
        acc = acc * 0.5 + nxt * 0.25 + total * 0.125 + (r % 3)
    return {"x": x}, [(acc, "f32")]


case("loops.accum", prog("loops.tdsl"), "accum", loops_accum, scaled=True, interp=[None, (1, 1), (2, 4)])
case("loops.rnn", prog("loops.tdsl"), "rnn", loops_rnn, scaled=True, interp=[None, (1, 1), (2, 4)])
case("loops.stacked", prog("loops.tdsl"), "stacked", loops_stacked, scaled=True, interp=[None, (1, 1), (2, 4)])
case("loops.nested", prog("loops.tdsl"), "nested", loops_nested, scaled=True, interp=[None, (1, 1)])
case("loops.rnn_steps", prog("loops.tdsl"), "rnn_steps", loops_rnn_steps, scaled=True, interp=[None, (1, 1), (2, 4)])
case("loops.window", prog("loops.tdsl"), "window", loops_window, scaled=True, interp=[None, (1, 1), (2, 4)])
case("loops.ring", prog("loops.tdsl"), "ring", loops_ring, interp=[None, (1, 1), (2, 4), (3, 2)])


# ---- gradients through loops that stay loops (tests/interp/progs/loop_grad.tdsl) ----
# Each loss in NumPy (f64), its gradients by central differences (fd_grad):
# an adjoint that forgets an iteration, runs the iterations forward, or does
# not sum an invariant's gradient over them is off by far more than TOL.

def rnn_np(h0, w, u, xs):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(h @ w + xs[t])
    o = h @ u
    return (o * o).mean()


def loop_grad_rnn(steps):
    def make(rng, m):
        inputs = {"h0": normal(rng, 4, 6), "w": normal(rng, 6, 6) * np.float32(0.5), "u": normal(rng, 6, 6),
                  "xs": normal(rng, steps, 4, 6)}
        return with_grads(rnn_np, inputs, ["w", "u"])
    return make


def loop_grad_rnn_inputs(rng, m):
    inputs = {"h0": normal(rng, 4, 6), "w": normal(rng, 6, 6) * np.float32(0.5), "u": normal(rng, 6, 6),
              "xs": normal(rng, 40, 4, 6)}
    return with_grads(rnn_np, inputs, ["h0", "xs"], value=False)


def loop_norm_np(h0, w, xs):
    h, s = h0, 0.0
    for t in range(xs.shape[0]):
        y = np.tanh(h @ w + xs[t])
        n = (y * y).mean(axis=1)
        h = y / np.sqrt(n + 1.0)[:, None]
        s = s * 0.9 + n[0] + 1.0
    return (h * h).sum() + s * 0.1


def loop_grad_norm(rng, m):
    inputs = {"h0": normal(rng, 4, 6), "w": normal(rng, 6, 6) * np.float32(0.5), "xs": normal(rng, 40, 4, 6)}
    return with_grads(loop_norm_np, inputs, ["w", "h0"])


def nested_np(x, w):
    acc = x
    for a in range(10):
        for c in range(20):
            acc = np.tanh(acc @ w) * 0.5 + acc * 0.5 + x * ((a - c) * 0.01)
        acc = acc * 0.9
    return (acc * acc).sum()


def loop_grad_nested(rng, m):
    return with_grads(nested_np, {"x": normal(rng, 6), "w": normal(rng, 6, 6) * np.float32(0.5)}, ["x", "w"])


def called_np(h0, w, xs):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(h @ w + xs[t]) * 0.9
    return (h * h * h).sum()


def loop_grad_called(rng, m):
    inputs = {"h0": normal(rng, 4, 6), "w": normal(rng, 6, 6) * np.float32(0.5), "xs": normal(rng, 40, 4, 6)}
    return with_grads(called_np, inputs, ["w"])


def stacked_np(x, ws, bs):
    h = x
    for layer in range(ws.shape[0]):
        y = h @ ws[layer] + bs[layer]
        h = np.tanh(y) * 0.5 + h * 0.5
    return (h * h).sum() + y.sum()


def loop_grad_stacked(rng, m):
    inputs = {"x": normal(rng, 4, 6), "ws": normal(rng, 20, 6, 6) * np.float32(0.5), "bs": normal(rng, 20, 6)}
    return with_grads(stacked_np, inputs, ["ws", "bs", "x"])


def scan_np(h0, w, xs):
    h, ys = h0, np.zeros(xs.shape)
    for t in range(xs.shape[0]):
        h = np.tanh(h @ w + xs[t])
        ys[t] = h
    return ys


def loop_grad_scan(rng, m):
    inputs = {"h0": normal(rng, 4, 6), "w": normal(rng, 6, 6) * np.float32(0.5), "xs": normal(rng, 40, 4, 6)}
    return inputs, [(scan_np(**{k: d(v) for k, v in inputs.items()}), "f32")]


def loop_grad_g_scan(rng, m):
    inputs = {"h0": normal(rng, 4, 6), "w": normal(rng, 6, 6) * np.float32(0.5), "xs": normal(rng, 40, 4, 6),
              "c": normal(rng, 40, 4, 6)}
    return with_grads(lambda h0, w, xs, c: (scan_np(h0, w, xs) * c).sum(), inputs, ["w", "xs"])


def inactive_np(x, w, n):
    a = n
    for t in range(40):
        a = a * 0.9 + np.mod(n, n * n + 2.0)
    return (np.tanh(x @ w) * a).sum()


def loop_grad_inactive(rng, m):
    inputs = {"x": normal(rng, 6), "w": normal(rng, 6, 6) * np.float32(0.5), "n": normal(rng, 6)}
    return with_grads(inactive_np, inputs, ["x", "w"])


LOOP_GRAD = prog("loop_grad.tdsl")
case("loop_grad rnn", LOOP_GRAD, "g_rnn", loop_grad_rnn(40), scaled=True, interp=[None, (1, 1), (2, 4), (3, 2)])
case("loop_grad rnn unrolled", LOOP_GRAD, "g_rnn", loop_grad_rnn(6), consts="T=6", scaled=True, interp=[None],
     codegen=[0, 3])
case("loop_grad rnn_inputs", LOOP_GRAD, "g_rnn_inputs", loop_grad_rnn_inputs, scaled=True, interp=[None, (2, 4)])
case("loop_grad norm", LOOP_GRAD, "g_norm", loop_grad_norm, scaled=True, interp=[None, (2, 4), (3, 2)])
case("loop_grad nested", LOOP_GRAD, "g_nested", loop_grad_nested, scaled=True, interp=[None, (2, 2)])
case("loop_grad called", LOOP_GRAD, "g_called", loop_grad_called, scaled=True, interp=[None, (2, 4)])
case("loop_grad stacked", LOOP_GRAD, "g_stacked", loop_grad_stacked, scaled=True, interp=[None, (2, 4), (3, 2)])
case("loop_grad scan", LOOP_GRAD, "scan", loop_grad_scan, scaled=True, interp=[None, (2, 4), (3, 2)])
case("loop_grad g_scan", LOOP_GRAD, "g_scan", loop_grad_g_scan, scaled=True, interp=[None, (2, 4), (3, 2)])
case("loop_grad inactive", LOOP_GRAD, "g_inactive", loop_grad_inactive, scaled=True, interp=[None, (2, 2)])


# ---- the samples, at small sizes; an spmd fn and its twin share a case ----
# Sizes: an fn's dims may split unevenly (on 3x2, 8 rows over X=3 do); an
# spmd fn's must divide, so they are rounded up to fit the mesh.

def sample(name):
    return os.path.join(SAMPLES, name)


def collective_matmul(rng, m):
    b, dd, f = up(8, m["X"]), up(16, m["Y"]), up(8, m["Y"])
    lhs, rhs = normal(rng, b, dd), normal(rng, dd, f)
    return {"lhs": lhs, "rhs": rhs}, [(d(lhs) @ d(rhs), "f32")]


def mlp(rng, m):
    x, w_in, w_out = normal(rng, 8, 16), normal(rng, 16, 32), normal(rng, 32, 16)
    return {"x": x, "w_in": w_in, "w_out": w_out}, [(gelu(d(x) @ d(w_in)) @ d(w_out), "f32")]


def two_matmul(rng, m):
    x, w1, w2 = normal(rng, 8, 16), normal(rng, 16, 32), normal(rng, 32, 16)
    return {"x": x, "w1": w1, "w2": w2}, [(np.maximum(d(x) @ d(w1), 0) @ d(w2), "f32")]


def attention(rng, m):
    x, wq, wk, wv, wo = normal(rng, 2, 8, 16), normal(rng, 16, 4, 4), normal(rng, 16, 4, 4), normal(rng, 16, 4, 4), \
        normal(rng, 4, 4, 16)
    q, k, v = (np.einsum("bsd,dhk->bshk", d(x), d(w)) for w in (wq, wk, wv))
    logits = np.einsum("bshk,bthk->bhst", q, k) * 0.125
    e = np.exp(logits - logits.max(3, keepdims=True))
    o = np.einsum("bhst,bthk->bshk", e / e.sum(3, keepdims=True), v)
    return {"x": x, "wq": wq, "wk": wk, "wv": wv, "wo": wo}, [(np.einsum("bshk,hke->bse", o, d(wo)), "f32")]


# ---- attention folded into one kernel (tests/interp/progs/attention.tdsl) ----
# 150 queries and 131 keys: two query tiles of 128 and two key tiles of 128,
# each with a tail; weights scaled so that the scores spread over a few units.

def folded_attention(mask_of, scale, cross=False, narrow=False):
    """narrow: bf16 inputs, q, k and v rounded to bf16 (the reference keeps
    the probabilities exact: the unfused program rounds them, the kernel
    does not, both within bf16's tolerance)."""
    r = (lambda a: d(quantize(a, "bf16"))) if narrow else d
    def make(rng, m):
        x = r(normal(rng, 2, 150, 24))
        y = r(normal(rng, 2, 131, 24)) if cross else x
        wq, wk = r(normal(rng, 24, 4, 12) * 0.3), r(normal(rng, 24, 4, 12) * 0.3)
        wv = r(normal(rng, 24, 4, 20))
        q = r(np.einsum("bsd,dhk->bshk", x, wq))
        k, v = r(np.einsum("btd,dhk->bthk", y, wk)), r(np.einsum("btd,dhc->bthc", y, wv))
        mask = mask_of(rng, q.shape[1], k.shape[1])
        logits = np.einsum("bshk,bthk->bhst", q, k) * scale + d(mask)
        e = np.exp(logits - logits.max(3, keepdims=True))
        o = np.einsum("bhst,bthc->bshc", e / e.sum(3, keepdims=True), v)
        store = (lambda a: quantize(a, "bf16")) if narrow else (lambda a: a.astype(np.float32))
        inputs = {"x": store(x), "wq": store(wq), "wk": store(wk), "wv": store(wv)}
        if cross:
            inputs.update(y=store(y), mask=mask)
        return inputs, [(o, "bf16" if narrow else "f32")]
    return make


def padding_mask(rng, s, t):
    return np.where(rng.uniform(size=(s, t)) < 0.2, -1e4, rng.uniform(-1, 1, (s, t))).astype(np.float32)


def later_mask(fill):
    return lambda rng, s, t: np.where(np.arange(t)[None, :] > np.arange(s)[:, None], fill, 0.0).astype(np.float32)


def attention_np(x, y, wq, wk, wv, mask, scale, r):
    """The loss sum(attention(...) * r) and its gradients with respect to
    x, y, wq, wk, wv and the mask, by the textbook formulas in f64 (checked
    against central differences by tests/interp/check_attention_np.py)."""
    q, k, v = np.einsum("bsd,dhk->bshk", x, wq), np.einsum("btd,dhk->bthk", y, wk), np.einsum("btd,dhc->bthc", y, wv)
    logits = np.einsum("bshk,bthk->bhst", q, k) * scale + mask
    e = np.exp(logits - logits.max(3, keepdims=True))
    p = e / e.sum(3, keepdims=True)
    o = np.einsum("bhst,bthc->bshc", p, v)
    dv = np.einsum("bhst,bshc->bthc", p, r)
    dp = np.einsum("bshc,bthc->bhst", r, v)
    ds = p * (dp - (p * dp).sum(3, keepdims=True))
    dq, dk = np.einsum("bhst,bthk->bshk", ds, k) * scale, np.einsum("bhst,bshk->bthk", ds, q) * scale
    dx = np.einsum("bshk,dhk->bsd", dq, wq)
    dy = np.einsum("bthk,dhk->btd", dk, wk) + np.einsum("bthc,dhc->btd", dv, wv)
    return ((o * r).sum(), {"x": dx, "y": dy, "wq": np.einsum("bsd,bshk->dhk", x, dq),
                            "wk": np.einsum("btd,bthk->dhk", y, dk), "wv": np.einsum("btd,bthc->dhc", y, dv),
                            "mask": ds.sum((0, 1))})


def attention_grad(cross):
    def make(rng, m):
        x = normal(rng, 2, 150, 24)
        y = normal(rng, 2, 131, 24) if cross else x
        wq, wk, wv = normal(rng, 24, 4, 12) * 0.3, normal(rng, 24, 4, 12) * 0.3, normal(rng, 24, 4, 20)
        r = normal(rng, 2, 150, 4, 20)
        mask = padding_mask(rng, 150, 131) if cross else later_mask(-1e9)(rng, 150, 150)
        scale = 1 / 3.5 if cross else 0.3
        l, g = attention_np(d(x), d(y), d(wq), d(wk), d(wv), d(mask), scale, d(r))
        # The loss sums 24000 terms of either sign to about 0.01: f32 keeps
        # it to a few 1e-4 (bf16's tolerance); the gradients are f32's.
        if cross:
            return ({"x": x, "y": y, "wq": wq, "wk": wk, "wv": wv, "mask": mask, "r": r},
                    [(l, "bf16"), (g["y"], "f32"), (g["wq"], "f32"), (g["wk"], "f32")])
        return ({"x": x, "wq": wq, "wk": wk, "wv": wv, "r": r},
                [(l, "bf16"), (g["x"] + g["y"], "f32"), (g["wq"], "f32"), (g["wk"], "f32"), (g["wv"], "f32")])
    return make


def with_probs(rng, m):
    x, wq, wk, wv = normal(rng, 2, 150, 24), normal(rng, 24, 4, 12) * 0.3, normal(rng, 24, 4, 12) * 0.3, \
        normal(rng, 24, 4, 20)
    q, k, v = (np.einsum("bsd,dhk->bshk", d(x), d(w)) for w in (wq, wk, wv))
    logits = np.einsum("bshk,bthk->bhst", q, k) * 0.3
    e = np.exp(logits - logits.max(3, keepdims=True))
    p = e / e.sum(3, keepdims=True)
    return {"x": x, "wq": wq, "wk": wk, "wv": wv}, [(np.einsum("bhst,bthc->bshc", p, v), "f32"), (p, "f32")]


case("attention.with_probs", prog("attention.tdsl"), "with_probs", with_probs, interp=[None, (2, 2)],
     codegen=VARIANT_MESHES, runs=1, scaled=True)


def side_by_side(rng, m):
    x, wq, wk, wv = normal(rng, 2, 150, 24), normal(rng, 24, 4, 12) * 0.3, normal(rng, 24, 4, 12) * 0.3, \
        normal(rng, 24, 4, 20)
    q, k, v = (np.einsum("bsd,dhk->bshk", d(x), d(w)) for w in (wq, wk, wv))
    outs = []
    for a, b in ((q, k), (k, q)):
        logits = np.einsum("bshk,bthk->bhst", a, b) * 0.3
        e = np.exp(logits - logits.max(3, keepdims=True))
        outs.append(np.einsum("bhst,bthc->bhsc", e / e.sum(3, keepdims=True), v))
    return {"x": x, "wq": wq, "wk": wk, "wv": wv}, [(np.concatenate(outs, 3), "f32")]


case("written_in_place.side_by_side", prog("written_in_place.tdsl"), "side_by_side", side_by_side, interp=[None, (2, 2)],
     codegen=VARIANT_MESHES, runs=1, scaled=True)

for name, cross in [("g_causal", False), ("g_cross", True)]:
    case("attention." + name, prog("attention.tdsl"), name, attention_grad(cross), interp=[None, (2, 2)],
         codegen=VARIANT_MESHES, runs=1, scaled=True)

for name, make in [("cross", folded_attention(padding_mask, 1 / 3.5, cross=True)),
                   ("causal", folded_attention(later_mask(-1e9), 0.3)),
                   ("causal_seq", folded_attention(later_mask(-np.inf), 1.0)),
                   ("weak", folded_attention(later_mask(-1.0), 0.3)),
                   ("causal_bf16", folded_attention(later_mask(-1e9), 0.3, narrow=True)),
                   ("cross_bf16", folded_attention(padding_mask, 1 / 3.5, cross=True, narrow=True))]:
    # One device (no partitioning) for the GPT's form; the 8-device and uneven meshes for all.
    case("attention." + name, prog("attention.tdsl"), name, make, interp=[None, (2, 2)],
         codegen=[0, 3, 4] if name == "causal" else VARIANT_MESHES, runs=1,
         scaled=True)   # sharp rows (causal_seq is unscaled): f32 score errors grow through exp


def avg_sizes(m):
    return up(16, m["X"]), up(32, m["Y"])


def shard_average(rng, m):
    (s, dd), nx, ny = avg_sizes(m), m["X"], m["Y"]
    a = normal(rng, s, dd)
    return {"a": a}, [(d(a).reshape(nx, s // nx, ny, dd // ny).mean((1, 3)), "f32")]


def roll_sizes(m):
    return up(24, m["X"]), up(16, m["Y"])


def roll_within_shards(rng, m):
    (s, dd), nx = roll_sizes(m), m["X"]
    x = normal(rng, s, dd)
    blocks = x.reshape(nx, s // nx, dd)
    return {"x": x}, [((np.roll(blocks, 3, 1) - blocks).reshape(s, dd), "f32")]


def slice_and_average(rng, m):
    xi = rng.integers(-1000, 1000, 512).astype(np.int32)
    return {"x": xi}, [(xi.reshape(m["X"] * m["Y"], -1)[:, :4].astype(np.float64).mean(0), "f32")]


def matmul_square(rng, m):
    # bf16[8, 2048] x bf16[2048, 8192], the sample's sizes:
    # square rounds to bf16, the dot accumulates in f32 and rounds to bf16.
    x, w = bf16(rng.standard_normal((8, 2048))), bf16(rng.standard_normal((2048, 8192)))
    return {"In": x, "W": w}, [((bf16(d(x) ** 2).astype(np.float64) @ d(w)).astype(np.float32), "bf16")]


case("collective_matmul", sample("collective_matmul.tdsl"), ["collective_matmul", "matmul"], collective_matmul,
     consts=lambda m: "B=%d,D=%d,F=%d" % (up(8, m["X"]), up(16, m["Y"]), up(8, m["Y"])),
     interp=[(2, 4), (2, 2), (1, 1)])
case("sample mlp", sample("mlp.tdsl"), "mlp", mlp, consts="B=8,D=16,F=32")
# The sharding search's plan (--auto: every dim of mlp's signature searched,
# docs/autoshard.md; x over (X, Y) on the built-in cpu target) must compute
# what the written one does: the partitioned program in the interpreter and
# the generated C.
case("sample mlp --auto", sample("mlp.tdsl"), "mlp", mlp, consts="B=8,D=16,F=32", flags=["--auto", "--fn", "mlp"],
     interp=[(2, 2), (2, 4)], partitioned=True, codegen=[2, 3], runs=1)

# The worked problems of issue 5: collective matmuls of every flavour, each
# with its auto-partitioned twin.  Sizes fit the mesh: D and F split over Y
# into blocks (halves of blocks for the bidirectional ones), F into TILES.
def worked_sizes(m, halves=1, row_tiles=1):
    """B, D, F for the worked problems: D split over Y (in halves), F in 4
    column tiles, B's block on X in row_tiles tiles."""
    y = m["Y"] * halves
    return up(8, m["X"] * row_tiles), up(16, y), up(16, lcm(y, 4))


def worked_consts(m, halves=1, row_tiles=1):
    return "B=%d,D=%d,F=%d" % worked_sizes(m, halves, row_tiles)


def matmul_of(shapes):
    def make(rng, m):
        b, dd, f = shapes(m)
        lhs, rhs = normal(rng, b, dd), normal(rng, dd, f)
        return {"lhs": lhs, "rhs": rhs}, [(d(lhs) @ d(rhs), "f32")]
    return make


def collective_mlp(rng, m):
    b, dd, f = worked_sizes(m)
    x, w_in, w_out = normal(rng, b, dd), normal(rng, dd, f), normal(rng, f, dd)
    return {"x": x, "w_in": w_in, "w_out": w_out}, [((d(x) @ d(w_in)) @ d(w_out), "f32")]


for name, fns, halves, tiles in [("allreduce_matmul", ["allreduce_matmul", "allreduce_matmul_twin"], 1, 4),
                                 ("allreduce_matmul", ["allreduce_matmul_rows", "allreduce_matmul_twin"], 1, 4),
                                 ("reduce_scatter_matmul", ["reduce_scatter_matmul", "reduce_scatter_matmul_twin"], 1, 1),
                                 ("bidirectional_matmul", ["collective_matmul_bidir", "matmul_ag"], 2, 1),
                                 ("bidirectional_matmul", ["reduce_scatter_matmul_bidir", "matmul_rs"], 2, 1)]:
    case("%s %s" % (name, fns[0]), sample(name + ".tdsl"), fns,
         matmul_of(lambda m, h=halves, t=tiles: worked_sizes(m, h, t)),
         consts=lambda m, h=halves, t=tiles: worked_consts(m, h, t), scaled=True, interp=[(2, 4), (1, 2)])
# Column tiles assembled in place in f64 and i32 (tests/interp/progs/column_tiles.tdsl).
def column_tiles(dt):
    def make(rng, m):
        b, dd, f = worked_sizes(m)
        lhs, rhs = (rng.integers(-9, 10, (b, dd)).astype(np.int32), rng.integers(-9, 10, (dd, f)).astype(np.int32)) \
            if dt == "i32" else (rng.standard_normal((b, dd)), rng.standard_normal((dd, f)))
        return {"lhs": lhs, "rhs": rhs}, [(d(lhs) @ d(rhs), dt)]
    return make


for _dt in ("f64", "i32"):
    case("column tiles " + _dt, prog("column_tiles.tdsl"), "tiles_" + _dt, column_tiles(_dt), consts=worked_consts,
         scaled=True, interp=[(2, 4), (1, 2)])
case("collective_mlp", sample("collective_mlp.tdsl"), ["collective_mlp", "mlp_block"], collective_mlp,
     consts=worked_consts, scaled=True, interp=[(2, 4), (1, 2)])
case("sample two_matmul", sample("two_matmul_constraint.tdsl"), "two_matmul", two_matmul, consts="B=8,D=16,F=32")

# Two stages on two submeshes, four microbatches: each stage is a residual
# MLP block (gelu in the first, relu in the second).
def pipeline(rng, m):
    x = normal(rng, 4, 8, 16)
    w = {k: normal(rng, *s) for k, s in (("w1_in", (16, 32)), ("w1_out", (32, 16)), ("w2_in", (16, 32)),
                                          ("w2_out", (32, 16)))}
    h = d(x) + gelu(d(x) @ d(w["w1_in"])) @ d(w["w1_out"])
    y = h + np.maximum(h @ d(w["w2_in"]), 0) @ d(w["w2_out"])
    return dict(x=x, **w), [(y, "f32")]


case("sample pipeline", sample("pipeline.tdsl"), "pipeline", pipeline, consts="M=4,B=8,D=16,F=32", scaled=True)
def sum_of_sin(rng, m):
    x = normal(rng, 4, 8)
    return {"x": x}, [(np.sin(d(x)).sum(), "f32")]


case("sample sum_of_sin", sample("sum_of_sin.tdsl"), "sum_of_sin", sum_of_sin)
case("sample attention", sample("attention.tdsl"), "attention", attention, consts="B=2,S=8,D=16,H=4,K=4",
     scaled=True)   # unscaled normal weights: outputs near 0 are sums of terms of size 30
case("shard_average", sample("shard_average.tdsl"), ["shard_average", "shard_average_spmd"], shard_average,
     consts=lambda m: "S=%d,D=%d" % avg_sizes(m), interp=[None, (2, 2), (4, 2)])
case("roll_within_shards", sample("roll_within_shards.tdsl"), ["roll_within_shards", "roll_within_shards_spmd"],
     roll_within_shards, consts=lambda m: "S=%d,D=%d" % roll_sizes(m), exact=True, interp=[None, (2, 2), (4, 2)])
case("slice_and_average", sample("slice_and_average.tdsl"), "slice_and_average", slice_and_average,
     interp=[None, (2, 2), (4, 2)])
# Partial sums are rounded to bf16 before the all-reduce: scaled tolerance.
# Too slow for the interpreter (134M multiply-adds one at a time).
case("sample matmul_square", sample("matmul_square.tdsl"), "matmul_square", matmul_square, scaled=True, interp=[],
     runs=1)


# ---- GPT-2 (samples/gpt_block.tdsl, samples/gpt.tdsl) ----
# Small sizes; weights scaled so that activations stay of order 1.

GPT = dict(B=4, S=8, D=16, H=4, K=4, F=32, V=24, L=3)


def gpt_consts(*names):
    return ",".join("%s=%d" % (n, GPT[n]) for n in names)


def layernorm_np(x, gain, shift):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5) * gain + shift


def causal_attention_np(x, wq, wk, wv, wo, bo):
    q, k, v = (np.einsum("bsd,dhk->bshk", x, w) for w in (wq, wk, wv))
    logits = np.einsum("bshk,bthk->bhst", q, k) * 0.125
    n = x.shape[1]
    logits = logits + np.where(np.arange(n)[None, :] > np.arange(n)[:, None], -1e9, 0.0)
    e = np.exp(logits - logits.max(3, keepdims=True))
    o = np.einsum("bhst,bthk->bshk", e / e.sum(3, keepdims=True), v)
    return np.einsum("bshk,hke->bse", o, wo) + bo


def gpt_block_np(x, p):
    x1 = x + causal_attention_np(layernorm_np(x, p["ln1_g"], p["ln1_b"]), p["wq"], p["wk"], p["wv"], p["wo"], p["bo"])
    h = layernorm_np(x1, p["ln2_g"], p["ln2_b"])
    return x1 + gelu(h @ p["w_in"] + p["b_in"]) @ p["w_out"] + p["b_out"]


def gpt_weights(rng, *lead):
    """One block's weights (stacked over `lead`), as float32 inputs."""
    g = GPT
    shapes = dict(ln1_g=(g["D"],), ln1_b=(g["D"],), wq=(g["D"], g["H"], g["K"]), wk=(g["D"], g["H"], g["K"]),
                  wv=(g["D"], g["H"], g["K"]), wo=(g["H"], g["K"], g["D"]), bo=(g["D"],), ln2_g=(g["D"],),
                  ln2_b=(g["D"],), w_in=(g["D"], g["F"]), b_in=(g["F"],), w_out=(g["F"], g["D"]), b_out=(g["D"],))
    w = {k: (normal(rng, *(lead + s)) * (0.3 if len(s) > 1 else 0.5)).astype(np.float32) for k, s in shapes.items()}
    for k in ("ln1_g", "ln2_g"):
        w[k] = (w[k] + 1).astype(np.float32)
    return w


def gpt_block(rng, m):
    x, w = normal(rng, GPT["B"], GPT["S"], GPT["D"]), gpt_weights(rng)
    return dict(x=x, **w), [(gpt_block_np(d(x), {k: d(v) for k, v in w.items()}), "f32")]


def gpt(rng, m):
    g = GPT
    tokens = rng.integers(0, g["V"], (g["B"], g["S"])).astype(np.int32)
    labels = np.roll(tokens, -1, 1).astype(np.int32)
    wte, wpe = normal(rng, g["V"], g["D"]), normal(rng, g["S"], g["D"])
    w = gpt_weights(rng, g["L"])
    lnf_g, lnf_b, w_vocab = normal(rng, g["D"]) * 0.5 + 1, normal(rng, g["D"]) * 0.5, normal(rng, g["D"], g["V"]) * 0.3
    x = d(wte)[tokens] + d(wpe)[None]
    for layer in range(g["L"]):
        x = gpt_block_np(x, {k: d(v)[layer] for k, v in w.items()})
    logits = layernorm_np(x, d(lnf_g), d(lnf_b)) @ d(w_vocab)
    peak = logits.max(-1)
    lse = np.log(np.exp(logits - peak[..., None]).sum(-1)) + peak
    picked = np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    inputs = dict(tokens=tokens, labels=labels, **gpt_ref.as_record(dict(
        wte=wte, wpe=wpe, lnf_g=lnf_g.astype(np.float32), lnf_b=lnf_b.astype(np.float32),
        w_vocab=w_vocab.astype(np.float32), **w)))                  # gpt's record p
    return inputs, [((lse - picked).mean(), "f32")]


# samples/moe.tdsl, moe_topk.tdsl, embedding.tdsl at small sizes (routed()
# and top_k() are the mixture-of-experts and top-k oracles above).
def sample_moe(rng, m):
    w, a, route = normal(rng, 8, 16, 12), normal(rng, 10, 16), routes(rng, 8, 10)
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route), "f32")]


def sample_moe_topk(rng, m):
    w, router, a = normal(rng, 8, 16, 12), normal(rng, 16, 8), normal(rng, 10, 16)
    top, route = top_k(d(a) @ d(router), 2)
    gate = np.exp(top - top.max(-1, keepdims=True))
    gate /= gate.sum(-1, keepdims=True)
    out = np.einsum("sjf,sj->sf", routed(w, a, route), gate)
    return {"w": w, "router": router, "a": a}, [(out, "f32")]


def sample_embed(rng, m):
    wte, tokens = normal(rng, 64, 16), rng.integers(0, 64, (4, 8)).astype(np.int32)
    return {"wte": wte, "tokens": tokens}, [(d(wte)[tokens], "f32")]


def sample_xent(rng, m):
    logits, labels = normal(rng, 4, 8, 64), rng.integers(0, 64, (4, 8)).astype(np.int32)
    x = d(logits)
    peak = x.max(-1)
    lse = np.log(np.exp(x - peak[..., None]).sum(-1)) + peak
    picked = np.take_along_axis(x, labels[..., None], -1)[..., 0]
    return {"logits": logits, "labels": labels}, [((lse - picked).mean(), "f32")]


def capacity_slots(dest, c):
    """Each token's place among the tokens before it with the same dest, and
    whether it is below the capacity c."""
    slot = np.array([np.sum(dest[:i] == dest[i]) for i in range(len(dest))])
    return slot, slot < c


def sample_moe_local(rng, m):
    e, s, dm, f, c = 4, 12, 8, 6, 2
    w, a, route = normal(rng, e, dm, f), normal(rng, s, dm), rng.integers(0, e, s).astype(np.int32)
    _, kept = capacity_slots(route, c)
    out = routed(w, a, route) * kept[:, None]
    return {"w": w, "a": a, "route": route}, [(out, "f32"), (np.int32(np.sum(~kept)), "i32")]


def moe_spmd_consts(m):
    x, y = m.get("X", 1), m.get("Y", 1)
    return "E=%d,S=%d,D=%d,F=%d,C=3" % (2 * x, 6 * x, 4 * y, 3 * y)


def moe_spmd_inputs(rng, m):
    x, y = m.get("X", 1), m.get("Y", 1)
    w, a = normal(rng, 2 * x, 4 * y, 3 * y), normal(rng, 6 * x, 4 * y)
    return w, a, rng.integers(0, 2 * x, 6 * x).astype(np.int32)


def sample_moe_gather(rng, m):
    w, a, route = moe_spmd_inputs(rng, m)
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route), "f32")]


def sample_moe_dispatch(rng, m):
    """Each device's 6 tokens go to their experts' devices, at most C = 3 to
    each: per source block, the first 3 tokens for each destination."""
    w, a, route = moe_spmd_inputs(rng, m)
    kept = np.concatenate([capacity_slots(block // 2, 3)[1] for block in np.split(route, m.get("X", 1))])
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route) * kept[:, None], "f32"),
                                              (np.int32(np.sum(~kept)), "i32")]


case("sample moe_local", sample("moe_local.tdsl"), "moe_local", sample_moe_local, consts="E=4,S=12,D=8,F=6,C=2",
     scaled=True)
case("sample moe_spmd gather", sample("moe_spmd.tdsl"), ["moe_gather", "moe"], sample_moe_gather,
     consts=moe_spmd_consts, scaled=True)
case("sample moe_spmd dispatch", sample("moe_spmd.tdsl"), "moe_dispatch", sample_moe_dispatch,
     consts=moe_spmd_consts, scaled=True)
case("sample moe", sample("moe.tdsl"), "moe", sample_moe, consts="E=8,S=10,D=16,F=12", scaled=True)
case("sample moe_topk", sample("moe_topk.tdsl"), "moe_topk", sample_moe_topk, consts="E=8,S=10,D=16,F=12,K=2",
     scaled=True)
case("sample embedding embed", sample("embedding.tdsl"), "embed", sample_embed, consts="B=4,S=8,V=64,D=16",
     exact=True)
case("sample embedding xent", sample("embedding.tdsl"), "xent", sample_xent, consts="B=4,S=8,V=64,D=16",
     scaled=True)
# The same under --device-memory budgets that turn the expert and vocabulary
# gathers from all-gathers (fewer bytes) into masked gathers (lower peaks):
# the moe at these sizes on the 8-device mesh (a masked gather's peak of
# 2176 bytes against 2400), the embedding on the meshes that split the
# vocabulary, 2x2, 2x4 and 3x2 (docs/partitioning.md, "Gathers";
# tests/lit/samples/moe.device_memory.test).
def sample_moe_budget(rng, m):
    w, a, route = normal(rng, 4, 16, 16), normal(rng, 16, 16), routes(rng, 4, 16)
    return {"w": w, "a": a, "route": route}, [(routed(w, a, route), "f32")]


def sample_embed_budget(rng, m):
    wte, tokens = normal(rng, 24, 16), rng.integers(0, 24, (4, 8)).astype(np.int32)
    return {"wte": wte, "tokens": tokens}, [(d(wte)[tokens], "f32")]


case("sample moe (device memory)", sample("moe.tdsl"), "moe", sample_moe_budget, consts="E=4,S=16,D=16,F=16",
     flags=["--device-memory", "2300"], scaled=True, interp=[])
case("sample embedding embed (device memory)", sample("embedding.tdsl"), "embed", sample_embed_budget,
     consts="B=4,S=8,V=24,D=16", flags=["--device-memory", "2980"], exact=True, interp=[])
case("sample gpt_block", sample("gpt_block.tdsl"), ["gpt_block", "block_inlined"], gpt_block,
     consts=gpt_consts("B", "S", "D", "H", "K", "F"), scaled=True, interp=[None, (1, 2)])
case("sample gpt", sample("gpt.tdsl"), "gpt", gpt, consts=gpt_consts(*GPT), scaled=True, interp=[None])



# gpt.tdsl's init (GPT-2's initialization, drawn in the program) and
# gpt_dropout (the loss with dropout masks from fold_in'd keys): the draws
# by the NumPy Threefry above (rng_normal, rng_uniform), on a split mesh too.
def gpt_init(rng, m):
    g = GPT
    seed = np.int32(rng.integers(0, 1000))
    ks = rng_split(np.array([0, seed], np.uint32), 9)
    r = 0.02 / np.sqrt(2.0 * g["L"])
    L, D, H, K, F = g["L"], g["D"], g["H"], g["K"], g["F"]
    n = lambda i, shape, scale: (rng_normal(ks[i], shape) * scale, "f32")
    ones, zero = (np.ones((L, D)), "f32"), (np.zeros((L, D)), "f32")
    return {"seed": seed}, [n(0, (g["V"], D), 0.02), n(1, (g["S"], D), 0.01), ones, zero, n(2, (L, D, H, K), 0.02),
                            n(3, (L, D, H, K), 0.02), n(4, (L, D, H, K), 0.02), n(5, (L, H, K, D), r), zero, ones,
                            zero, n(6, (L, D, F), 0.02), (np.zeros((L, F)), "f32"), n(7, (L, F, D), r), zero,
                            (np.ones(D), "f32"), (np.zeros(D), "f32"), n(8, (D, g["V"]), 0.02)]


def gpt_dropout(rng, m):
    g = GPT
    inputs, _ = gpt(rng, m)
    k = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
    w = {name.split(".")[-1]: d(a) for name, a in inputs.items() if name.startswith("p.")}     # gpt's record p

    def drop(x, key):
        keep = rng_uniform(key, x.shape, "f32").astype(np.float32) < np.float32(0.9)
        return np.where(keep, x / 0.9, 0.0)

    x = drop(w["wte"][inputs["tokens"]] + w["wpe"][None], rng_fold_in(k, g["L"]))
    for layer in range(g["L"]):
        p = {name: a[layer] for name, a in w.items() if a.ndim > 1 and name not in ("wte", "wpe", "w_vocab")}
        p.update({name: w[name][layer] for name in ("ln1_g", "ln1_b", "bo", "ln2_g", "ln2_b", "b_out")})
        ks = rng_split(rng_fold_in(k, layer), 2)
        x1 = x + drop(causal_attention_np(layernorm_np(x, p["ln1_g"], p["ln1_b"]), p["wq"], p["wk"], p["wv"],
                                          p["wo"], p["bo"]), ks[0])
        h = layernorm_np(x1, p["ln2_g"], p["ln2_b"])
        x = x1 + drop(gelu(h @ p["w_in"] + p["b_in"]) @ p["w_out"] + p["b_out"], ks[1])
    logits = layernorm_np(x, w["lnf_g"], w["lnf_b"]) @ w["w_vocab"]
    peak = logits.max(-1)
    lse = np.log(np.exp(logits - peak[..., None]).sum(-1)) + peak
    picked = np.take_along_axis(logits, inputs["labels"][..., None], -1)[..., 0]
    inputs["k"] = k
    return inputs, [((lse - picked).mean(), "f32")]


case("sample gpt init", sample("gpt.tdsl"), "init", gpt_init, consts=gpt_consts(*GPT), scaled=True,
     interp=[None, (2, 2)], codegen=[3], runs=1)
case("sample gpt dropout", sample("gpt.tdsl"), "gpt_dropout", gpt_dropout, consts=gpt_consts(*GPT), scaled=True,
     interp=[None, (2, 2)], codegen=[3], runs=1)

# train_step: the loss, every weight's gradient by the backward pass written
# by hand in gpt_ref.py (checked there against central differences), and SGD
# with momentum.  Uneven splits on the meshes: F=30 and V=18 over Y=4, B=4
# over X=3 (an empty block).  Velocities smaller than the gradients, so that
# each new velocity is mostly its gradient.
GPT_TRAIN = dict(B=4, S=8, D=16, H=4, K=8, F=30, V=18, L=2)


def gpt_train_step(rng, m, cfg=GPT_TRAIN):
    w = gpt_ref.init_weights(rng, cfg, scale=1.0, jitter=0.2)          # loss about log V + 0.4
    v = {k: (normal(rng, *a.shape) * 0.01).astype(np.float32) for k, a in w.items()}
    tokens = rng.integers(0, cfg["V"], (cfg["B"], cfg["S"])).astype(np.int32)
    labels = rng.integers(0, cfg["V"], (cfg["B"], cfg["S"])).astype(np.int32)
    loss, nw, nv = gpt_ref.train_step(tokens, labels, {k: d(a) for k, a in w.items()},
                                      {k: d(a) for k, a in v.items()})
    inputs = dict(tokens=tokens, labels=labels, **gpt_ref.as_record(w, "p"))
    inputs.update(gpt_ref.as_record(v, "v"))
    return inputs, [(loss, "f32")] + [(nw[k], "f32") for k in gpt_ref.NAMES] + [(nv[k], "f32") for k in gpt_ref.NAMES]


case("sample gpt train_step", sample("gpt.tdsl"), "train_step", gpt_train_step,
     consts=",".join("%s=%d" % kv for kv in GPT_TRAIN.items()), scaled=True, interp=[None, (3, 2)])
# The same step under a budget no program meets: every call that keeps
# residuals is checkpointed (the blocks, and inside them attention, mlp and
# the layernorms: docs/grad.md, "Rematerialization"); the same results.
case("sample gpt train_step (remat)", sample("gpt.tdsl"), "train_step", gpt_train_step,
     consts=",".join("%s=%d" % kv for kv in GPT_TRAIN.items()), flags=["--device-memory", "1"], scaled=True,
     interp=[None, (3, 2)])


# The same step with L = 36 layers: the layer loop (one statement, a call)
# stays a loop (36 x 1 > 32 statements, docs/language.md, "Loops"), so its
# gradient is a forward and a backward loop, each layer's weights' gradients
# written into their slots (docs/grad.md, "Loops").
GPT_TRAIN_LOOP = dict(GPT_TRAIN, L=36)


def gpt_train_step_loop(rng, m):
    # A parameter, not the global rebound for the call: check_numpy makes
    # inputs on two threads, and the other case's would get L = 36.
    return gpt_train_step(rng, m, GPT_TRAIN_LOOP)


case("sample gpt train_step loop", sample("gpt.tdsl"), "train_step", gpt_train_step_loop,
     consts=",".join("%s=%d" % kv for kv in GPT_TRAIN_LOOP.items()), scaled=True, interp=[None, (3, 2)],
     codegen=[0, 3])


# ---- the partitioning golden programs (tests/lit/partitioned/*.tdsl) ----
# Written from each function's source; the partitioner's choices (which
# collective, where the padding goes) must not show in the results.

def golden(name):
    return os.path.join(GOLDEN, name)


def same(*shape):
    """An identity (a resharding): the result is the input."""
    def make(rng, m):
        x = normal(rng, *shape)
        return {"x": x}, [(x, "f32")]
    return make


def rowmax(rng, m):
    x = normal(rng, 16, 32)
    return {"x": x}, [(x.max(1), "f32")]


case("collectives.move (all-to-all)", golden("collectives.tdsl"), "move", same(16, 16), exact=True)
case("collectives.gather (all-gather)", golden("collectives.tdsl"), "gather", same(16, 8), exact=True)
case("collectives.split (local slice)", golden("collectives.tdsl"), "split", same(16, 16), exact=True)
case("collectives.rowmax (all-reduce max)", golden("collectives.tdsl"), "rowmax", rowmax, exact=True)


def join(rng, m):
    a, b = normal(rng, 8, 3), normal(rng, 4, 3)
    return {"a": a, "b": b}, [(np.concatenate([a, b], 0), "f32")]


case("concat_split.join", golden("concat_split.tdsl"), "join", join, exact=True)


# The reshard planner (reshard_planner.tdsl): also on 2x2x2, where Z splits.
for _fn, _shape in (("subgroup", (64, 64)), ("swap_order", (16,)), ("merge_right", (4, 15, 4, 15)),
                    ("nofull", (6, 32, 4))):
    case("reshard_planner." + _fn, golden("reshard_planner.tdsl"), _fn, same(*_shape), exact=True,
         interp=[None, (2, 2, 2), (2, 1, 2), (3, 2, 2)], codegen=VARIANT_MESHES)


def partially_sliced(rng, m):
    l, r = normal(rng, 32, 64), normal(rng, 64, 128)
    return {"l": l, "r": r}, [(d(l) @ d(r), "f32")]


case("dot_reshard.partially_sliced (reduce-scatter, then all-reduce)", golden("dot_reshard.tdsl"),
     "partially_sliced", partially_sliced)


def batch_reshard(rng, m):
    l, r = normal(rng, 4, 8, 24, 100), normal(rng, 4, 8, 32, 100)
    return {"l": l, "r": r}, [(np.einsum("abik,abjk->abij", d(l), d(r)), "f32")]


case("dot_reshard.batch_reshard (the rhs's splits, the result resharded)", golden("dot_reshard.tdsl"),
     "batch_reshard", batch_reshard)


def take_along_rows(n):
    """y[b] = logits[b, label[b]], labels clamped into the row."""
    def make(rng, m):
        logits, label = normal(rng, n, 16), rng.integers(-1, 17, n).astype(np.int32)
        return {"logits": logits, "label": label}, [(take(logits, label[:, None], 1)[:, 0], "f32")]
    return make


for _fn, _n in (("take_along", 8), ("labels_replicated", 8), ("uneven", 5), ("gathered_dim_split", 8)):
    case("gather_batch." + _fn, golden("gather_batch.tdsl"), _fn, take_along_rows(_n), exact=True,
         codegen=VARIANT_MESHES)


def lookup_rows(n):
    """h[s] = wte[tokens[s]], tokens clamped into the table."""
    def make(rng, m):
        wte, tokens = normal(rng, 64, 16), rng.integers(-2, 66, n).astype(np.int32)
        return {"wte": wte, "tokens": tokens}, [(d(wte)[np.clip(tokens, 0, 63)], "f32")]
    return make


# lookup all-gathers the table by bytes, and under 8.5K per device gathers
# masked on 2 devices; tie (as many bytes) takes the masked gather's lower
# peak on every mesh.
case("gather_memory.lookup", golden("gather_memory.tdsl"), "lookup", lookup_rows(48), exact=True)
case("gather_memory.lookup (device memory)", golden("gather_memory.tdsl"), "lookup", lookup_rows(48), exact=True,
     flags=["--device-memory", "8.5K"], interp=[])
case("gather_memory.tie", golden("gather_memory.tdsl"), "tie", lookup_rows(32), exact=True)


def conflict_add(rng, m):
    big, small = normal(rng, 1024, 64), normal(rng, 1024, 8)
    return {"big": big, "small": small}, [(d(big) + d(small)[:, :1], "f32")]


case("conflict.add", golden("conflict.tdsl"), "add", conflict_add)


# Contractions of up to 256 f32 products, which the partitioner splits into
# partial sums in another order than NumPy's: scaled tolerance.
def dot(xs, ws):
    def make(rng, m):
        x, w = normal(rng, *xs), normal(rng, *ws)
        return {"x": x, "w": w}, [(d(x) @ d(w), "f32")]
    return make


case("dot_cases.local_dot", golden("dot_cases.tdsl"), "local_dot", dot((64, 32), (32, 16)), scaled=True)
case("dot_cases.one_side_reduce", golden("dot_cases.tdsl"), "one_side_reduce", dot((64, 256), (256, 16)), scaled=True)
case("dot_cases.one_side_gather", golden("dot_cases.tdsl"), "one_side_gather", dot((8, 64), (64, 4096)), scaled=True)
case("dot_cases.both_reduce", golden("dot_cases.tdsl"), "both_reduce", dot((64, 256), (256, 16)), scaled=True)
case("dot_cases.both_scatter", golden("dot_cases.tdsl"), "both_scatter", dot((64, 256), (256, 16)), scaled=True)
case("dot_cases.both_free", golden("dot_cases.tdsl"), "both_free", dot((64, 32), (32, 16)), scaled=True)


def split3(rng, m):
    x = normal(rng, 64, 32)
    return {"x": x}, [(x.reshape(2, 32, 32), "f32")]


def merge(rng, m):
    x = normal(rng, 8, 4, 16)
    return {"x": x}, [(x.reshape(32, 16), "f32")]


def rowsum(rng, m):
    x = normal(rng, 64, 32)
    return {"x": x}, [(d(x).sum(1), "f32")]


case("reshape_reduce.split", golden("reshape_reduce.tdsl"), "split", split3, exact=True)
case("reshape_reduce.merge", golden("reshape_reduce.tdsl"), "merge", merge, exact=True)
case("reshape_reduce.rowsum", golden("reshape_reduce.tdsl"), "rowsum", rowsum)


def roll0(shift):
    def make(rng, m):
        x = normal(rng, 32, 8)
        return {"x": x}, [(np.roll(x, shift, 0), "f32")]
    return make


case("roll_halo.within_block", golden("roll_halo.tdsl"), "within_block", roll0(3), exact=True)
case("roll_halo.whole_blocks", golden("roll_halo.tdsl"), "whole_blocks", roll0(16), exact=True)


def diff(rng, m):
    x = normal(rng, 32, 8)
    return {"x": x}, [(x[1:] - x[:-1], "f32")]


case("shifted_slice.diff", golden("shifted_slice.tdsl"), "diff", diff, exact=True)


def narrowed(lo, hi, *shape):
    def make(rng, m):
        x = normal(rng, *shape)
        return {"x": x}, [(x[lo:hi], "f32")]
    return make


case("narrowing_slice.narrow", golden("narrowing_slice.tdsl"), "narrow", narrowed(1, 15, 16, 4), exact=True)
case("narrowing_slice.uneven", golden("narrowing_slice.tdsl"), "uneven", narrowed(6, 15, 16, 3), exact=True)
case("reshard_report.gather", golden("reshard_report.tdsl"), "gather", same(16, 8), exact=True)
case("reshard_report.uneven_sum", golden("reshard_report.tdsl"), "uneven_sum", dot((9, 12), (12, 4)), scaled=True)
case("reshard_report.swap", golden("reshard_report.tdsl"), "swap", same(8, 8), exact=True)
case("uneven_all_to_all.move", golden("uneven_all_to_all.tdsl"), "move", same(7, 31, 16), exact=True)
case("uneven_all_to_all.back", golden("uneven_all_to_all.tdsl"), "back", same(7, 31, 16), exact=True)
case("all_to_all_axes.two_dims", golden("all_to_all_axes.tdsl"), "two_dims", same(16, 16, 16, 16), exact=True)
case("all_to_all_axes.one_dim", golden("all_to_all_axes.tdsl"), "one_dim", same(16, 16), exact=True)
case("all_to_all_axes.in_turn", golden("all_to_all_axes.tdsl"), "in_turn", same(12, 10, 6), exact=True)


# reshard_cache.tdsl, reshard_cache_placed.tdsl: readers that share one
# reshard of a value must still get the value.
def elementwise(f, *shape):
    def make(rng, m):
        x = normal(rng, *shape)
        return {"x": x}, [(f(x), "f32")]
    return make


def two_slices(rng, m):
    x = normal(rng, 16, 8)
    return {"x": x}, [(x[0:9] + x[7:16], "f32")]


def copies(*shape, n=2, reshape=None):
    """The parameter returned n times (the first one reshaped)."""
    def make(rng, m):
        x = normal(rng, *shape)
        first = x.reshape(reshape) if reshape else x
        return {"x": x}, [(first, "f32")] + [(x, "f32")] * (n - 1)
    return make


def placed(rng, m):
    x = normal(rng, 16, 8)
    return {"x": x}, [(x * np.float32(2), "f32"), (x + np.float32(1), "f32"), (x * np.float32(3), "f32"),
                      (x, "f32")]


_rc, _rcp = golden("reshard_cache.tdsl"), golden("reshard_cache_placed.tdsl")
case("reshard_cache.two_slices", _rc, "two_slices", two_slices, exact=True)
case("reshard_cache.double", _rc, "double", elementwise(lambda x: x * np.float32(2), 16, 8))
case("reshard_cache.shift", _rc, "shift", elementwise(lambda x: x + np.float32(1), 16, 8))
case("reshard_cache.two_calls", _rc, "two_calls",
     elementwise(lambda x: x * np.float32(2) + (x + np.float32(1)), 16, 8))
case("reshard_cache.through_whole", _rc, "through_whole", copies(16, 8), exact=True)
case("reshard_cache.taken_back", _rc, "taken_back", copies(4, 6, reshape=(2, 2, 6)), exact=True)
case("reshard_cache_placed.double", _rcp, "double", elementwise(lambda x: x * np.float32(2), 16, 8))
case("reshard_cache_placed.shift", _rcp, "shift", elementwise(lambda x: x + np.float32(1), 16, 8))
case("reshard_cache_placed.triple", _rcp, "triple", elementwise(lambda x: x * np.float32(3), 16, 8))
case("reshard_cache_placed.placed", _rcp, "placed", placed)




def relu_inner(rng, m):
    a = normal(rng, 8, 16)
    return {"a": a}, [(np.maximum(a, 0), "f32")]


def relu_local(rng, m):
    x = normal(rng, 16, 64)
    return {"x": x}, [(np.maximum(x, 0) + x, "f32")]


case("spmd_calls_fn.inner", golden("spmd_calls_fn.tdsl"), "inner", relu_inner, exact=True)
case("spmd_calls_fn.local", golden("spmd_calls_fn.tdsl"), "local", relu_local, exact=True)


def total(rng, m):
    x = normal(rng, 10, 3)
    return {"x": x}, [(d(x).sum(), "f32")]


def peak(rng, m):
    x = -np.abs(normal(rng, 10)) - 1          # all below zero: padding with zeros would show
    return {"x": x}, [(x.max(), "f32")]


case("uneven.total", golden("uneven.tdsl"), "total", total)
case("uneven.peak", golden("uneven.tdsl"), "peak", peak, exact=True)
case("uneven.gather", golden("uneven.tdsl"), "gather", same(10, 3), exact=True)
case("uneven.split", golden("uneven.tdsl"), "split", same(3, 10), exact=True)


# ---- gradients (tests/interp/progs/grad.tdsl) ----
# Each loss written again in NumPy (f64); its gradient by central
# differences, which any wrong adjoint fails by far more than the tolerance.

def fd_grad(loss, inputs, name, h=1e-6):
    """d loss / d inputs[name] by central differences in f64."""
    args = {k: d(v) if v.dtype.kind == "f" else v for k, v in inputs.items()}
    x = args[name]
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = loss(**args)
        x[i] = old - h
        down = loss(**args)
        x[i] = old
        g[i] = (up - down) / (2 * h)
    return g


def with_grads(loss, inputs, names, dt="f32", value=True):
    """inputs and wants for value_and_grad(loss, names) (grad with value=False)."""
    args = {k: d(v) if v.dtype.kind == "f" else v for k, v in inputs.items()}
    wants = [(loss(**args), dt)] if value else []
    return inputs, wants + [(fd_grad(loss, inputs, n), dt) for n in names]


def mlp_np(x, y, w1, w2):
    diff = np.tanh(x @ w1) @ w2 - y
    return (diff * diff).sum() / 6.0


def grad_mlp(rng, m):
    x, y, w1, w2 = normal(rng, 6, 4), normal(rng, 6, 4), normal(rng, 4, 5), normal(rng, 5, 4)
    return with_grads(mlp_np, {"x": x, "y": y, "w1": w1, "w2": w2}, ["w1", "w2"])


def grad_mlp_input(rng, m):
    x, y, w1, w2 = normal(rng, 6, 4), normal(rng, 6, 4), normal(rng, 4, 5), normal(rng, 5, 4)
    return with_grads(mlp_np, {"x": x, "y": y, "w1": w1, "w2": w2}, ["x"], value=False)


def away_from_zero(rng, *shape):
    return (rng.uniform(0.2, 1.5, shape) * rng.choice([-1, 1], shape)).astype(np.float32)


def grad_unary(rng, m):
    def loss(x, p, c):
        u = (np.exp(x) + np.tanh(x) + np.abs(x) + np.sin(x) + np.cos(x) + x * x + np.maximum(x, 0) + gelu(x)
             + 1 / (1 + np.exp(-x)) - x)
        return (c * (u + np.log(p) + np.sqrt(p) + 1 / np.sqrt(p))).sum()
    x, p, c = away_from_zero(rng, 5, 7), rng.uniform(0.3, 2, (5, 7)).astype(np.float32), normal(rng, 5, 7)
    return with_grads(loss, {"x": x, "p": p, "c": c}, ["x", "p"])


def grad_binary(rng, m):
    def loss(a, b, p, c):
        z = a * b + a / b + np.maximum(a, b) - np.minimum(a, b) * 2 + p ** b + p ** 2.5
        return (c * z).sum()
    a = away_from_zero(rng, 4, 6)
    b = (a + away_from_zero(rng, 4, 6)).astype(np.float32)
    b[np.abs(b) < 0.2] = 0.7                   # away from 0 (a / b) and from a (max, min)
    p, c = rng.uniform(0.5, 2, (4, 6)).astype(np.float32), normal(rng, 4, 6)
    return with_grads(loss, {"a": a, "b": b, "p": p, "c": c}, ["a", "b", "p"])


def grad_reduce(rng, m):
    def loss(x, c, e):
        mx, s = x.max(1), x.sum(0)
        r = x - mx[:, None]
        # one Einstein sum over i and j: the terms without j count 5 times, those without i 6 times
        return 5 * (c * mx).sum() + 6 * (e * s * s).sum() + 5 * (x * x).mean(1).sum() + 0.1 * (r * r).sum()
    return with_grads(loss, {"x": normal(rng, 6, 5), "c": normal(rng, 6), "e": normal(rng, 5)}, ["x"])


def grad_ties(rng, m):
    x = normal(rng, 4, 6)
    for i in range(4):                         # every row's max twice: JAX splits its gradient
        j, k = rng.choice(6, 2, replace=False)
        x[i, k] = x[i, j] = x[i].max() + 1
    c = normal(rng, 4)
    hit = d(x) == d(x).max(1, keepdims=True)
    return {"x": x, "c": c}, [((d(c) * d(x).max(1)).sum(), "f32"), (hit * d(c)[:, None] / hit.sum(1, keepdims=True), "f32")]


def grad_shape(rng, m):
    def loss(x, b, c):
        r = (x + b).T.reshape(3, 8)
        return (c * r * r).sum()
    return with_grads(loss, {"x": normal(rng, 4, 6), "b": normal(rng, 6), "c": normal(rng, 3, 8)}, ["x", "b"])


def grad_slices(rng, m):
    def loss(x, c):
        z = np.concatenate([x[1:4], np.roll(x, 2, 0)], 0)
        return (c * z * z).sum()
    return with_grads(loss, {"x": normal(rng, 6, 4), "c": normal(rng, 9, 4)}, ["x"])


def grad_cumsum(rng, m):
    def loss(x, c):
        cs = np.cumsum(x, 1)
        return (c * cs * cs).sum()
    return with_grads(loss, {"x": normal(rng, 4, 6), "c": normal(rng, 4, 6)}, ["x"])


def grad_gather(rng, m):
    def loss(w, route, logits, labels, c):
        e = w[np.clip(route, 0, 7)]
        p = np.take_along_axis(logits, np.clip(labels, 0, 6)[:, :, None], 2)[:, :, 0]
        return (c * e * e).sum() + (p * p).sum()
    route = rng.integers(-1, 9, 6).astype(np.int32)
    labels = rng.integers(0, 7, (3, 4)).astype(np.int32)
    return with_grads(loss, {"w": normal(rng, 8, 5), "route": route, "logits": normal(rng, 3, 4, 7),
                             "labels": labels, "c": normal(rng, 6, 5)}, ["w", "logits"])


def grad_scatter(rng, m):
    def loss(buf, route, slot, x, c):
        out = buf.copy()
        for s in range(6):
            if 0 <= route[s] < 4 and 0 <= slot[s] < 3:
                out[route[s], slot[s]] += x[s]
        return (c * out * out).sum()
    route, slot = rng.integers(-1, 5, 6).astype(np.int32), rng.integers(0, 4, 6).astype(np.int32)
    return with_grads(loss, {"buf": normal(rng, 4, 3, 5), "route": route, "slot": slot, "x": normal(rng, 6, 5),
                             "c": normal(rng, 4, 3, 5)}, ["buf", "x"])


def grad_select(rng, m):
    def layer(x, w):
        h = x @ w
        return np.where(h > 0, h, h * 0.1)
    def loss(x, w, c):
        return (c * layer(layer(x, w), w)).sum()
    return with_grads(loss, {"x": normal(rng, 6, 4), "w": normal(rng, 4, 4), "c": normal(rng, 6, 4)}, ["x", "w"])


def grad_remat(rng, m):
    # checkpoint changes where values are computed, not the gradient: the
    # loss as if every call were plain.
    def layer(x, w):
        h = x @ w
        return np.where(h > 0, h, h * 0.1)
    def block(x, w, c):
        h = layer(x, w)
        return np.tanh(h) * c + x, (h * h).sum()
    def loss(x, w, v, c):
        h1, s1 = block(x, w, c)
        h2, s2 = block(h1, v, c)
        return (c * layer(layer(h2, w), v)).sum() + 0.1 * s1 + 0.01 * s2
    return with_grads(loss, {"x": normal(rng, 6, 4), "w": normal(rng, 4, 4), "v": normal(rng, 4, 4),
                             "c": normal(rng, 6, 4)}, ["x", "w", "v"])


def grad_xent(rng, m):
    def loss(logits, labels):
        z = logits - logits.max(1, keepdims=True)
        lse = np.log(np.exp(z).sum(1))
        return (lse - z[np.arange(6), labels]).sum() / 6.0
    return with_grads(loss, {"logits": normal(rng, 6, 8) * 2, "labels": rng.integers(0, 8, 6).astype(np.int32)},
                      ["logits"])


def grad_bf16(rng, m):
    x, w = quantize(normal(rng, 6, 4), "bf16"), quantize(normal(rng, 4, 5), "bf16")
    c = rng.uniform(0.5, 1.5, (6, 5)).astype(np.float32)       # a sum of positive terms: no cancellation
    a = d(bf16(np.tanh(d(bf16(d(x) @ d(w))))))     # h and tanh(h) rounded as the program does
    # The loss is f32, but of bf16 values: generated C folds tanh into the bf16 dot's epilogue
    # (docs/scheduling.md), rounding once where this rounds h and tanh(h); compared as bf16.
    return {"x": x, "w": w, "c": c}, [((d(c) * a * a).sum(), "bf16"), (d(x).T @ (2 * d(c) * a * (1 - a * a)), "bf16")]


def grad_f64(rng, m):
    x, w = rng.standard_normal((6, 4)), rng.standard_normal((4, 5))
    h = x @ w
    return {"x": x, "w": w}, [((h * h).sum(), "f64"), (2 * x.T @ h, "f64")]


for _fn in (grad_mlp, grad_mlp_input, grad_unary, grad_binary, grad_reduce, grad_ties, grad_shape, grad_slices,
            grad_cumsum, grad_gather, grad_scatter, grad_select, grad_remat, grad_xent, grad_bf16, grad_f64):
    case("grad " + _fn.__name__[5:], prog("grad.tdsl"), "g_" + _fn.__name__[5:], _fn, scaled=True,
         interp=[None, (3, 2)])


# A tied embedding's gradient (tests/lit/partitioned/tied_embedding.tdsl):
# the lookup's and the logits' contributions, summed while partial and
# reduced once, must still be their sum.

TIED = {"B": 4, "S": 4, "D": 8, "V": 24}


def tied_lm_np(tokens, labels, wte, w):
    h = np.tanh(wte[tokens] @ w)
    logits = h @ wte.T
    peak = logits.max(-1)
    lse = np.log(np.exp(logits - peak[..., None]).sum(-1)) + peak
    picked = np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    return (lse - picked).sum() / (TIED["B"] * TIED["S"])


def tied_step(rng, m):
    b, s, dd, v = TIED["B"], TIED["S"], TIED["D"], TIED["V"]
    inputs = {"tokens": rng.integers(0, v, (b, s)).astype(np.int32), "labels": rng.integers(0, v, (b, s)).astype(np.int32),
              "wte": normal(rng, v, dd), "w": normal(rng, dd, dd) * np.float32(0.5)}
    return with_grads(tied_lm_np, inputs, ["wte", "w"])


case("grad tied embedding", golden("tied_embedding.tdsl"), "step", tied_step, scaled=True,
     consts=",".join("%s=%d" % kv for kv in TIED.items()), interp=[None, (3, 2)])


# ---- gradients of spmd fns (tests/interp/progs/grad_spmd.tdsl) ----
# Each loss as the global function its devices compute together, emulated
# block by block where the collectives move blocks around.

def grad_spmd_consts(m):
    x, y = m.get("X", 1), m.get("Y", 1)
    return "B=%d,D=%d,F=%d" % (2 * x * x, 2 * x, 2 * y)


def sq_sum(a):
    return (a * a).sum()


def grad_dp(rng, m):
    b = 2 * m["X"] ** 2
    return with_grads(lambda x, w: sq_sum(x @ w), {"x": normal(rng, b, 2 * m["X"]), "w": normal(rng, 2 * m["X"], 2 * m["Y"])},
                      ["w"])


def grad_tp(rng, m):
    b, dd, f = 2 * m["X"] ** 2, 2 * m["X"], 2 * m["Y"]
    return with_grads(lambda x, w1, w2: sq_sum(np.tanh(x @ w1) @ w2),
                      {"x": normal(rng, b, dd), "w1": normal(rng, dd, f), "w2": normal(rng, f, dd)}, ["w1", "w2", "x"])


def grad_fsdp(rng, m):
    b, dd, f = 2 * m["X"] ** 2, 2 * m["X"], 2 * m["Y"]
    return with_grads(lambda x, w: sq_sum(x @ w), {"x": normal(rng, b, dd), "w": normal(rng, dd, f)}, ["w"])


def grad_chain(rng, m):
    n = m["X"]
    def loss(x):
        b = x.shape[0] // n
        total = sum(x[i * b:(i + 1) * b] for i in range(n))        # psum_scatter over X along dim 1 ...
        s = [total[:, j * (x.shape[1] // n):(j + 1) * (x.shape[1] // n)] for j in range(n)]
        c = b // n                                                  # ... all_to_all split 0, concat 1 ...
        t = [np.concatenate([s[j][k * c:(k + 1) * c] for j in range(n)], 1) for k in range(n)]
        u = [t[(k - 1) % n] for k in range(n)]                      # ... ppermute by 1
        return sum(sq_sum(u[k]) * (k + 1) for k in range(n))
    return with_grads(loss, {"x": normal(rng, 2 * n * n, 2 * n)}, ["x"])


def grad_pmax(rng, m):
    n = m["X"]
    b, dd = 2 * n * n, 2 * n
    def loss(x, r, c):
        k = b // n
        mx = np.max([x[i * k:(i + 1) * k] for i in range(n)], 0)
        return np.mean([(c * mx + r[i * k:(i + 1) * k] ** 2 * mx).sum() for i in range(n)])
    return with_grads(loss, {"x": normal(rng, b, dd), "r": normal(rng, b, dd), "c": normal(rng, b // n, dd)},
                      ["x", "r"])


def grad_outer(rng, m):
    b, dd, f = 2 * m["X"] ** 2, 2 * m["X"], 2 * m["Y"]
    return with_grads(lambda x, w: 0.5 * sq_sum(x @ w) + sq_sum(x @ (w * w)),
                      {"x": normal(rng, b, dd), "w": normal(rng, dd, f)}, ["w", "x"])


def grad_remat_outer(rng, m):
    b, dd, f = 2 * m["X"] ** 2, 2 * m["X"], 2 * m["Y"]
    return with_grads(lambda x, w: 0.5 * sq_sum(np.tanh(x @ w)) + sq_sum(np.tanh(x @ (w * w))),
                      {"x": normal(rng, b, dd), "w": normal(rng, dd, f)}, ["w", "x"])


# Loops that stay loops in the spmd fns (T = 40 rounds, L = 20 layers,
# N x M nested): each spmd fn as the global function it computes.

def y_mean(a, ny):
    """pmean over Y of the column blocks, as the global array."""
    return np.tile(a.reshape(a.shape[0], ny, a.shape[1] // ny).mean(axis=1), (1, ny))


def ring_np(nx, ny, rounds):
    def loss(x, w):
        acc = x
        for r in range(rounds):
            nxt = np.roll(acc, x.shape[0] // nx, axis=0)       # block k of X receives block k - 1's
            acc = np.tanh(acc * w * 0.5 + nxt * 0.25 + y_mean(acc, ny) * 0.125) + (r % 3) * 0.01
        return sq_sum(acc)
    return loss


def grad_ring_rounds(rounds):
    def make(rng, m):
        b, f = 2 * m["X"] ** 2, 2 * m["Y"]
        return with_grads(ring_np(m["X"], m["Y"], rounds), {"x": normal(rng, b, f), "w": normal(rng, f)}, ["x", "w"])
    return make


def grad_ring(rng, m):
    return grad_ring_rounds(40)(rng, m)


def rnn_spmd_np(h0, w1, w2, xs):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(np.tanh(h @ w1) @ w2 + xs[t])
    return sq_sum(h)


def rnn_spmd_inputs(rng, m, steps=40):
    b, dd, f = 2 * m["X"] ** 2, 2 * m["X"], 2 * m["Y"]
    return {"h0": normal(rng, b, dd), "w1": normal(rng, dd, f) * np.float32(0.5),
            "w2": normal(rng, f, dd) * np.float32(0.5), "xs": normal(rng, steps, b, dd)}


def grad_rnn_steps(steps):
    def make(rng, m):
        return with_grads(rnn_spmd_np, rnn_spmd_inputs(rng, m, steps), ["w1", "w2", "h0", "xs"])
    return make


def grad_rnn(rng, m):
    return grad_rnn_steps(40)(rng, m)


def grad_rnn_outer(rng, m):
    return with_grads(lambda **a: 0.5 * rnn_spmd_np(**a), rnn_spmd_inputs(rng, m), ["w1", "w2"])


def fsdp_loop_np(ny):
    def loss(x, ws):
        total = 0.0
        for k in range(ny):                                 # the devices along Y, each its own h
            h = x
            for layer in range(ws.shape[0]):
                h = np.tanh(h @ ws[layer]) * 0.5 + h * (0.5 + k * 0.05)
            total += sq_sum(h)
        return total
    return loss


def grad_fsdp_loop(rng, m):
    b, dd = 2 * m["X"] ** 2, 2 * m["X"]
    return with_grads(fsdp_loop_np(m["Y"]), {"x": normal(rng, b, dd), "ws": normal(rng, 20, dd, dd) * np.float32(0.5)},
                      ["ws", "x"])


def nested_spmd_np(nx, ny):
    def loss(x, w):
        b, f = x.shape
        scale = np.repeat(1.0 + np.arange(ny) * 0.1, f // ny)[None, :]     # 1 + axis_index(Y) * 0.1
        acc = x
        for a in range(10):
            for c in range(12):
                nxt = np.roll(acc, b // nx, axis=0)
                acc = np.tanh(acc * w) * 0.5 + nxt * 0.25 + y_mean(acc, ny) * scale * 0.25
            top = np.tile(acc.reshape(nx, b // nx, f).max(axis=0), (nx, 1))  # pmax over X of the row blocks
            acc = y_mean(acc * 0.9 + top * 0.1, ny)
        return sq_sum(acc)
    return loss


def grad_nested(rng, m):
    b, f = 2 * m["X"] ** 2, 2 * m["Y"]
    return with_grads(nested_spmd_np(m["X"], m["Y"]), {"x": normal(rng, b, f), "w": normal(rng, f)}, ["x", "w"])


for _fn in (grad_dp, grad_tp, grad_fsdp, grad_chain, grad_pmax, grad_outer, grad_remat_outer, grad_ring, grad_rnn,
            grad_rnn_outer, grad_fsdp_loop, grad_nested):
    case("grad spmd " + _fn.__name__[5:], prog("grad_spmd.tdsl"), "g_" + _fn.__name__[5:], _fn,
         consts=grad_spmd_consts, scaled=True, interp=[None, (2, 4), (3, 1)])
# The same two with T = 6, which unrolls: the kept loops' gradients and the
# unrolled ones' against the same differences.
case("grad spmd ring unrolled", prog("grad_spmd.tdsl"), "g_ring", grad_ring_rounds(6),
     consts=lambda m: grad_spmd_consts(m) + ",T=6", scaled=True, interp=[None, (2, 4)], codegen=[3])
case("grad spmd rnn unrolled", prog("grad_spmd.tdsl"), "g_rnn", grad_rnn_steps(6),
     consts=lambda m: grad_spmd_consts(m) + ",T=6", scaled=True, interp=[None, (2, 4)], codegen=[3])


# ---- training steps (samples/train_mlp.tdsl) ----
# The MLP regressor's gradient by hand (backpropagation in f64), and the
# optimizers as PyTorch and optax write them.

def mlp_grads(x, y, w1, b1, w2, b2):
    """loss and (g_w1, g_b1, g_w2, g_b2) of mean((tanh(x w1 + b1) w2 + b2 - y)^2)."""
    a = np.tanh(x @ w1 + b1)
    e = a @ w2 + b2 - y
    de = 2 * e / e.size
    dh = (de @ w2.T) * (1 - a * a)
    return (e * e).mean(), (x.T @ dh, dh.sum(0), a.T @ de, de.sum(0))


def sgd_momentum(ws, vs, gs, lr=0.05, mu=0.9):
    vs = [mu * v + g for v, g in zip(vs, gs)]
    return [w - lr * v for w, v in zip(ws, vs)], vs


def adam(ws, ms, vs, gs, t, lr=0.01, b1=0.9, b2=0.999, eps=1e-8):
    t = t + 1
    ms = [b1 * m + (1 - b1) * g for m, g in zip(ms, gs)]
    vs = [b2 * v + (1 - b2) * g * g for v, g in zip(vs, gs)]
    ws = [w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) for w, m, v in zip(ws, ms, vs)]
    return ws, ms, vs, t


TRAIN_CONSTS = "B=16,D=4,H=8,O=2"
MLP_SHAPES = [("w1", (4, 8)), ("b1", (8,)), ("w2", (8, 2)), ("b2", (2,))]


def train_data(rng):
    x = normal(rng, 16, 4)
    y = np.sin(x @ rng.standard_normal((4, 2))).astype(np.float32)
    ws = [(normal(rng, *shape) * 0.5).astype(np.float32) for _, shape in MLP_SHAPES]
    return x, y, ws


def train_sgd(rng, m):
    x, y, ws = train_data(rng)
    vs = [(normal(rng, *w.shape) * 0.1).astype(np.float32) for w in ws]
    loss, gs = mlp_grads(d(x), d(y), *map(d, ws))
    nws, nvs = sgd_momentum(list(map(d, ws)), list(map(d, vs)), gs)
    inputs = {"x": x, "y": y}                  # the records p and v by their fields
    inputs.update({"p." + n: w for (n, _), w in zip(MLP_SHAPES, ws)})
    inputs.update({"v." + n: v for (n, _), v in zip(MLP_SHAPES, vs)})
    return inputs, [(loss, "f32")] + [(w, "f32") for w in nws] + [(v, "f32") for v in nvs]


def train_adam(rng, m):
    x, y, ws = train_data(rng)
    ms = [(normal(rng, *w.shape) * 0.1).astype(np.float32) for w in ws]
    vs = [(rng.uniform(0.01, 0.1, w.shape)).astype(np.float32) for w in ws]
    t = np.float32(4)
    loss, gs = mlp_grads(d(x), d(y), *map(d, ws))
    nws, nms, nvs, nt = adam(list(map(d, ws)), list(map(d, ms)), list(map(d, vs)), gs, 4.0)
    inputs = {"x": x, "y": y, "t": np.array(t, np.float32)}
    for pre, arrs in (("p.", ws), ("m.", ms), ("v.", vs)):
        inputs.update({pre + n: a for (n, _), a in zip(MLP_SHAPES, arrs)})
    wants = [(loss, "f32")] + [(a, "f32") for a in nws + nms + nvs] + [(nt, "f32")]
    return inputs, wants


case("train sgd_dp", sample("train_mlp.tdsl"), "sgd_dp", train_sgd, consts=TRAIN_CONSTS, scaled=True)
case("train adam", sample("train_mlp.tdsl"), ["adam_dp", "adam_tp", "adam_fsdp"], train_adam, consts=TRAIN_CONSTS,
     scaled=True)


# ---- collectives in flight (tests/interp/progs/collective_window.tdsl) ----

def flight(rng, m):
    x = normal(rng, 8, 4)
    xd = d(x)
    s = xd.sum(0)                # exp(x[i, j]) sums i inside: the smallest expression holding it
    total = s + (xd * xd).sum(0) + np.exp(s) + np.sin(s) + np.cos(s) + np.tanh(s) + np.abs(s) + 3 * s + 5 * s
    return {"x": x}, [(total, "f32")]


def flight_call(rng, m):
    x, y = normal(rng, 8, 4), normal(rng, 8, 4)
    xd, b = d(x), 0
    a = xd.sum(0)
    for _ in range(7):
        b = a * 2
        a = (xd * b).sum(0)
    return {"x": x, "y": y}, [(a + d(y).sum(0), "f32")]


for _fn in (flight, flight_call):
    case("collective_window." + _fn.__name__, prog("collective_window.tdsl"), _fn.__name__, _fn, scaled=True)


def seed(*keys):
    """A fixed seed from strings and numbers (stable across runs and Pythons)."""
    import zlib
    return [zlib.crc32(str(k).encode()) for k in keys]
