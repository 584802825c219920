#!/usr/bin/python3
"""Generation with a KV cache (samples/gpt.tdsl, prefill and decode_step):
`shardc run --fn prefill` over a prompt of P tokens, then `shardc run --fn
decode_step --steps N` from its results (each step writes the token's keys
and values into the caches at the run-time position pos, its logits into
hist[pos] and the greedy next token into seq[:, pos + 1]), on the threads
backend on two meshes (X=2,Y=2: the batch and the heads split; X=1,Y=4).
Against NumPy (f64, tests/interp/gpt_ref.py's layers): the full causal
forward over the generated sequence must give the logits each step kept
(positions P-1 .. P+N-1, within 1e-3 of their largest element); each
generated token is the argmax of its step's logits; the prompt is kept; pos
ends at P + N.

    tests/codegen/check_decode.py [--shardc build/shardc] [--tmp DIR]

Prints one line per check and ends with "N passed, N failed".
"""
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import script_args  # noqa: E402  (beside this file)
sys.path.insert(0, os.path.join(ROOT, "tests", "interp"))
import gpt_ref  # noqa: E402
from check_ops import Checker  # noqa: E402

SAMPLE = os.path.join(ROOT, "samples", "gpt.tdsl")
CFG = dict(B=4, S=8, D=16, H=4, K=4, F=32, V=24, L=2)
CONST = ",".join("%s=%d" % kv for kv in CFG.items())
P, N = 3, 4                      # prompt length, generated tokens: P + N < S
MESHES = ["X=2,Y=2", "X=1,Y=4"]
TOL = 1e-3
STATE = ["seq", "pos", "kc", "vc", "hist"]      # prefill's results, decode_step's carried parameters


def forward_logits(seq, w):
    """The full forward's logits [B, S, V] over seq, in f64 (gpt's layers)."""
    w = {k: a.astype(np.float64) for k, a in w.items()}
    x = w["wte"][np.clip(seq, 0, CFG["V"] - 1)] + w["wpe"][None]
    for layer in range(CFG["L"]):
        x, _ = gpt_ref.block(x, {k: w[k][layer] for k in gpt_ref.LAYER})
    h, _ = gpt_ref.layernorm(x, w["lnf_g"], w["lnf_b"])
    return h @ w["w_vocab"]


def run(c, args, label):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    c.check(label + " runs", p.returncode == 0, "exit %d: %s" % (p.returncode, (p.stderr or p.stdout)[-800:]))
    return p.returncode == 0


def check_mesh(c, shardc, tmp, mesh, w, prompt):
    d = os.path.join(tmp, mesh.replace(",", "_").replace("=", ""))
    os.makedirs(d)
    inputs = dict(gpt_ref.as_record(w), tokens=prompt, n=np.array(P, np.int32))     # p: Gpt
    np.savez(os.path.join(d, "prefill.npz"), **inputs)
    base = [shardc, "run", SAMPLE, "--const", CONST, "--mesh", mesh]
    if not run(c, base + ["--fn", "prefill", "--in", os.path.join(d, "prefill.npz"), "--out", os.path.join(d, "pre")],
               "prefill " + mesh):
        return
    state = {k: np.load(os.path.join(d, "pre", "result%d.npy" % i)) for i, k in enumerate(STATE)}
    np.savez(os.path.join(d, "decode.npz"), **gpt_ref.as_record(w), **state)
    if not run(c, base + ["--fn", "decode_step", "--steps", str(N), "--in", os.path.join(d, "decode.npz"),
                          "--out", os.path.join(d, "out")], "decode_step --steps %d %s" % (N, mesh)):
        return
    seq, pos, hist = (np.load(os.path.join(d, "out", k + ".npy")) for k in ("seq", "pos", "hist"))
    c.check("pos ends at P + N " + mesh, int(pos) == P + N, "pos %d" % int(pos))
    c.check("the prompt is kept " + mesh, np.array_equal(seq[:, :P], prompt[:, :P]), "seq %r" % seq)
    want = forward_logits(seq, w)
    for t in range(P - 1, P + N):
        got = hist[t]
        err = float(np.abs(got - want[:, t]).max() / max(1.0, float(np.abs(want[:, t]).max())))
        c.check("logits at position %d = the full forward %s" % (t, mesh), err <= TOL, "differs by %.2e" % err)
        c.check("token at position %d is the argmax %s" % (t + 1, mesh),
                np.array_equal(seq[:, t + 1], got.argmax(-1)), "%r, argmax %r" % (seq[:, t + 1], got.argmax(-1)))


def main():
    ap = script_args.new_parser(__doc__, "check-decode")
    args = script_args.parse(ap)
    c = Checker(args.shardc, args.tmp)
    rng = np.random.default_rng(7)
    w = gpt_ref.init_weights(rng, CFG, 1.0, 0.1)
    prompt = rng.integers(0, CFG["V"], (CFG["B"], CFG["S"])).astype(np.int32)   # past P: ignored
    for mesh in MESHES:
        check_mesh(c, c.shardc, c.tmp, mesh, w, prompt)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 0 if c.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
