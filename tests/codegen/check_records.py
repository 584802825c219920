#!/usr/bin/python3
"""Records (docs/language.md, "Records"; docs/cli.md, "Records"): the MLP of
tests/codegen/progs/records.tdsl, its parameters, gradient and optimizer
state records, against NumPy (f64; f32 tolerances):

- `shardc interp` and `shardc run` (threads) on the meshes X=2,Y=2 and
  X=1,Y=4 (the hidden dim split 2 and 4 ways) of `sgd`, `adam_step` and
  `layer_grad`, and of `rebuild` (a record literal, fields assigned
  alone): every result, read by its dotted name (p.l1.w, ...) from
  the --out archive, is NumPy's;
- --in p=FILE.npz reads a record's fields: from an archive of its field
  names (np.savez(**{"l1.w": ...})), and from one of dotted names (the
  --out archive of a run, `p.l1.w`): --out then --in round trip;
- `shardc run --steps 6` carries the returned records p, m, v and t into
  their parameters: NumPy's six Adam steps;
- `--in data.npz --in ck.npz`: each parameter from the archive given alone
  that has its array (interp and run);
- errors, exit 1: a field missing from the archive names the field and the
  archive's arrays; a record read from a .npy file; an unknown --in name
  offers the nearest record.

    tests/codegen/check_records.py [--shardc build/shardc] [--tmp DIR]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from tap import Tap  # noqa: E402

PROG = os.path.join(ROOT, "tests", "codegen", "progs", "records.tdsl")
B, D, H, O = 8, 6, 8, 4
FIELDS = [("l1.w", (D, H)), ("l1.b", (H,)), ("w2", (H, O)), ("b2", (O,))]
MESHES = ["X=2,Y=2", "X=1,Y=4"]
RTOL = 2e-4


def grads(x, y, p):
    """loss and the gradient record of mean((tanh(x w + b) w2 + b2 - y)^2)."""
    a = np.tanh(x @ p["l1.w"] + p["l1.b"])
    e = a @ p["w2"] + p["b2"] - y
    de = 2 * e / e.size
    dh = (de @ p["w2"].T) * (1 - a * a)
    return (e * e).mean(), {"l1.w": x.T @ dh, "l1.b": dh.sum(0), "w2": a.T @ de, "b2": de.sum(0)}


def adam(p, g, m, v, t):
    t = t + 1
    m = {k: 0.9 * m[k] + 0.1 * g[k] for k in p}
    v = {k: 0.999 * v[k] + 0.001 * g[k] * g[k] for k in p}
    p = {k: p[k] - 0.01 * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8) for k in p}
    return p, m, v, t


def record(rng, scale):
    return {k: (rng.standard_normal(s) * scale).astype(np.float32) for k, s in FIELDS}


def f64(r):
    return {k: np.asarray(a, np.float64) for k, a in r.items()}


def close(got, want):
    want = np.asarray(want, np.float64)
    return got.shape == want.shape and np.allclose(got, want, rtol=RTOL, atol=RTOL * max(1.0, np.abs(want).max()))


class Check(Tap):
    def __init__(self, shardc, tmp):
        super().__init__()
        self.shardc, self.tmp = shardc, tmp

    def shardc_run(self, args):
        return subprocess.run([self.shardc] + args, capture_output=True, text=True, timeout=300)

    def results(self, label, p, out, want):
        """want: {member: array}; every member of out must be NumPy's."""
        if not self.check(p.returncode == 0, label + " runs", "exit %d: %s" % (p.returncode, p.stderr[-600:])):
            return
        got = np.load(out)
        bad = [k for k, a in want.items() if k not in got or not close(got[k], a)]
        self.check(not bad, label + " results", "differ: %s (archive has %s)" % (bad, sorted(got.files)))


def main():
    ap = script_args.new_parser(__doc__, "check-records")
    args = script_args.parse(ap)
    c = Check(args.shardc, args.tmp)
    tmp = c.tmp
    rng = np.random.default_rng(5)
    x = rng.standard_normal((B, D)).astype(np.float32)
    y = np.sin(x @ rng.standard_normal((D, O))).astype(np.float32)
    p, m = record(rng, 0.5), record(rng, 0.1)
    v = {k: rng.uniform(0.01, 0.1, s).astype(np.float32) for k, s in FIELDS}
    t = np.array(3, np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "y.npy"), y)
    np.save(os.path.join(tmp, "t.npy"), t)
    np.savez(os.path.join(tmp, "p.npz"), **p)                                  # field names
    np.savez(os.path.join(tmp, "state.npz"), **{"m." + k: a for k, a in m.items()},
             **{"v." + k: a for k, a in v.items()})                             # dotted names
    xy = ["--in", "x=" + os.path.join(tmp, "x.npy"), "--in", "y=" + os.path.join(tmp, "y.npy")]
    pin = ["--in", "p=" + os.path.join(tmp, "p.npz")]
    state = os.path.join(tmp, "state.npz")

    loss, g = grads(x.astype(np.float64), y.astype(np.float64), f64(p))
    sgd_v = {k: 0.9 * m[k] + g[k] for k in p}               # m stands for the velocity
    want_sgd = {"result0": loss}
    want_sgd.update({"p." + k: p[k] - 0.05 * sgd_v[k] for k in p})
    want_sgd.update({"v." + k: sgd_v[k] for k in p})
    np_, nm, nv, nt = adam(f64(p), g, f64(m), f64(v), 3.0)
    want_adam = {"result0": loss, "t": nt}
    for pre, r in (("p.", np_), ("m.", nm), ("v.", nv)):
        want_adam.update({pre + k: a for k, a in r.items()})
    want_layer = {"result0": g["l1.w"], "result1": g["l1.b"], "result2": p["b2"] + 1.0}
    w2 = rng.standard_normal((H, O)).astype(np.float32)
    np.save(os.path.join(tmp, "w2.npy"), w2)
    np.save(os.path.join(tmp, "s.npy"), np.array(3, np.float32))
    want_rebuild = {"q.l1.w": 4 * p["l1.w"], "q.l1.b": 2 * p["l1.b"] + 1, "q.w2": w2, "q.b2": 2 * p["b2"],
                    "d.l1.w": 0 * p["l1.w"], "d.l1.b": 0 * p["l1.b"], "d.w2": w2 - p["w2"], "d.b2": 0 * p["b2"]}
    cases = [("sgd", xy + ["--in", "v=" + state + ":m"], want_sgd),
             ("adam_step", xy + ["--in", "m=" + state, "--in", "v=" + state, "--in", "t=" + os.path.join(tmp, "t.npy")],
              want_adam),
             ("layer_grad", xy, want_layer),
             ("rebuild", ["--in", "w2=" + os.path.join(tmp, "w2.npy"), "--in", "s=" + os.path.join(tmp, "s.npy")],
              want_rebuild)]
    for fn, ins, want in cases:
        out = os.path.join(tmp, "interp_%s.npz" % fn)
        c.results("interp " + fn, c.shardc_run(["interp", PROG, "--fn", fn, "--out", out] + pin + ins), out, want)
        for mesh in MESHES:
            out = os.path.join(tmp, "run_%s_%s.npz" % (fn, mesh.replace(",", "_").replace("=", "")))
            c.results("run %s --mesh %s" % (fn, mesh),
                      c.shardc_run(["run", PROG, "--fn", fn, "--mesh", mesh, "--out", out] + pin + ins), out, want)

    # --out then --in: the adam run's archive holds p.l1.w, ... m.*, v.*, t.
    first = os.path.join(tmp, "run_adam_step_X2_Y2.npz")
    out = os.path.join(tmp, "again.npz")
    p2, m2, v2, t2 = adam(np_, grads(x.astype(np.float64), y.astype(np.float64), np_)[1], nm, nv, nt)
    want = {"t": t2}
    for pre, r in (("p.", p2), ("m.", m2), ("v.", v2)):
        want.update({pre + k: a for k, a in r.items()})
    c.results("run adam_step from its own --out (--in p=, m=, v=, t=)",
              c.shardc_run(["run", PROG, "--fn", "adam_step", "--out", out] + xy +
                           ["--in", "p=" + first, "--in", "m=" + first, "--in", "v=" + first, "--in", "t=" + first]),
              out, want)

    # --steps: p, m, v and t carried.
    sp, sm, sv, st = f64(p), f64(m), f64(v), 3.0
    for _ in range(6):
        sp, sm, sv, st = adam(sp, grads(x.astype(np.float64), y.astype(np.float64), sp)[1], sm, sv, st)
    want = {"t": st}
    for pre, r in (("p.", sp), ("m.", sm), ("v.", sv)):
        want.update({pre + k: a for k, a in r.items()})
    out = os.path.join(tmp, "steps.npz")
    c.results("run adam_step --steps 6", c.shardc_run(["run", PROG, "--fn", "adam_step", "--steps", "6", "--out", out]
                                                       + xy + pin + ["--in", "m=" + state, "--in", "v=" + state,
                                                                     "--in", "t=" + os.path.join(tmp, "t.npy")]),
              out, want)

    # --in data.npz --in ck.npz: each parameter from the archive that has it.
    np.savez(os.path.join(tmp, "data.npz"), x=x, y=y)
    np.savez(os.path.join(tmp, "ck.npz"), **{"p." + k: a for k, a in p.items()})
    for cmd in ("interp", "run"):
        out = os.path.join(tmp, "two_%s.npz" % cmd)
        c.results(cmd + " layer_grad --in data.npz --in ck.npz",
                  c.shardc_run([cmd, PROG, "--fn", "layer_grad", "--out", out, "--in", os.path.join(tmp, "data.npz"),
                                "--in", os.path.join(tmp, "ck.npz")]), out, want_layer)

    # Errors.
    np.savez(os.path.join(tmp, "short.npz"), **{k: a for k, a in p.items() if k != "b2"})
    for cmd in ("interp", "run"):
        r = c.shardc_run([cmd, PROG, "--fn", "layer_grad", "--out", os.path.join(tmp, "e.npz")] + xy +
                         ["--in", "p=" + os.path.join(tmp, "short.npz")])
        c.check(r.returncode == 1 and "p.b2" in r.stderr and "has no array named 'b2' (it has: l1.w, l1.b, w2)"
                in r.stderr, cmd + ": a field missing from the archive", "exit %d: %s" % (r.returncode, r.stderr))
        r = c.shardc_run([cmd, PROG, "--fn", "layer_grad", "--out", os.path.join(tmp, "e.npz")] + xy +
                         ["--in", "p=" + os.path.join(tmp, "x.npy")])
        c.check(r.returncode == 1 and "'p' is a record, read from a .npz archive" in r.stderr,
                cmd + ": a record from a .npy file", "exit %d: %s" % (r.returncode, r.stderr))
        r = c.shardc_run([cmd, PROG, "--fn", "layer_grad", "--out", os.path.join(tmp, "e.npz")] + xy +
                         ["--in", "pp=" + os.path.join(tmp, "p.npz")])
        c.check(r.returncode == 1 and "has no parameter named 'pp'; did you mean 'p'?" in r.stderr,
                cmd + ": an unknown record name, with the nearest", "exit %d: %s" % (r.returncode, r.stderr))
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
