"""NumPy arrays to and from the C's element types, by `--in`'s rules
(lib/host/npy.c, docs/cli.md): an array of the parameter's dtype is used as it
is; float64 converts to f32, bf16 or f16 and int64 to i32 only when every
value is exact (with a warning, as --in gives), or with cast=True by
rounding (floats only).  Python numbers carry no dtype and convert when
exact, silently.  bf16 has no NumPy dtype: it is float32 on the Python side
(as in .npy files), rounded to bf16 going in and widened coming out."""
import warnings

import numpy as np

# The NumPy dtype of each shardc dtype (compiler/ir/dtypes.def); bf16 travels as float32.
NUMPY = {"f32": np.float32, "f64": np.float64, "bf16": np.float32, "f16": np.float16, "i32": np.int32,
         "bool": np.bool_, "u32": np.uint32, "i64": np.int64, "u8": np.uint8}
FLOATS = ("f32", "bf16", "f16")


def bf16_bits(f32):
    """float32 -> bf16 bit patterns, rounding to nearest even (sc_bf16_from_float); NaNs stay NaNs."""
    b = np.ascontiguousarray(f32, dtype=np.float32).view(np.uint32)
    r = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(f32)
    if nan.any():
        r[nan] = ((b[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return r


def bf16_float(bits):
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _rounded(a, dt):
    """a (float64) rounded to dt, as float64, to compare with a."""
    if dt == "bf16":
        return bf16_float(bf16_bits(a.astype(np.float32))).astype(np.float64)
    return a.astype(NUMPY[dt]).astype(np.float64)


def _where(a, bad):
    idx = np.unravel_index(int(np.flatnonzero(bad)[0]), a.shape) if a.ndim else ()
    return list(int(i) for i in idx), a[idx]


def _type_error(name, dt, a, why):
    return TypeError("parameter '%s' is %s (NumPy %s), but %s" % (name, dt, np.dtype(NUMPY[dt]).name, why))


def to_c(name, value, dt, shape, cast):
    """The array to pass for parameter `name` of dtype dt and global shape."""
    pynum = isinstance(value, (bool, int, float)) and not isinstance(value, np.generic)
    a = np.asarray(value)
    if a.shape != shape:
        raise ValueError("parameter '%s' is %s%s, but got an array of shape %s" % (
            name, dt, list(shape), a.shape))
    want = np.dtype(NUMPY[dt])
    if a.dtype != want:
        a = _converted(name, a, dt, want, cast, pynum)
    if dt == "bf16":
        return bf16_bits(a)
    # In place when C-contiguous and aligned: np.require returns a itself.
    return np.require(a, requirements=["C", "A"])


def _converted(name, a, dt, want, cast, pynum):
    got = a.dtype.name
    if a.dtype == np.float64 and dt in FLOATS or pynum and a.dtype == np.int64 and dt in FLOATS + ("f64",):
        f = a.astype(np.float64)
        bad = (_rounded(f, dt) != f) & ~np.isnan(f) if dt != "f64" else np.zeros(f.shape, bool)
        if bad.any() and not cast:
            at, v = _where(f, bad)
            raise _type_error(name, dt, a, "got %s data whose element %s (%.17g) is not exact in %s: pass "
                              "arr.astype(np.%s), or cast=True to round" % (got, at, v, dt, want.name))
        if not cast and not pynum:
            warnings.warn("parameter '%s': %s data read as %s (every value is exact); cast=True says so and "
                          "silences this" % (name, got, dt), stacklevel=4)
        return f.astype(want)
    if a.dtype == np.int64 and dt in ("i32", "u32", "u8", "i64"):
        info = np.iinfo(want)
        bad = (a < info.min) | (a > info.max)
        if bad.any():
            at, v = _where(a, bad)
            raise _type_error(name, dt, a, "element %s (%d) of the int64 data is outside its range (%d to %d)" % (
                at, v, info.min, info.max))
        if not pynum:
            if dt != "i32":
                raise _type_error(name, dt, a, "got int64: pass arr.astype(np.%s)" % want.name)
            if not cast:
                warnings.warn("parameter '%s': int64 data read as i32 (every value fits); cast=True says so and "
                              "silences this" % name, stacklevel=4)
        return a.astype(want)
    if pynum and a.dtype == np.bool_ and dt == "bool":
        return a
    raise _type_error(name, dt, a, "got %s: pass arr.astype(np.%s)%s" % (
        got, want.name, ", or cast=True to round float64" if a.dtype == np.float64 and dt in FLOATS else ""))


def empty_c(dt, shape):
    return np.empty(shape, np.uint16 if dt == "bf16" else NUMPY[dt])


def from_c(a, dt):
    return bf16_float(a) if dt == "bf16" else a
