#!/usr/bin/python3
"""Programs at the depth and length users run (issue 26): a partitioner crash
at 39 layers went unnoticed because nothing compiled a deep model.

  - every sample compiled whole (`shardc compile`), samples/gpt.tdsl at
    L = 48 and L = 96 (GPT-2 XL's depth and twice it), the others at their
    own sizes, and the issue's tanh RNN (tests/codegen/progs/rnn.tdsl) at
    T = 1000 steps, its value_and_grad step included: with --asan, by the
    ASan+UBSan shardc, so an overflow anywhere in the compiler fails;
  - GPT's train_step at L = 48 on small dims, built and run once on the 2x4
    mesh, against tests/interp/gpt_ref.py's NumPy train_step (f64);
  - the RNN's step at T = 20 with its steps written out
    (tests/lit/scheduled/Inputs/unrolled_rnn.py: chains of collectives, each
    started from another's done) on the threads backend and on MPI, against
    a NumPy backward pass written here: the schedule the runtime once
    rejected ("collectives must be done within 8 of their start order").

--fast (make check-fast) compiles gpt.tdsl at L = 48 and the RNN with the
plain shardc and builds nothing.  Each check is a line; the last is
"N passed, N failed".

    tests/codegen/check_depth.py --shardc build/shardc [--asan build/asan/shardc] [--tmp DIR] [--fast]
"""
import glob
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "interp"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_ref  # noqa: E402
import script_args  # noqa: E402
from tap import Tap  # noqa: E402

RNN = os.path.join(ROOT, "tests", "codegen", "progs", "rnn.tdsl")
UNROLLED_RNN = os.path.join(ROOT, "tests", "lit", "scheduled", "Inputs", "unrolled_rnn.py")
GPT = os.path.join(ROOT, "samples", "gpt.tdsl")
GPT_SMALL = dict(B=2, S=4, D=8, H=4, K=2, F=8, V=8, L=48)
MPI = ["--backend", "mpi", "--np", "2"]


def run(cmd, **kw):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)
    return p, time.time() - t0


def last_lines(p, n=6):
    return " | ".join((p.stdout + p.stderr).strip().splitlines()[-n:])


def compile_whole(tap, shardc, tmp, prog, consts=None, label=None):
    out = os.path.join(tmp, os.path.basename(prog) + (consts or "").replace(",", "_") + ".c")
    cmd = [shardc, "compile", prog, "-o", out] + (["--const", consts] if consts else [])
    p, secs = run(cmd)
    lines = sum(1 for _ in open(out)) if p.returncode == 0 else 0
    tap.check(p.returncode == 0, "compile %s%s: %.1f s, %d lines of C" % (label or os.path.basename(prog),
                                                                          " " + consts if consts else "", secs, lines),
              "exit %d: %s" % (p.returncode, last_lines(p)))


# ---- GPT's train_step at depth ----

def gpt_train_step(tap, shardc, tmp):
    cfg = GPT_SMALL
    rng = np.random.default_rng(3)
    w = gpt_ref.init_weights(rng, cfg, scale=1.0, jitter=0.2)
    v = {k: (rng.standard_normal(a.shape) * 0.01).astype(np.float32) for k, a in w.items()}
    tokens = rng.integers(0, cfg["V"], (cfg["B"], cfg["S"])).astype(np.int32)
    labels = rng.integers(0, cfg["V"], (cfg["B"], cfg["S"])).astype(np.int32)
    inputs = os.path.join(tmp, "gpt_in.npz")
    np.savez(inputs, tokens=tokens, labels=labels, **gpt_ref.as_record(w, "p"), **gpt_ref.as_record(v, "v"))
    loss, nw, nv = gpt_ref.train_step(tokens, labels, {k: a.astype(np.float64) for k, a in w.items()},
                                      {k: a.astype(np.float64) for k, a in v.items()})
    want = [loss] + [nw[k] for k in gpt_ref.NAMES] + [nv[k] for k in gpt_ref.NAMES]
    out = os.path.join(tmp, "gpt_out.npz")
    consts = ",".join("%s=%d" % kv for kv in cfg.items())
    p, secs = run([shardc, "run", GPT, "--fn", "train_step", "--const", consts, "--in", inputs, "--out", out])
    if not tap.check(p.returncode == 0, "gpt train_step L=%d built and run (%.0f s)" % (cfg["L"], secs),
                     last_lines(p)):
        return
    got = np.load(out)
    worst, where = 0.0, ""
    for i, ref in enumerate(want):
        a = got["result%d" % i].astype(np.float64)
        err = np.max(np.abs(a - ref)) / max(1.0, np.max(np.abs(ref)))
        if err > worst:
            worst, where = err, "result %d" % i
    tap.check(worst < 1e-3, "gpt train_step L=%d = NumPy (loss %.4f, largest error %.1e)" % (cfg["L"], loss, worst),
              "largest error %.3e at %s" % (worst, where))


# ---- the RNN, its steps written out ----

def rnn_numpy(h0, w, u, xs):
    """loss = mean((h_T u)^2), h_{t+1} = tanh(h_t w + xs[t]); returns (loss, dw, du)."""
    hs = [h0]
    for x in xs:
        hs.append(np.tanh(hs[-1] @ w + x))
    o = hs[-1] @ u
    do = 2 * o / o.size
    du = hs[-1].T @ do
    dh, dw = do @ u.T, np.zeros_like(w)
    for t in range(len(xs) - 1, -1, -1):
        dz = dh * (1 - hs[t + 1] ** 2)
        dw += hs[t].T @ dz
        dh = dz @ w.T
    return np.mean(o * o), dw, du


def unrolled_rnn(tap, shardc, tmp, T=20):
    prog = os.path.join(tmp, "unrolled_rnn.tdsl")
    with open(prog, "w") as f:
        subprocess.run([sys.executable, UNROLLED_RNN, str(T)], stdout=f, check=True)
    rng = np.random.default_rng(5)
    h0, w, u = rng.standard_normal((8, 16)), 0.3 * rng.standard_normal((16, 16)), rng.standard_normal((16, 16))
    xs = rng.standard_normal((T, 8, 16))
    inputs = os.path.join(tmp, "rnn_in.npz")
    np.savez(inputs, **{k: a.astype(np.float32) for k, a in dict(h0=h0, w=w, u=u, xs=xs).items()})
    want = rnn_numpy(h0, w, u, xs)
    for tag, flags in (("threads", []), ("mpi", MPI)):
        out = os.path.join(tmp, "rnn_out_%s.npz" % tag)
        p, secs = run([shardc, "run", prog, "--fn", "step", "--in", inputs, "--out", out] + flags)
        if not tap.check(p.returncode == 0, "rnn step, %d steps written out, %s: runs (%.0f s)" % (T, tag, secs),
                         last_lines(p)):
            continue
        got = np.load(out)
        err = max(np.max(np.abs(got["result%d" % i] - ref)) / max(1.0, np.max(np.abs(ref)))
                  for i, ref in enumerate(want))
        tap.check(err < 1e-4, "rnn step, %d steps written out, %s = NumPy (largest error %.1e)" % (T, tag, err))


def main():
    ap = script_args.new_parser(__doc__, "check-depth")
    ap.add_argument("--asan", help="an ASan+UBSan shardc for the compiles")
    ap.add_argument("--fast", action="store_true")
    args = script_args.parse(ap)
    tap = Tap()
    compiler = args.asan or args.shardc
    if args.fast:
        compile_whole(tap, compiler, args.tmp, GPT, "L=48")
        compile_whole(tap, compiler, args.tmp, RNN, "T=1000")
        return tap.summary()
    for prog in sorted(glob.glob(os.path.join(ROOT, "samples", "*.tdsl"))):
        for consts in (["L=48", "L=96"] if prog == GPT else [None]):
            compile_whole(tap, compiler, args.tmp, prog, consts)
    compile_whole(tap, compiler, args.tmp, RNN, "T=1000")
    gpt_train_step(tap, args.shardc, args.tmp)
    unrolled_rnn(tap, args.shardc, args.tmp)
    return tap.summary()


if __name__ == "__main__":
    sys.exit(main())
