"""The Python package (python/shardc, docs/python.md) against NumPy.

Run by tests/run-tests (make check) as
    PYTHONPATH=python /usr/bin/python3 -m pytest tests/python
with SHARDC_CACHE_DIR in the build tree; SHARDC names the shardc to test
(default: the build tree's)."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import shardc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_MLP = os.path.join(ROOT, "samples", "train_mlp.tdsl")
SMALL = {"B": 16, "D": 8, "H": 16, "O": 4}

MATMUL = """
mesh X = 2, Y = 2
fn f(x: f32[N@X, 6], w: f32[6, 4@Y]) -> f32[N, 4] {
    y[i, j] = x[i, k] * w[k, j]
    return y
}
const N = 8
"""

MIXED = """
mesh X = 2
fn g(a: i32[6@X], h: bf16[4], d: f64[3]) -> (i32[6], bf16[4], f64[3]) {
    return a * 2, h * 2.0, d + 1.0
}
"""


def rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("mesh", [{"X": 2, "Y": 2}, {"X": 1, "Y": 2}, {"X": 4, "Y": 1}])
def test_matmul_meshes(mesh):
    f = shardc.compile(MATMUL, fn="f", mesh=mesh, const={"N": 12})
    assert f.mesh == mesh
    r = rng()
    x = r.standard_normal((12, 6)).astype(np.float32)
    w = r.standard_normal((6, 4)).astype(np.float32)
    np.testing.assert_allclose(f(x, w), x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f(w=w, x=2 * x), 2 * x @ w, rtol=1e-5, atol=1e-5)   # keywords, a second call


def numpy_sgd(x, y, p, v):
    """sgd_dp of samples/train_mlp.tdsl in NumPy (float64)."""
    B, O = y.shape
    h = x @ p["w1"] + p["b1"]
    a = np.tanh(h)
    e = a @ p["w2"] + p["b2"] - y
    loss = (e * e).sum() / (B * O)
    do = 2 * e / (B * O)
    da = do @ p["w2"].T
    dh = da * (1 - a * a)
    g = {"w1": x.T @ dh, "b1": dh.sum(0), "w2": a.T @ do, "b2": do.sum(0)}
    v = {k: 0.9 * v[k] + g[k] for k in g}
    return loss, {k: p[k] - 0.05 * v[k] for k in p}, v


def mlp_params(r, scale=0.3):
    D, H, O = SMALL["D"], SMALL["H"], SMALL["O"]
    return {"w1": scale * r.standard_normal((D, H)), "b1": scale * r.standard_normal(H),
            "w2": scale * r.standard_normal((H, O)), "b2": scale * r.standard_normal(O)}


def f32(tree):
    return {k: f32(v) if isinstance(v, dict) else np.asarray(v, np.float32) for k, v in tree.items()}


@pytest.mark.parametrize("mesh", [{"X": 2, "Y": 4}, {"X": 1, "Y": 1}])
def test_train_loop_records(mesh):
    """A Python training loop of a record-typed step: 5 steps, each result fed back."""
    step = shardc.compile(TRAIN_MLP, fn="sgd_dp", mesh=mesh, const=SMALL)
    r = rng(1)
    x = r.standard_normal((SMALL["B"], SMALL["D"])).astype(np.float32)
    y = r.standard_normal((SMALL["B"], SMALL["O"])).astype(np.float32)
    p = f32(mlp_params(r))
    v = f32({k: np.zeros_like(a) for k, a in p.items()})
    P = {k: a.astype(np.float64) for k, a in p.items()}
    V = {k: a.astype(np.float64) for k, a in v.items()}
    for k in range(5):
        loss, p, v = step(x, y, p, v)
        assert step.carried == (8 if k else 0)          # p and v fed back: taken from the device blocks
        L, P, V = numpy_sgd(x.astype(np.float64), y.astype(np.float64), P, V)
        assert loss.shape == () and loss.dtype == np.float32
        assert abs(float(loss) - L) <= 1e-4 * abs(L) + 1e-6
        assert sorted(p) == ["b1", "b2", "w1", "w2"] and sorted(v) == sorted(p)
    for k in P:
        np.testing.assert_allclose(p[k], P[k], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(v[k], V[k], rtol=1e-4, atol=1e-5)


def test_results_changed_are_not_carried():
    """Results are read-only; one made writeable and changed in place, or
    a copy, is copied in again: the C sees the new values."""
    step = shardc.compile(TRAIN_MLP, fn="sgd_dp", mesh={"X": 2, "Y": 2}, const=SMALL)
    r = rng(5)
    x = r.standard_normal((SMALL["B"], SMALL["D"])).astype(np.float32)
    y = r.standard_normal((SMALL["B"], SMALL["O"])).astype(np.float32)
    p = f32(mlp_params(r))
    v = {k: np.zeros_like(a) for k, a in p.items()}
    _, p, v = step(x, y, p, v)
    with pytest.raises(ValueError, match="read-only"):
        p["w1"][0, 0] = 1.0
    p["w1"].flags.writeable = True
    p["w1"][:] *= 0.5                                   # changed in place
    p["b1"] = p["b1"] + 1.0                             # a new array
    P = {k: a.astype(np.float64) for k, a in p.items()}
    V = {k: a.astype(np.float64) for k, a in v.items()}
    loss, p2, v2 = step(x, y, p, v)
    assert step.carried == 6                            # w2, b2 and v's four
    L, P, V = numpy_sgd(x.astype(np.float64), y.astype(np.float64), P, V)
    assert abs(float(loss) - L) <= 1e-4 * abs(L)
    for k in P:
        np.testing.assert_allclose(p2[k], P[k], rtol=1e-4, atol=1e-5)
    _, p3, _ = step(x, y, p2, v)                        # v is from the call before: copied
    assert step.carried == 4


def test_record_dotted_keys_and_split_fields():
    """adam_tp splits the hidden dim over Y; fields given as dotted keys."""
    step = shardc.compile(TRAIN_MLP, fn="adam_tp", mesh={"X": 2, "Y": 2}, const=SMALL)
    r = rng(2)
    x = r.standard_normal((SMALL["B"], SMALL["D"])).astype(np.float32)
    y = r.standard_normal((SMALL["B"], SMALL["O"])).astype(np.float32)
    p = f32(mlp_params(r))
    zeros = {k: np.zeros_like(a) for k, a in p.items()}
    dotted = {"p." + k: a for k, a in p.items()}
    loss, p1, m1, v1, t1 = step(x, y, {k[2:]: a for k, a in dotted.items()}, zeros, zeros, np.float32(0))
    assert float(t1) == 1.0
    # Adam's first step moves every weight by lr (0.01) times the sign of its gradient (nearly).
    L, _, V = numpy_sgd(x.astype(np.float64), y.astype(np.float64), p, zeros)
    assert abs(float(loss) - L) <= 1e-4 * abs(L)
    for k in p:
        g = V[k]                                             # v = g after one momentum step from 0
        big = np.abs(g) > 1e-3
        np.testing.assert_allclose((p[k] - p1[k])[big], 0.01 * np.sign(g[big]), rtol=1e-3, atol=1e-5)
        np.testing.assert_allclose(m1[k], 0.1 * g, rtol=1e-3, atol=1e-6)


def test_nested_record_dicts():
    src = """
mesh X = 2
record Inner { w: f32[4@X] }
record Outer { a: Inner, b: f32[2] }
fn h(p: Outer, s: f32[]) -> (Outer, f32[]) {
    q = p * s
    t[] = p.a.w[i]
    return q, t
}
"""
    f = shardc.compile(src, fn="h")
    w, b = np.arange(4, dtype=np.float32), np.array([10, 20], np.float32)
    q, t = f({"a": {"w": w}, "b": b}, 3.0)
    np.testing.assert_array_equal(q["a"]["w"], 3 * w)
    np.testing.assert_array_equal(q["b"], 3 * b)
    assert float(t) == w.sum()
    q2, _ = f({"a.w": w, "b": b}, s=np.float32(3))                 # dotted keys
    np.testing.assert_array_equal(q2["a"]["w"], q["a"]["w"])


def test_dtypes_bf16_convention():
    f = shardc.compile(MIXED, fn="g")
    a = np.arange(6, dtype=np.int32)
    h = np.array([1.0, 1.00390625, 3.1, -2.5], np.float32)           # 1 + 2^-8 is not a bf16: rounds
    d = np.array([0.1, 0.2, 0.3])
    ra, rh, rd = f(a, h, d)
    assert ra.dtype == np.int32 and rh.dtype == np.float32 and rd.dtype == np.float64
    np.testing.assert_array_equal(ra, 2 * a)
    bf = shardc._convert.bf16_float(shardc._convert.bf16_bits(h))
    np.testing.assert_array_equal(rh, bf * 2)
    assert bf[1] == 1.0 and bf[2] != np.float32(3.1)
    np.testing.assert_array_equal(rd, d + 1.0)


def test_inputs_in_place():
    """A C-contiguous argument of the parameter's dtype is what the C reads
    (no copy); a strided one or another dtype is copied."""
    f = shardc.compile(MATMUL, fn="f", const={"N": 4096})
    x = np.ones((4096, 6), np.float32)
    w = np.ones((6, 4), np.float32)
    passed = f.arrays(x, w)
    assert passed[0] is x and passed[1] is w
    assert passed[0].ctypes.data == x.ctypes.data
    big = np.ones((4096, 12), np.float32)
    strided = f.arrays(big[:, ::2], w)[0]
    assert strided.flags.c_contiguous and not np.shares_memory(strided, big)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        converted = f.arrays(x.astype(np.float64), w)[0]
    assert converted.dtype == np.float32 and not np.shares_memory(converted, x)


def test_wrong_dtype_and_cast():
    f = shardc.compile(MATMUL, fn="f")
    w = np.ones((6, 4), np.float32)
    with pytest.raises(TypeError, match=r"parameter 'x' is f32 .*got int32"):
        f(np.ones((8, 6), np.int32), w)
    inexact = np.full((8, 6), 0.1)
    with pytest.raises(TypeError, match=r"parameter 'x' is f32.*element \[0, 0\] \(0.10000000000000001\) is not exact"):
        f(inexact, w)
    with pytest.warns(UserWarning, match="float64 data read as f32"):
        f(np.ones((8, 6)), w)                                       # exact: read, with --in's warning
    g = shardc.compile(MATMUL, fn="f", cast=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(g(inexact, w), inexact.astype(np.float32) @ w, rtol=1e-6)


def test_wrong_shape_and_arity():
    f = shardc.compile(MATMUL, fn="f")
    x, w = np.ones((8, 6), np.float32), np.ones((6, 4), np.float32)
    with pytest.raises(ValueError, match=r"parameter 'w' is f32\[6, 4\], but got an array of shape \(4, 6\)"):
        f(x, w.T.copy())
    with pytest.raises(TypeError, match=r"takes 2 arguments \(x, w\) but 3 were given"):
        f(x, w, w)
    with pytest.raises(TypeError, match=r"missing parameter 'w'"):
        f(x)
    with pytest.raises(TypeError, match=r"no parameter 'ww'; did you mean 'w'\?"):
        f(x, ww=w)


def test_record_errors():
    step = shardc.compile(TRAIN_MLP, fn="sgd_dp", mesh={"X": 1, "Y": 1}, const=SMALL)
    r = rng(3)
    x = np.zeros((SMALL["B"], SMALL["D"]), np.float32)
    y = np.zeros((SMALL["B"], SMALL["O"]), np.float32)
    p = f32(mlp_params(r))
    missing = {k: a for k, a in p.items() if k != "b2"}
    with pytest.raises(TypeError, match=r"record parameter 'p' has no field 'b2' in the dict given"):
        step(x, y, missing, p)
    typo = dict(p, w3=p["w2"])
    with pytest.raises(TypeError, match=r"record parameter 'v' has no field 'w3'; did you mean 'w[12]'\?"):
        step(x, y, p, typo)
    with pytest.raises(TypeError, match=r"parameter 'p' is a record \(fields w1, b1, w2, b2\): pass a dict"):
        step(x, y, p["w1"], p)


def test_compile_error_has_location():
    bad = "mesh X = 2\nfn f(x: f32[4@X]) -> f32[4] {\n    return x * undefined_name\n}\n"
    with pytest.raises(shardc.CompileError) as e:
        shardc.compile(bad, fn="f")
    assert "<source>:3:" in str(e.value) and "undefined_name" in str(e.value)
    with pytest.raises(shardc.CompileError, match=r"no function named 'g'"):
        shardc.compile(MATMUL, fn="g")
    with pytest.raises(shardc.CompileError, match=r"--mesh names axes Z but the program's mesh has X,Y"):
        shardc.compile(TRAIN_MLP, fn="sgd_dp", mesh={"Z": 2})


def test_dump():
    f = shardc.compile(MATMUL, fn="f")
    text = f.dump(stage="partitioned")
    assert "partitioned fn f(" in text and "all-gather" in text
    assert "# peak bytes per device of f" in f.dump() and "# peak bytes" not in text


MPI_SCRIPT = r"""
import os, sys, numpy as np, shardc
sys.path.insert(0, sys.argv[1])
from test_shardc import TRAIN_MLP, SMALL, numpy_sgd, mlp_params, f32, rng
step = shardc.compile(TRAIN_MLP, fn="sgd_dp", mesh={"X": 2, "Y": 2}, const=SMALL, backend="mpi")
r = rng(4)
x = r.standard_normal((SMALL["B"], SMALL["D"])).astype(np.float32)
y = r.standard_normal((SMALL["B"], SMALL["O"])).astype(np.float32)
p = f32(mlp_params(r)); v = {k: np.zeros_like(a) for k, a in p.items()}
P = {k: a.astype(np.float64) for k, a in p.items()}; V = dict(v)
for _ in range(3):
    loss, p, v = step(x, y, p, v)
    L, P, V = numpy_sgd(x.astype(np.float64), y.astype(np.float64), P, V)
err = max(float(np.abs(p[k] - P[k]).max()) for k in P)
rank = os.environ["OMPI_COMM_WORLD_RANK"]
with open(os.path.join(sys.argv[2], "rank" + rank), "w") as f:
    f.write("%s %s" % (abs(float(loss) - L) < 1e-4 * abs(L), err < 1e-4))
"""


@pytest.mark.skipif(os.environ.get("SHARDC_TEST_NO_MPI") == "1", reason="make check-fast leaves MPI out")
def test_mpi_two_processes(tmp_path):
    script = tmp_path / "mpi_step.py"
    script.write_text(MPI_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(shardc.__path__[0]),
                                                                      os.environ.get("PYTHONPATH")])))
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "--mca", "pml", "ob1",
           "-np", "2", sys.executable, str(script), os.path.dirname(os.path.abspath(__file__)), str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = [(tmp_path / ("rank%d" % r)).read_text() for r in range(2)]     # each process's results right
    assert got == ["True True"] * 2, p.stdout + p.stderr


DOUBLE = """
mesh X = 2
fn f(x: f32[4@X]) -> f32[4] {
    return x * 2.0
}
"""


def test_run_failure_and_close(monkeypatch):
    """A run that fails raises RuntimeError with the runtime's reason, and
    the callable refuses further calls (its world may be stopped); a closed
    one too."""
    monkeypatch.setenv("SHARDC_TIMEOUT", "bogus")              # read when the world is made, at the first call
    f = shardc.compile(DOUBLE, fn="f")
    with pytest.raises(RuntimeError, match=r"f: SHARDC_TIMEOUT=bogus is not a positive number of seconds"):
        f(np.ones(4, np.float32))
    with pytest.raises(RuntimeError, match=r"an earlier call of this session failed"):
        f(np.ones(4, np.float32))
    monkeypatch.delenv("SHARDC_TIMEOUT")
    g = shardc.compile(DOUBLE, fn="f")
    np.testing.assert_array_equal(g(np.arange(4, dtype=np.float32)), 2 * np.arange(4))
    g.close()
    with pytest.raises(RuntimeError, match=r"f: the function was closed"):
        g(np.ones(4, np.float32))
