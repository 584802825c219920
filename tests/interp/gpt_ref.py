#!/usr/bin/python3
"""NumPy (f64) reference of samples/gpt.tdsl: the `gpt` loss, its gradient
with respect to all 18 weights by a backward pass written by hand, and
`train_step` (SGD with momentum 0.9, learning rate 0.1).  Written from the
sample's source, independently of shardc's gradient pass.

Semantics kept exactly as the sample writes them: layernorm's eps 1e-5 with
the mean over D and rsqrt; the attention's scale 0.125 whatever K is; the
causal mask -1e9 added for t > s; softmax and log-sum-exp with the max
subtracted; gelu as the kernel library computes it,
x / (1 + exp(-1.5957691216057308 (x + 0.044715 x^3))); the loss
sum over b, s of (lse - picked) / (B S); gathers clamp their indices.

    /usr/bin/python3 tests/interp/gpt_ref.py            # self-test
    /usr/bin/python3 tests/interp/gpt_ref.py --train [DIR]   # the training measurement
                                                 # (DIR: its inputs and losses as .npy)

The self-test compares every weight's hand-written gradient with central
differences on a tiny config, prints the largest relative error (per weight:
max |g - fd| / max |fd|) and exits 1 if it exceeds 1e-6.
"""
import sys

import numpy as np

# The 18 weights, in the order of gpt's and train_step's parameters (and of
# train_step's results); the per-layer ones are stacked over L.
NAMES = ["wte", "wpe", "ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "bo", "ln2_g", "ln2_b", "w_in", "b_in", "w_out",
         "b_out", "lnf_g", "lnf_b", "w_vocab"]
LAYER = NAMES[2:15]


def field(k, rec="p"):
    """The sample's parameter name of weight k in its record rec (train_step's
    p or v: a Gpt, the per-layer weights in its `layers`): p.wte, v.layers.wq."""
    return "%s.%s%s" % (rec, "layers." if k in LAYER else "", k)


def as_record(w, rec="p"):
    """Weights by name as the fields of record rec, by parameter name."""
    return {field(k, rec): a for k, a in w.items()}

EPS, SCALE, MASK = 1e-5, 0.125, -1e9
GELU_C, GELU_A = 1.5957691216057308, 0.044715      # 2 sqrt(2 / pi); the cubic's coefficient


def shapes(cfg):
    B, S, D, H, K, F, V, L = (cfg[k] for k in "B S D H K F V L".split())
    return dict(wte=(V, D), wpe=(S, D), ln1_g=(L, D), ln1_b=(L, D), wq=(L, D, H, K), wk=(L, D, H, K),
                wv=(L, D, H, K), wo=(L, H, K, D), bo=(L, D), ln2_g=(L, D), ln2_b=(L, D), w_in=(L, D, F),
                b_in=(L, F), w_out=(L, F, D), b_out=(L, D), lnf_g=(D,), lnf_b=(D,), w_vocab=(D, V))


# ---- layers: each forward returns (output, cache), each backward takes the
# output's cotangent and the cache and returns the inputs' cotangents ----

def layernorm(x, g, b):
    xc = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + EPS)
    xhat = xc * r
    return xhat * g + b, (xhat, r, g)


def layernorm_back(dy, cache):
    xhat, r, g = cache
    lead = tuple(range(dy.ndim - 1))
    dxhat = dy * g
    # xhat is centred and of unit mean square: its Jacobian projects out the
    # mean and the component along xhat, then scales by r.
    dx = r * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, (dy * xhat).sum(lead), dy.sum(lead)


def causal_mask(n):
    return np.where(np.arange(n)[None, :] > np.arange(n)[:, None], MASK, 0.0)     # [s, t]: t > s


def attention(x, wq, wk, wv, wo, bo):
    q, k, v = (np.einsum("bsd,dhk->bshk", x, w) for w in (wq, wk, wv))
    logits = np.einsum("bshk,bthk->bhst", q, k) * SCALE + causal_mask(x.shape[1]).astype(x.dtype)
    e = np.exp(logits - logits.max(3, keepdims=True))
    p = e / e.sum(3, keepdims=True)
    o = np.einsum("bhst,bthk->bshk", p, v)
    return np.einsum("bshk,hke->bse", o, wo) + bo, (x, q, k, v, p, o, wq, wk, wv, wo)


def attention_back(dy, cache):
    x, q, k, v, p, o, wq, wk, wv, wo = cache
    dwo, dbo = np.einsum("bshk,bse->hke", o, dy), dy.sum((0, 1))
    do = np.einsum("bse,hke->bshk", dy, wo)
    dp = np.einsum("bshk,bthk->bhst", do, v)
    dv = np.einsum("bhst,bshk->bthk", p, do)
    # softmax: dlogits = p (dp - sum_t p dp); the max subtracted and the mask
    # are constants for it (p is 0 where masked, so no gradient gets there).
    dlogits = p * (dp - (p * dp).sum(3, keepdims=True))
    dq = np.einsum("bhst,bthk->bshk", dlogits, k) * SCALE
    dk = np.einsum("bhst,bshk->bthk", dlogits, q) * SCALE
    dx = sum(np.einsum("bshk,dhk->bsd", dz, w) for dz, w in ((dq, wq), (dk, wk), (dv, wv)))
    dws = [np.einsum("bsd,bshk->dhk", x, dz) for dz in (dq, dk, dv)]
    return dx, dws + [dwo, dbo]


def gelu(h):
    return h / (1 + np.exp(-GELU_C * (h + GELU_A * h ** 3)))


def gelu_back(h):
    """d gelu / dh: gelu(h) = h sig(u), u = c (h + a h^3)."""
    sig = 1 / (1 + np.exp(-GELU_C * (h + GELU_A * h ** 3)))
    return sig + h * sig * (1 - sig) * GELU_C * (1 + 3 * GELU_A * h * h)


def mlp(x, w_in, b_in, w_out, b_out):
    h = x @ w_in + b_in
    a = gelu(h)
    return a @ w_out + b_out, (x, h, a, w_in, w_out)


def mlp_back(dy, cache):
    x, h, a, w_in, w_out = cache
    dh = (dy @ w_out.T) * gelu_back(h)
    return dh @ w_in.T, [np.einsum("bsd,bsf->df", x, dh), dh.sum((0, 1)), np.einsum("bsf,bse->fe", a, dy),
                         dy.sum((0, 1))]


def block(x, p):
    """p: one layer's weights by name (LAYER).  Both residuals pre-layernorm."""
    n1, c1 = layernorm(x, p["ln1_g"], p["ln1_b"])
    a, ca = attention(n1, p["wq"], p["wk"], p["wv"], p["wo"], p["bo"])
    x1 = x + a
    n2, c2 = layernorm(x1, p["ln2_g"], p["ln2_b"])
    m, cm = mlp(n2, p["w_in"], p["b_in"], p["w_out"], p["b_out"])
    return x1 + m, (c1, ca, c2, cm)


def block_back(dy, cache):
    """dx and the layer's weights' gradients by name."""
    c1, ca, c2, cm = cache
    dn2, (dw_in, db_in, dw_out, db_out) = mlp_back(dy, cm)
    dx1, dln2_g, dln2_b = layernorm_back(dn2, c2)
    dx1 = dx1 + dy                                           # the residual
    dn1, (dwq, dwk, dwv, dwo, dbo) = attention_back(dx1, ca)
    dx, dln1_g, dln1_b = layernorm_back(dn1, c1)
    grads = [dln1_g, dln1_b, dwq, dwk, dwv, dwo, dbo, dln2_g, dln2_b, dw_in, db_in, dw_out, db_out]
    return dx + dx1, dict(zip(LAYER, grads))


def cross_entropy(logits, labels):
    """Mean over b, s of lse - logits[label]; and d loss / d logits."""
    n = labels.size
    peak = logits.max(-1, keepdims=True)
    e = np.exp(logits - peak)
    lse = np.log(e.sum(-1)) + peak[..., 0]
    lab = np.clip(labels, 0, logits.shape[-1] - 1)[..., None]
    picked = np.take_along_axis(logits, lab, -1)[..., 0]
    # softmax minus the one-hot label; the max cancels out of lse's gradient
    dlogits = e / e.sum(-1, keepdims=True)
    np.put_along_axis(dlogits, lab, np.take_along_axis(dlogits, lab, -1) - 1, -1)
    return (lse - picked).sum() / n, dlogits / n


# ---- the model ----

def loss_and_grads(tokens, labels, w, grads=True):
    """gpt's loss, and (with grads) d loss / d each weight, by name.  w: the
    18 weights by name, f64."""
    tok = np.clip(tokens, 0, w["wte"].shape[0] - 1)
    x = w["wte"][tok] + w["wpe"][None]
    caches = []
    for layer in range(w["ln1_g"].shape[0]):
        x, c = block(x, {k: w[k][layer] for k in LAYER})
        caches.append(c)
    h, cf = layernorm(x, w["lnf_g"], w["lnf_b"])
    loss, dlogits = cross_entropy(h @ w["w_vocab"], labels)
    if not grads:
        return loss, None
    g = {"w_vocab": np.einsum("bsd,bsv->dv", h, dlogits)}
    dx, g["lnf_g"], g["lnf_b"] = layernorm_back(dlogits @ w["w_vocab"].T, cf)
    layers = []
    for c in reversed(caches):
        dx, gl = block_back(dx, c)
        layers.append(gl)
    layers.reverse()
    for k in LAYER:
        g[k] = np.stack([gl[k] for gl in layers])
    g["wte"] = np.zeros_like(w["wte"])
    np.add.at(g["wte"], tok, dx)                            # each token's row gets its positions' sums
    g["wpe"] = dx.sum(0)
    return loss, g


def train_step(tokens, labels, w, v, lr=0.1, mu=0.9):
    """(loss, new weights, new velocities): v = mu v + g; w = w - lr v."""
    loss, g = loss_and_grads(tokens, labels, w)
    nv = {k: mu * v[k] + g[k] for k in NAMES}
    return loss, {k: w[k] - lr * nv[k] for k in NAMES}, nv


def train(cfg, inputs, steps, lr=0.1, dtype=np.float64):
    """`steps` train_steps from inputs (train_step's parameters by name:
    tokens, labels and the records p and v: p.wte, v.layers.wq, ...), each feeding its new weights
    and velocities to the next, as `shardc run --steps N` does.  Returns the
    per-step losses (each step's loss, before its update) and the final
    weights and velocities by name.  dtype=np.float32 runs the steps in f32,
    as the sample does (to see how far rounding moves the trajectory)."""
    assert inputs[field("wte")].shape == shapes(cfg)["wte"]
    w = {k: np.asarray(inputs[field(k, "p")], dtype) for k in NAMES}
    v = {k: np.asarray(inputs[field(k, "v")], dtype) for k in NAMES}
    losses = []
    for _ in range(steps):
        loss, w, v = train_step(inputs["tokens"], inputs["labels"], w, v, dtype(lr), dtype(0.9))
        losses.append(loss)
    return np.array(losses), w, v


# ---- weights and data ----

def init_weights(rng, cfg, scale=1.0, jitter=0.0):
    """Matrices normal with std scale / sqrt(fan-in) (the dims a product sums
    over), so that each product keeps its input's size; the embeddings with
    std scale / 2.  Layernorm gains 1, shifts and biases 0, each plus
    `jitter` times a normal.  As float32, the dtype train_step's inputs have."""
    sh, D, F, H, K = shapes(cfg), cfg["D"], cfg["F"], cfg["H"], cfg["K"]
    fan_in = dict(wq=D, wk=D, wv=D, wo=H * K, w_in=D, w_out=F, w_vocab=D, wte=1, wpe=1)
    w = {}
    for k, s in sh.items():
        if k in fan_in:
            std = scale / np.sqrt(fan_in[k]) * (0.5 if k in ("wte", "wpe") else 1.0)
            w[k] = rng.standard_normal(s) * std
        else:
            w[k] = (1.0 if k.endswith("_g") else 0.0) + jitter * rng.standard_normal(s)
    return {k: a.astype(np.float32) for k, a in w.items()}


def learnable_data(rng, cfg, strides=(1, 3)):
    """Tokens that follow a rule: row b counts from a random start a_b in
    steps of c_b (one of `strides`) mod V; labels are the next tokens.  From
    s >= 1 the previous token tells c_b, so all but the first position can
    be predicted exactly."""
    B, S, V = cfg["B"], cfg["S"], cfg["V"]
    a = rng.integers(0, V, (B, 1))
    c = rng.choice(strides, (B, 1))
    s = np.arange(S + 1)[None]
    seq = (a + s * c) % V
    return seq[:, :-1].astype(np.int32), seq[:, 1:].astype(np.int32)


def train_inputs(rng, cfg, scale=0.3):
    """train_step's inputs: learnable data, fresh weights (small: the first
    loss is near log V), zero velocities."""
    tokens, labels = learnable_data(rng, cfg)
    w = init_weights(rng, cfg, scale)
    inputs = dict(tokens=tokens, labels=labels, **as_record(w, "p"))
    inputs.update(as_record({k: np.zeros_like(a) for k, a in w.items()}, "v"))
    return inputs


# ---- self-test: the backward pass against central differences ----

def self_test(h=1e-5):
    cfg = dict(B=2, S=5, D=8, H=2, K=3, F=12, V=7, L=2)
    rng = np.random.default_rng(0)
    w = {k: a.astype(np.float64) for k, a in init_weights(rng, cfg, scale=2.0, jitter=0.3).items()}
    tokens = rng.integers(0, cfg["V"], (cfg["B"], cfg["S"])).astype(np.int32)
    labels = rng.integers(0, cfg["V"], (cfg["B"], cfg["S"])).astype(np.int32)
    tokens[0, 1], labels[1, 2] = cfg["V"] + 3, -2            # out of range: clamped
    loss, g = loss_and_grads(tokens, labels, w)
    worst = 0.0
    for k in NAMES:
        x, fd = w[k], np.zeros_like(w[k])
        for i in np.ndindex(x.shape):
            old = x[i]
            x[i] = old + h
            up = loss_and_grads(tokens, labels, w, grads=False)[0]
            x[i] = old - h
            down = loss_and_grads(tokens, labels, w, grads=False)[0]
            x[i] = old
            fd[i] = (up - down) / (2 * h)
        err = np.abs(g[k] - fd).max() / np.abs(fd).max()
        worst = max(worst, err)
        print("%-8s %-14s |g| max %.3e  rel err %.2e" % (k, x.shape, np.abs(fd).max(), err))
    print("loss %.6f; max relative error %.3e" % (loss, worst))
    return 0 if worst <= 1e-6 else 1


TRAIN_CFG = dict(B=8, S=16, D=16, H=2, K=8, F=32, V=16, L=2)


def measure(cfg=TRAIN_CFG, steps=200, seed=1, every=10, save=None):
    """Train on learnable data from fresh weights (the loss starts near
    log V); print the loss every `every` steps and when it first falls below
    log V / 2, 0.1 and 0.01.  save: a directory for train_step's inputs
    (NAME.npy, for `shardc run --steps`) and the losses (losses.npy)."""
    inputs = train_inputs(np.random.default_rng(seed), cfg)
    losses, _, _ = train(cfg, inputs, steps)
    if save:
        import os
        os.makedirs(save, exist_ok=True)
        for k, a in list(inputs.items()) + [("losses", losses)]:
            np.save(os.path.join(save, k + ".npy"), a)
    for i in range(0, steps, every):
        print("step %4d loss %.6f" % (i, losses[i]))
    print("cfg %s, lr 0.1, momentum 0.9, seed %d: loss %.4f (log V = %.4f) -> %.6f after %d steps"
          % (cfg, seed, losses[0], np.log(cfg["V"]), losses[-1], steps))
    for level in (np.log(cfg["V"]) / 2, 0.1, 0.01):
        below = np.nonzero(losses < level)[0]
        print("  first below %.4f at step %s" % (level, below[0] if below.size else "never"))
    # The same steps in f32: how far rounding alone moves the losses.
    l32, _, _ = train(cfg, inputs, steps, dtype=np.float32)
    print("  in f32: losses differ by at most %.1e (relative %.1e)"
          % (np.abs(l32 - losses).max(), (np.abs(l32 - losses) / losses).max()))
    return losses


if __name__ == "__main__":
    if "--train" in sys.argv:
        at = sys.argv.index("--train")
        measure(save=sys.argv[at + 1] if len(sys.argv) > at + 1 else None)
        sys.exit(0)
    sys.exit(self_test())
