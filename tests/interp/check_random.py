#!/usr/bin/python3
"""The distributions of shardc's random numbers (docs/language.md#random-numbers)
against their definitions, statistically: 10^5 draws of each in
tests/interp/random_stats.tdsl, run by the reference interpreter on the global
program and partitioned on a 2x2 mesh (the same values: each device draws its
own block), then their means and variances within 5 standard errors, the
Kolmogorov-Smirnov distance to the CDF below 1.95 / sqrt(n) (p = 0.001), a
chi-square of randint's counts, and every bit of the raw bits fair.  The key
and so the outcome are fixed: a failure is a wrong distribution, not chance.

    tests/interp/check_random.py [--shardc build/shardc] [--tmp DIR]

Prints PASS/FAIL per check and ends with "N passed, N failed".
"""
import glob
import math
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "codegen"))
import script_args  # noqa: E402
PROG = os.path.join(HERE, "random_stats.tdsl")


def phi(x):
    return 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, np.float64) / math.sqrt(2)))


def ks(x, cdf):
    """Kolmogorov-Smirnov distance of sample x to the CDF."""
    x = np.sort(np.asarray(x, np.float64).ravel())
    n, f = len(x), cdf(x)
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what):
        print("%s %s" % ("PASS" if ok else "FAIL", what))
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def moments(self, name, x, mean, var):
        n = x.size
        m, v = float(np.mean(x, dtype=np.float64)), float(np.var(x, dtype=np.float64))
        self.check(abs(m - mean) <= 5 * math.sqrt(var / n), "%s: mean %.5f, want %.5f" % (name, m, mean))
        # The variance's standard error from the fourth moment of the sample.
        m4 = float(np.mean((x.astype(np.float64) - m) ** 4))
        self.check(abs(v - var) <= 5 * math.sqrt(max(m4 - v * v, 1e-30) / n), "%s: variance %.5f, want %.5f" % (name, v, var))

    def ks(self, name, x, cdf):
        d = ks(x, cdf)
        self.check(d < 1.95 / math.sqrt(x.size), "%s: Kolmogorov-Smirnov distance %.5f" % (name, d))


def main():
    ap = script_args.new_parser(__doc__, "/tmp/shardc-check-random")
    args = script_args.parse(ap)
    key = os.path.join(args.tmp, "k.npy")
    np.save(key, np.array([0x2545F491, 0x4F6CDD1D], np.uint32))
    c = Checks()
    runs = []
    for stage in ("parsed", "partitioned"):
        out = os.path.join(args.tmp, stage)
        for f in glob.glob(os.path.join(out, "*.npy")):
            os.remove(f)
        r = subprocess.run([args.shardc, "interp", PROG, "--fn", "stats", "--stage", stage, "--in", "k=" + key,
                            "--out", out], capture_output=True, text=True)
        c.check(r.returncode == 0, "interp --stage %s%s" % (stage, (": " + r.stderr.strip()) if r.returncode else ""))
        if r.returncode:
            break
        runs.append([np.load(os.path.join(out, "result%d.npy" % i)) for i in range(7)])
    if len(runs) == 2:
        c.check(all(np.array_equal(a, b) for a, b in zip(*runs)), "partitioned on 2x2 = global, bit for bit")
        u32, u64, z, t, b, r, bits = runs[0]
        for name, u in (("uniform f32", u32), ("uniform f64", u64)):
            c.check(u.min() >= 0 and u.max() < 1, "%s in [0, 1)" % name)
            c.moments(name, u, 0.5, 1 / 12)
            c.ks(name, u, lambda x: np.clip(x, 0, 1))
        c.moments("normal", z, 0.0, 1.0)
        c.ks("normal", z, phi)
        lo, hi = -1.0, 2.0
        pa, pb = phi(lo), phi(hi)
        c.check(t.min() > lo and t.max() < hi, "truncated normal inside (-1, 2)")
        c.ks("truncated normal", t, lambda x: (phi(x) - pa) / (pb - pa))
        c.moments("bernoulli(0.3)", b.astype(np.float64), 0.3, 0.21)
        counts = np.bincount((r + 3).ravel(), minlength=10)
        c.check(r.min() >= -3 and r.max() < 7 and len(counts) == 10, "randint in [-3, 7)")
        e = r.size / 10
        chi2 = float(np.sum((counts - e) ** 2 / e))
        c.check(chi2 < 33.7, "randint: chi-square %.2f of 10 values (9 dof, p = 0.0001 at 33.7)" % chi2)
        ones = [(bits >> np.uint32(j) & np.uint32(1)).mean() for j in range(32)]
        worst = max(abs(o - 0.5) for o in ones)
        c.check(worst <= 5 * 0.5 / math.sqrt(bits.size), "random_bits: every bit fair (worst %.5f off)" % worst)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
