#!/usr/bin/python3
"""Training end to end (docs/grad.md, "Training"): the samples' training steps
run many times in one process with `shardc run --steps N`, on generated data,
against the same training in NumPy (f64).

  - samples/train_mlp.tdsl: an MLP regressor, y = sin(x A), trained with
    SGD with momentum (sgd_dp, data parallel) and with Adam (adam_fsdp,
    FSDP), 300 steps;
  - samples/gpt.tdsl's train_step: a small GPT on token sequences that follow
    a rule (tests/interp/gpt_ref.py), 200 steps; and at GPT-2 XL's depth,
    48 layers on tiny dims, 40 steps;
  - tests/codegen/progs/rnn.tdsl's train: a tanh RNN of 1000 time steps (a
    loop that stays a loop, its gradient a reverse loop) fitted to targets
    by gradient descent, 60 steps, against backpropagation written here.

Each run must learn (its last loss below the stated fraction of its first)
and match NumPy: every printed loss and the last one within 1e-3 (absolute,
or relative where the loss is above 1), the final parameters within 1e-3 of
their largest element.  The mixed-precision steps (adam_dp_bf16,
train_step_bf16: bf16 compute, f32 weights) are held to the same f32
training in NumPy within bf16's tolerances: every loss within 3% (relative,
down to losses of 1e-3), the final parameters within 2e-2 of their largest
element; measured: 1.6% and 9e-3 for the MLP over 300 steps, 0.4% and 1e-3
for the GPT over 200.  Each run is on the threads backend and on MPI (two
processes of two devices); each check is a line, and the last line is
"N passed, N failed".

    tests/codegen/check_training.py [--shardc build/shardc] [--tmp DIR] [--only REGEX]
"""
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "interp"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
import gpt_ref  # noqa: E402
from check_ops import Checker  # noqa: E402
from oracles import adam, mlp_grads, sgd_momentum  # noqa: E402

MESH = "X=2,Y=2"
MPIRUN = ["--backend", "mpi", "--np", "2"]
F32 = dict(loss=1e-3, floor=1.0, params=1e-3)      # loss within loss * max(floor, |want|)
BF16 = dict(loss=3e-2, floor=1e-3, params=2e-2)

# ---- the MLP regressor ----

MLP_CONST = dict(B=64, D=8, H=32, O=4)
MLP_NAMES = ["w1", "b1", "w2", "b2"]


def mlp_inputs(rng, adam_state):
    b, d, h, o = (MLP_CONST[k] for k in "BDHO")
    x = rng.standard_normal((b, d))
    y = np.sin(x @ (rng.standard_normal((d, o)) / np.sqrt(d)))
    ws = [rng.standard_normal((d, h)) * 0.5 / np.sqrt(d), np.zeros(h), rng.standard_normal((h, o)) * 0.5 / np.sqrt(h),
          np.zeros(o)]
    inputs = {"x": x, "y": y}                  # the records p, m and v by their fields (p.w1, ...)
    inputs.update(zip(["p." + n for n in MLP_NAMES], ws))
    for pre in (("m.", "v.") if adam_state else ("v.",)):
        inputs.update({pre + n: np.zeros_like(w) for n, w in zip(MLP_NAMES, ws)})
    if adam_state:
        inputs["t"] = np.zeros(())
    return {k: np.asarray(v, np.float32) for k, v in inputs.items()}


def mlp_train(inputs, steps, optimizer):
    """Per-step losses and the final state by name, in f64."""
    st = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    losses = []
    for _ in range(steps):
        ws = [st["p." + n] for n in MLP_NAMES]
        loss, gs = mlp_grads(st["x"], st["y"], *ws)
        losses.append(loss)
        if optimizer == "sgd":
            ws, vs = sgd_momentum(ws, [st["v." + n] for n in MLP_NAMES], gs)
            st.update(zip(["v." + n for n in MLP_NAMES], vs))
        else:
            ws, ms, vs, st["t"] = adam(ws, [st["m." + n] for n in MLP_NAMES], [st["v." + n] for n in MLP_NAMES], gs,
                                       st["t"])
            st.update(zip(["m." + n for n in MLP_NAMES], ms))
            st.update(zip(["v." + n for n in MLP_NAMES], vs))
        st.update(zip(["p." + n for n in MLP_NAMES], ws))
    return np.array(losses), {k: a for k, a in st.items() if k not in ("x", "y")}   # what the steps carry


def mlp_case(fn, optimizer, steps=300, learn=0.3, tol=F32):
    def make():
        inputs = mlp_inputs(np.random.default_rng(7), optimizer == "adam")
        losses, final = mlp_train(inputs, steps, optimizer)
        return inputs, losses, final
    const = ",".join("%s=%d" % kv for kv in MLP_CONST.items())
    return ("train_mlp " + fn, os.path.join(ROOT, "samples", "train_mlp.tdsl"), fn, const, steps, learn, make, tol)


# ---- the GPT ----

GPT_CFG = gpt_ref.TRAIN_CFG


# GPT-2 XL's depth on tiny dims: 48 layers, a loss that falls slowly.
GPT_DEEP_CFG = dict(B=2, S=4, D=8, H=4, K=2, F=8, V=8, L=48)


def gpt_case(cfg=GPT_CFG, steps=200, learn=0.5, name="gpt train_step", fn="train_step", tol=F32):
    def make():
        inputs = gpt_ref.train_inputs(np.random.default_rng(1), cfg)
        losses, w, v = gpt_ref.train(cfg, inputs, steps)
        final = gpt_ref.as_record(w, "p")
        final.update(gpt_ref.as_record(v, "v"))
        return inputs, losses, final
    const = ",".join("%s=%d" % kv for kv in cfg.items())
    return (name, os.path.join(ROOT, "samples", "gpt.tdsl"), fn, const, steps, learn, make, tol)


# ---- the tanh RNN (tests/codegen/progs/rnn.tdsl), a 1000-step loop ----

RNN_CONST = dict(B=8, D=16, T=1000)
RNN_LR = 0.2


def rnn_fit_grads(h0, w, u, xs, y):
    """loss = mean((h_T u - y)^2), h_{t+1} = tanh(h_t w + xs[t]); (loss, dw, du) by backpropagation."""
    hs = [h0]
    for x in xs:
        hs.append(np.tanh(hs[-1] @ w + x))
    r = hs[-1] @ u - y
    do = 2 * r / r.size
    du, dh, dw = hs[-1].T @ do, do @ u.T, np.zeros_like(w)
    for t in range(len(xs) - 1, -1, -1):
        dz = dh * (1 - hs[t + 1] ** 2)
        dw += hs[t].T @ dz
        dh = dz @ w.T
    return np.mean(r * r), dw, du


def rnn_case(steps=60, learn=0.5):
    def make():
        rng = np.random.default_rng(11)
        b, d, t = RNN_CONST["B"], RNN_CONST["D"], RNN_CONST["T"]
        inputs = dict(h0=rng.standard_normal((b, d)), w=rng.standard_normal((d, d)) * 0.5 / np.sqrt(d),
                      u=rng.standard_normal((d, d)) / np.sqrt(d), xs=rng.standard_normal((t, b, d)) * 0.5,
                      y=rng.standard_normal((b, d)) * 0.5)
        inputs = {k: np.asarray(a, np.float32) for k, a in inputs.items()}
        w, u = inputs["w"].astype(np.float64), inputs["u"].astype(np.float64)
        losses = []
        for _ in range(steps):
            loss, dw, du = rnn_fit_grads(*(inputs[k].astype(np.float64) for k in ("h0",)), w, u,
                                         inputs["xs"].astype(np.float64), inputs["y"].astype(np.float64))
            losses.append(loss)
            w, u = w - RNN_LR * dw, u - RNN_LR * du
        return inputs, np.array(losses), {"w": w, "u": u}
    const = ",".join("%s=%d" % kv for kv in RNN_CONST.items())
    return ("rnn train T=1000", os.path.join(ROOT, "tests", "codegen", "progs", "rnn.tdsl"), "train", const, steps,
            learn, make, F32)


CASES = [mlp_case("sgd_dp", "sgd"), mlp_case("adam_fsdp", "adam"), mlp_case("adam_dp_bf16", "adam", tol=BF16),
         gpt_case(), gpt_case(name="gpt train_step_bf16", fn="train_step_bf16", tol=BF16),
         gpt_case(GPT_DEEP_CFG, steps=40, learn=0.9, name="gpt train_step L=48"), rnn_case()]

# ---- running and judging ----


class Trainer(Checker):
    """check_ops.py's checker (a line and a count per check), with a training run."""

    def train(self, case, backend_flags, tag):
        name, sample, fn, const, steps, learn, make, tol = case
        inputs, want_losses, want_final = make()
        d = os.path.join(self.tmp, re.sub(r"\W+", "_", name + "_" + tag))
        os.makedirs(d)
        args = [self.shardc, "run", sample, "--fn", fn, "--const", const, "--mesh", MESH, "--steps", str(steps),
                "--log-every", str(steps // 4), "--out", os.path.join(d, "out")] + backend_flags
        for k, a in inputs.items():
            path = os.path.join(d, k + ".npy")
            np.save(path, a)
            args += ["--in", "%s=%s" % (k, path)]
        p = subprocess.run(args, capture_output=True, text=True, timeout=900)
        label = "%s (%s)" % (name, tag)
        if p.returncode != 0:
            self.check(label + " runs", False, "exit %d: %s" % (p.returncode, (p.stderr or p.stdout)[-800:]))
            return
        printed = [(int(s), float(v)) for s, v in re.findall(r"^step (\d+): loss (\S+)", p.stdout, re.M)]
        self.check(label + " prints the loss", len(printed) >= 4, "printed: %r" % p.stdout[-400:])
        def near(v, want):
            return abs(v - want) <= tol["loss"] * max(tol["floor"], abs(want))
        for s, v in printed:
            want = want_losses[s - 1]
            self.check("%s step %d loss" % (label, s), near(v, want), "%.6f, NumPy %.6f" % (v, want))
        last = float(np.load(os.path.join(d, "out", "result0.npy")))
        self.check(label + " last loss", near(last, want_losses[-1]), "%.6f, NumPy %.6f" % (last, want_losses[-1]))
        self.check(label + " learns", last < learn * want_losses[0],
                   "last loss %.4f is not below %.2f of the first, %.4f" % (last, learn, want_losses[0]))
        worst, where = 0.0, ""
        for k, want in want_final.items():
            path = os.path.join(d, "out", k + ".npy")
            if not os.path.exists(path):
                self.check(label + " writes " + k, False, "no %s" % path)
                continue
            err = float(np.abs(np.load(path) - want).max() / max(1.0, float(np.abs(want).max())))
            if err > worst:
                worst, where = err, k
        self.check(label + " final parameters", worst <= tol["params"], "%s differs by %.2e" % (where, worst))


def main():
    ap = script_args.new_parser(__doc__, "check-training")
    ap.add_argument("--only", help="only the cases whose name matches this regex")
    args = script_args.parse(ap)
    c = Trainer(args.shardc, args.tmp)
    mpi = script_args.has_mpi(args.shardc)
    for case in CASES:
        if args.only and not re.search(args.only, case[0]):
            continue
        c.train(case, [], "threads")
        if mpi:
            c.train(case, MPIRUN, "mpi 2x2")
        else:
            c.check(case[0] + " (mpi)", False, "the MPI backend was not built: run tools/install-deps")
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
