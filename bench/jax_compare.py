#!/usr/bin/python3
"""bench/jax_compare.py: shardc against JAX's CPU backend on a 16-device mesh.

The MLP, attention and collective-matmul samples at the sizes below, built
by `shardc build` for 16 threads-backend devices and timed with the built
programs' --repeat (the device phase: best of 7 after a warm-up run), against
the same global math and shardings under jax.jit with 16 forced host
devices (XLA_FLAGS=--xla_force_host_platform_device_count=16), and on one
JAX device; best of 7 after compiling.  Results are checked against each
other (largest difference relative to the largest magnitude).  Timings are
informative; the exit status is nonzero only when something fails to run
or results disagree.

  bench/jax_compare.py prepare DIR [--build BUILD]   build the programs into DIR,
                                                     with the shared libraries
                                                     they need (xz-compressed)
  bench/jax_compare.py run DIR                       run them and JAX, print the table
  bench/jax_compare.py all DIR [--build BUILD]       both, on one machine

`prepare` needs shardc; `run` needs NumPy, and JAX for the JAX columns (it
says so and leaves them out when JAX cannot be imported).  The two halves
let the programs be built on one machine and run on another (the
16-core device machine has JAX but no compiler toolchain for shardc).
"""
import argparse
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPEAT = 7

# name, sample, fn, constants, mesh, parameters (name, shape, scale) and the
# JAX partition specs of the parameters and the result.
CASES = [
    ("mlp", "mlp.tdsl", "mlp", "B=2048,D=4096,F=16384", (4, 4),
     [("x", (2048, 4096), 1.0), ("w_in", (4096, 16384), 0.02), ("w_out", (16384, 4096), 0.02)],
     [("X", None), (None, "Y"), ("Y", None)], ("X", None)),
    ("attention", "attention.tdsl", "attention", "B=16,S=512,D=1024,H=16,K=64", (4, 4),
     [("x", (16, 512, 1024), 1.0), ("wq", (1024, 16, 64), 0.03), ("wk", (1024, 16, 64), 0.03),
      ("wv", (1024, 16, 64), 0.03), ("wo", (16, 64, 1024), 0.03)],
     [("X", None, None), (None, "Y", None), (None, "Y", None), (None, "Y", None), ("Y", None, None)],
     ("X", None, None)),
    ("collective_matmul (spmd fn)", "collective_matmul.tdsl", "collective_matmul", "B=2048,D=8192,F=16384", (2, 8),
     [("lhs", (2048, 8192), 1.0), ("rhs", (8192, 16384), 0.02)], [("X", "Y"), (None, "Y")], ("X", "Y")),
    ("collective_matmul (fn)", "collective_matmul.tdsl", "matmul", "B=2048,D=8192,F=16384", (2, 8),
     [("lhs", (2048, 8192), 1.0), ("rhs", (8192, 16384), 0.02)], [("X", "Y"), (None, "Y")], ("X", "Y")),
]

SYSTEM_LIBS = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "ld-linux", "linux-vdso")


def log(msg=""):
    print(msg, flush=True)


def prog_name(case):
    return re.sub(r"[^a-z0-9]+", "_", case[0]).strip("_")


def prepare(out, build):
    shardc = os.path.join(build, "shardc")
    os.makedirs(os.path.join(out, "lib"), exist_ok=True)
    libs = set()
    for case in CASES:
        name, sample, fn, const, (x, y) = case[:5]
        prog = os.path.join(out, prog_name(case))
        subprocess.run([shardc, "build", os.path.join(ROOT, "samples", sample), "--fn", fn, "--const", const,
                        "--mesh", "X=%d,Y=%d" % (x, y), "-o", prog], check=True)
        ldd = subprocess.run(["ldd", prog], capture_output=True, text=True, check=True).stdout
        for m in re.finditer(r"=> (/\S+)", ldd):
            if not any(s in m.group(1) for s in SYSTEM_LIBS):
                libs.add(m.group(1))
        log("built %s" % prog)
    for path in sorted(libs):   # what the programs load, for a machine that lacks it
        dst = os.path.join(out, "lib", os.path.basename(path) + ".xz")
        with open(path, "rb") as f, lzma.open(dst, "wb", preset=6) as g:
            shutil.copyfileobj(f, g)
        log("packed %s" % path)


def unpack_libs(d):
    libdir = os.path.join(d, "lib")
    for f in os.listdir(libdir) if os.path.isdir(libdir) else []:
        if f.endswith(".xz") and not os.path.exists(os.path.join(libdir, f[:-3])):
            with lzma.open(os.path.join(libdir, f)) as g, open(os.path.join(libdir, f[:-3]), "wb") as h:
                shutil.copyfileobj(g, h)
    return libdir


def make_inputs(d):
    import numpy as np
    rng = np.random.default_rng(0)
    for case in CASES:
        for pname, shape, scale in case[5]:
            path = os.path.join(d, "in", "%s_%s.npy" % (prog_name(case), pname))
            if not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                np.save(path, (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)))


def run_shardc(d, case, env):
    import numpy as np
    name = prog_name(case)
    ins = []
    for pname, _, _ in case[5]:
        ins += ["--in", "%s=%s" % (pname, os.path.join(d, "in", "%s_%s.npy" % (name, pname)))]
    out = os.path.join(d, "out", name)
    p = subprocess.run([os.path.join(d, name)] + ins + ["--out", out, "--repeat", str(REPEAT)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError("%s failed: %s" % (name, p.stderr[-2000:]))
    m = re.search(r"time: best ([\d.e+-]+) s, median ([\d.e+-]+) s", p.stderr)
    k = re.search(r"kernels: (.*)", p.stderr)
    return float(m.group(1)), float(m.group(2)), np.load(os.path.join(out, "result0.npy")), k.group(1) if k else "?"


def jax_side(d, mode):
    """Runs in a child whose XLA_FLAGS were set before JAX was imported."""
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    def mlp(x, wi, wo):
        return jax.nn.gelu(x @ wi) @ wo

    def attention(x, wq, wk, wv, wo):
        q = jnp.einsum("bsd,dhk->bshk", x, wq)
        k = jnp.einsum("btd,dhk->bthk", x, wk)
        v = jnp.einsum("btd,dhk->bthk", x, wv)
        p = jax.nn.softmax(jnp.einsum("bshk,bthk->bhst", q, k) * 0.125, axis=-1)
        return jnp.einsum("bshk,hke->bse", jnp.einsum("bhst,bthk->bshk", p, v), wo)

    fns = {"mlp": mlp, "attention": attention, "matmul": lambda a, b: a @ b,
           "collective_matmul": lambda a, b: a @ b}
    res = {"jax": jax.__version__, "devices": len(jax.devices())}
    for case in CASES:
        name = prog_name(case)
        host = [np.load(os.path.join(d, "in", "%s_%s.npy" % (name, p[0]))) for p in case[5]]
        f = fns[case[2]]
        if mode == "cpu16":
            try:      # automatic (GSPMD) sharding of intermediates, as shardc's propagation
                mesh = jax.make_mesh(case[4], ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
            except (AttributeError, TypeError):   # JAX before explicit axis types
                mesh = jax.make_mesh(case[4], ("X", "Y"))
            args = [jax.device_put(a, NamedSharding(mesh, P(*s))) for a, s in zip(host, case[6])]
            jf = jax.jit(f, out_shardings=NamedSharding(mesh, P(*case[7])))
        else:
            args = [jax.device_put(a) for a in host]
            jf = jax.jit(f)
        out = jf(*args)
        jax.block_until_ready(out)
        ts = []
        for _ in range(REPEAT):
            t = time.perf_counter()
            jax.block_until_ready(jf(*args))
            ts.append(time.perf_counter() - t)
        np.save(os.path.join(d, "out", "jax_%s_%s.npy" % (mode, name)), np.asarray(out))
        res[name] = (min(ts), sorted(ts)[len(ts) // 2])
    print("JAXRESULT " + json.dumps(res), flush=True)


def run_jax(d, mode):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if mode == "cpu16":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=16").strip()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "jax-" + mode, d], capture_output=True,
                       text=True, env=env, timeout=1800)
    m = re.search(r"^JAXRESULT (.*)$", p.stdout, re.M)
    if not m:
        raise RuntimeError("JAX (%s) failed: %s" % (mode, (p.stderr or p.stdout)[-2000:]))
    return json.loads(m.group(1))


def rel_diff(a, b):
    import numpy as np
    return float(np.abs(a.astype(np.float64) - b).max() / max(1e-30, float(np.abs(b).max())))


def run_all(d):
    import numpy as np
    make_inputs(d)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = unpack_libs(d) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    os.makedirs(os.path.join(d, "out"), exist_ok=True)
    log("machine: %s, %d cores" % (cpu_model(), os.cpu_count() or 1))
    shardc, kernels = {}, "?"
    for case in CASES:
        best, med, out, kernels = run_shardc(d, case, env)
        shardc[prog_name(case)] = (best, med, out)
        log("shardc %-28s best %.4f s, median %.4f s" % (case[0], best, med))
    log("shardc kernels: %s" % kernels)
    jax = {}
    try:
        import jax as _  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
        log("JAX is not importable here: no JAX columns (pip install jax to get them)")
    if have_jax:
        for mode in ("cpu16", "cpu1"):
            jax[mode] = run_jax(d, mode)
            log("JAX %s (%s, %d devices) done" % (jax[mode]["jax"], mode, jax[mode]["devices"]))
    rows, bad = [], []
    for case in CASES:
        name = prog_name(case)
        best, med, out = shardc[name]
        row = [case[0], "%s, mesh %dx%d" % (case[3], case[4][0], case[4][1]), "%.3f s" % best]
        if jax:
            j16, j1 = jax["cpu16"][name][0], jax["cpu1"][name][0]
            ref = np.load(os.path.join(d, "out", "jax_cpu16_%s.npy" % name))
            err = rel_diff(out, ref)
            if not err < 1e-4:
                bad.append("%s: shardc and JAX differ by %.1e" % (case[0], err))
            row += ["%.3f s" % j16, "%.3f s" % j1, "%.2f" % (j16 / best), "%.0e" % err]
        rows.append(row)
    head = ["program", "sizes", "shardc, 16 devices"]
    if jax:
        head += ["JAX %s CPU, 16 devices" % jax["cpu16"]["jax"], "JAX, 1 device", "JAX 16 / shardc",
                 "difference"]
    log("")
    log("| " + " | ".join(head) + " |")
    log("|" + " --- |" * len(head))
    for r in rows:
        log("| " + " | ".join(r) + " |")
    log("\nbest of %d runs each after a warm-up; \"JAX 16 / shardc\" > 1 means shardc is faster." % REPEAT)
    for b in bad:
        log("ERROR: " + b)
    return 1 if bad else 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    if len(sys.argv) == 3 and sys.argv[1] in ("jax-cpu16", "jax-cpu1"):
        jax_side(sys.argv[2], sys.argv[1][4:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("prepare", "run", "all"))
    ap.add_argument("dir")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    d = os.path.abspath(a.dir)
    if a.step in ("prepare", "all"):
        prepare(d, os.path.abspath(a.build))
    return run_all(d) if a.step in ("run", "all") else 0


if __name__ == "__main__":
    sys.exit(main())
