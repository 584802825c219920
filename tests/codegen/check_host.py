#!/usr/bin/python3
"""A host program linked against an installed shardc (docs/codegen.md,
"Linking a host program"; tests/run-tests step 3 runs it on the prefix that
`make install` wrote):

- the generated C of samples/mlp.tdsl (B=7, D=5, F=10 on its 2x4 mesh: B
  and F split unevenly, so parameters and results are padded) and its
  header compile with nothing but `-I PREFIX/include`, under gcc and clang
  -std=c11 -Wall -Wextra -Werror;
- samples/host/mlp_host.c builds with `pkg-config --cflags --libs shardc`
  (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig), and with shardc-mpi when the MPI
  backend is installed;
- on MPI (mpirun -np 2), both processes print the results of the threads
  run: every process gets the results, not process 0 only;
- it runs: each of its calls of shardc_mlp_global through one session
  (inputs changing from call to call) gives NumPy's MLP within 1e-5, and
  its call without a session gives the last session call's result.

    tests/codegen/check_host.py --prefix PREFIX [--tmp DIR]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, D, F, STEPS = 7, 5, 10, 3
WARN = ["-std=c11", "-Wall", "-Wextra", "-Werror"]


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what, detail=""):
        n = self.passed + self.failed + 1
        if ok:
            self.passed += 1
            print(f"ok {n} - {what}")
        else:
            self.failed += 1
            print(f"not ok {n} - {what}")
            if detail:
                print("  " + detail.strip().replace("\n", "\n  ")[:3000])
        return ok


def run(cmd, env=None, cwd=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def pkg_config(env, name):
    rc, out, err = run(["pkg-config", "--cflags", "--libs", name], env=env)
    return (out.split() if rc == 0 else None), err


def mlp(x, w_in, w_out):
    """samples/mlp.tdsl in float64: gelu's tanh form, which the kernels use."""
    h = x.astype(np.float64) @ w_in.astype(np.float64)
    a = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    return a @ w_out.astype(np.float64)


def load(d, name, shape):
    return np.fromfile(os.path.join(d, name), dtype=np.float32).reshape(shape)


def check_results(c, d):
    w_in, w_out = load(d, "w_in.f32", (D, F)), load(d, "w_out.f32", (F, D))
    for k in range(STEPS):
        x, out = load(d, f"x.{k}.f32", (B, D)), load(d, f"out.{k}.f32", (B, D))
        want = mlp(x, w_in, w_out)
        err = np.max(np.abs(out - want) / (1 + np.abs(want)))
        c.check(err <= 1e-5, f"session call {k}: shardc_mlp_global = NumPy's MLP (max error {err:.2e})",
                f"got\n{out}\nwant\n{want}")
    last, once = load(d, f"out.{STEPS - 1}.f32", (B, D)), load(d, "out.once.f32", (B, D))
    c.check(np.allclose(once, last, rtol=1e-6, atol=1e-6), "the call without a session = the session's",
            f"{once}\n{last}")


def check_mpi(c, exe, threads_out):
    """mlp_host on MPI, 2 processes of 4 devices: every process gets the
    results (sc_world_share), so both print the threads run's lines."""
    argv = ["mpirun"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + \
        ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "--mca", "pml", "ob1", "-np", "2", exe]
    rc, out, err = run(argv)
    lines = sorted(l for l in out.splitlines() if l.startswith("call "))
    want = sorted(l for l in threads_out.splitlines() if l.startswith("call ")) * 2
    c.check(rc == 0 and len(lines) == 2 * STEPS and lines == sorted(want),
            "mlp_host on MPI (2 processes): every process prints the threads run's results",
            "status %d: %r %r" % (rc, out[-400:], err[-400:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--tmp", default="build/check-host")
    args = ap.parse_args()
    prefix, tmp = os.path.abspath(args.prefix), os.path.abspath(args.tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "out"))
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    c = Checks()

    src = os.path.join(tmp, "mlp.c")
    rc, _, err = run([os.path.join(prefix, "bin", "shardc"), "compile", os.path.join(ROOT, "samples", "mlp.tdsl"),
                      "--const", f"B={B},D={D},F={F}", "-o", src])
    if not c.check(rc == 0, "shardc compile samples/mlp.tdsl -o mlp.c", err):
        print(f"{c.passed} passed, {c.failed} failed")
        return 1
    host = os.path.join(ROOT, "samples", "host", "mlp_host.c")
    for cc in ("gcc", "clang"):
        rc, _, err = run([cc] + WARN + ["-fsyntax-only", "-I" + prefix + "/include", "-I" + tmp, "-include",
                                        os.path.join(tmp, "mlp.h"), src])
        c.check(rc == 0, f"{cc}: the generated C and mlp.h compile with -I PREFIX/include alone", err)
        rc, _, err = run([cc] + WARN + ["-fsyntax-only", "-I" + prefix + "/include", "-I" + tmp, host])
        c.check(rc == 0, f"{cc}: mlp_host.c compiles with -I PREFIX/include alone", err)

    flags, err = pkg_config(env, "shardc")
    c.check(flags is not None and "-I" + prefix + "/include" in flags and "-lshardc_lib" in flags,
            "pkg-config --cflags --libs shardc: " + " ".join(flags or []), err)
    exe = os.path.join(tmp, "mlp_host")
    if flags is not None:
        rc, _, err = run(["cc"] + WARN + ["-O2", "-I" + tmp, host, src, "-o", exe] + flags)
        c.check(rc == 0, "cc mlp_host.c mlp.c $(pkg-config --cflags --libs shardc)", err)
    if os.path.exists(os.path.join(prefix, "lib", "libshardc_rt_mpi.a")):
        mflags, err = pkg_config(env, "shardc-mpi")
        rc, _, err = run(["cc"] + WARN + ["-O2", "-I" + tmp, host, src, "-o", exe + "_mpi"] + (mflags or [])) \
            if mflags else (1, "", err)
        c.check(rc == 0, "cc mlp_host.c mlp.c $(pkg-config --cflags --libs shardc-mpi)", err)

    out = ""
    if os.path.exists(exe):
        out_dir = os.path.join(tmp, "out")
        rc, out, err = run([exe, out_dir])
        if c.check(rc == 0 and out.count("call ") == STEPS, "mlp_host runs", out + err):
            check_results(c, out_dir)
    if os.path.exists(exe + "_mpi") and shutil.which("mpirun"):
        check_mpi(c, exe + "_mpi", out)
    print(f"{c.passed} passed, {c.failed} failed")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
