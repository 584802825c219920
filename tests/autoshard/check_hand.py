#!/usr/bin/python3
"""The hand-written shardings of bench/auto/ compute what the samples do.

bench/auto/ holds, for samples/mlp.tdsl, train_mlp.tdsl (sgd_dp),
gpt.tdsl (train_step) and moe.tdsl, the data-parallel, Megatron and FSDP
forms (and moe's expert-parallel one): the sample with only its shardings
changed, which `make bench` (bench/report.py, section l) times against the
plan `--auto` chooses.  For each form this runs the form's fn with the
reference interpreter on the 2x4 mesh (`interp --stage partitioned`: one
simulated memory per device) and the sample's fn unpartitioned (`--stage
parsed`), on the same random inputs at small sizes, and compares every
result; it also checks from the scheduled dump that each form sends what
its sharding implies (SEND_NOTHING: nothing, the others something).

    tests/autoshard/check_hand.py [--shardc build/shardc] [--tmp DIR] [--only REGEX]

Prints one line per check and ends with "N passed, N failed".
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "codegen"))
import script_args  # noqa: E402

# (name, sample, fn of the sample, small consts, integer inputs' bound,
#  [(form, file under bench/auto, fn)])
PROGRAMS = [
    ("mlp", "samples/mlp.tdsl", "mlp", "B=16,D=16,F=32", 0,
     [("dp", "mlp_dp", "mlp"), ("megatron", "mlp_megatron", "mlp"), ("fsdp", "mlp_fsdp", "mlp")]),
    ("train_mlp", "samples/train_mlp.tdsl", "sgd_dp", "B=32,D=8,H=16,O=8", 0,
     [("dp", "train_mlp_dp", "sgd_dp"), ("megatron", "train_mlp_megatron", "sgd_dp"),
      ("fsdp", "train_mlp_fsdp", "sgd_dp")]),
    ("gpt", "samples/gpt.tdsl", "train_step", "B=8,S=8,D=16,H=4,K=4,F=32,V=16,L=2", 16,
     [("dp", "gpt_dp", "train_step"), ("megatron", "gpt_megatron", "train_step"), ("fsdp", "gpt_fsdp", "train_step")]),
    ("moe", "samples/moe.tdsl", "moe", "E=8,S=32,D=16,F=32", 8,
     [("dp", "moe_dp", "moe"), ("megatron", "moe_megatron", "moe"), ("fsdp", "moe_fsdp", "moe"),
      ("expert", "moe_expert", "moe")]),
]
MESH = "X=2,Y=4"
# The forms that need no collective: forward passes whose every output
# block is computed from the device's own tokens and replicated (or
# column-split) weights.  Every other form, and every training step, sends.
SEND_NOTHING = ("mlp/dp", "moe/dp", "moe/megatron")


def shardc_out(shardc, args):
    p = subprocess.run([shardc] + args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("shardc %s failed:\n%s" % (" ".join(args), p.stderr[-2000:]))
    return p.stdout


def inputs(shardc, sample, fn, const, ints, work, rng):
    """Random .npy files for fn's parameters (record fields one by one):
    --in flags."""
    out = shardc_out(shardc, ["dump", sample, "--stage", "partitioned", "--fn", fn, "--const", const, "--mesh", MESH])
    sig = [l for l in out.splitlines() if l.startswith("partitioned fn %s(" % fn)][0].split(" -> ")[0]
    flags = []
    for name, dtype, dims in re.findall(r"([\w.]+): (\w+)\[([\d,]*)\]", sig):
        shape = tuple(int(x) for x in dims.split(",") if x)
        if dtype == "i32":
            a = rng.integers(0, ints, shape).astype(np.int32)
        else:
            a = (rng.standard_normal(shape) * (0.3 if len(shape) > 1 else 1.0)).astype(np.float32)
        path = os.path.join(work, "in-%s.npy" % name)
        np.save(path, a)
        flags += ["--in", "%s=%s" % (name, path)]
    return flags


def results(shardc, prog, fn, const, stage, ins, out):
    shutil.rmtree(out, ignore_errors=True)
    shardc_out(shardc, ["interp", prog, "--fn", fn, "--const", const, "--mesh", MESH, "--stage", stage,
                        "--out", out] + ins)
    return {f: np.load(os.path.join(out, f)) for f in sorted(os.listdir(out)) if f.endswith(".npy")}


def sent(shardc, prog, fn, const):
    out = shardc_out(shardc, ["dump", prog, "--stage", "scheduled", "--fn", fn, "--const", const, "--mesh", MESH])
    m = re.search(r"with the fns it calls: \d+ collectives, (\d+) bytes", out)
    if m:
        return int(m.group(1))
    return int(re.search(r"total bytes sent per device by \S+: (\d+)", out).group(1))


def main():
    ap = script_args.new_parser(__doc__, "/tmp/shardc-check-hand")
    ap.add_argument("--only", default="", help="a regex over 'program/form'")
    args = script_args.parse(ap)
    passed = failed = 0
    for name, sample, fn, const, ints, forms in PROGRAMS:
        todo = [f for f in forms if re.search(args.only, "%s/%s" % (name, f[0]))]
        if not todo:
            continue
        work = os.path.join(args.tmp, name)
        os.makedirs(work)
        rng = np.random.default_rng(7)
        sample = os.path.join(ROOT, sample)
        ins = inputs(args.shardc, sample, fn, const, ints, work, rng)
        want = results(args.shardc, sample, fn, const, "parsed", ins, os.path.join(work, "want"))
        for form, file, ffn in todo:
            what = "%s/%s" % (name, form)
            prog = os.path.join(ROOT, "bench", "auto", file + ".tdsl")
            try:
                got = results(args.shardc, prog, ffn, const, "partitioned", ins, os.path.join(work, form))
                if sorted(got) != sorted(want):
                    raise RuntimeError("results %s, the sample's %s" % (sorted(got), sorted(want)))
                for k in want:
                    err = float(np.max(np.abs(got[k] - want[k]), initial=0) / max(1.0, float(np.max(np.abs(want[k]), initial=0))))
                    if not err < 1e-4:
                        raise RuntimeError("%s differs from the sample's by %.1e (relative)" % (k, err))
                s = sent(args.shardc, prog, ffn, const)
                if (s == 0) != (what in SEND_NOTHING):
                    raise RuntimeError("sends %d bytes per device" % s)
                print("ok %s: %d results = the sample's, %d bytes sent per device" % (what, len(want), s))
                passed += 1
            except (RuntimeError, subprocess.SubprocessError, OSError) as e:
                print("FAIL %s: %s" % (what, e))
                failed += 1
    shutil.rmtree(args.tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
