#!/usr/bin/python3
"""The compiler's output does not depend on the C compiler that built it:
every program (the samples, tests/interp/progs, tests/codegen/progs and the
lit programs) dumped at the scheduled stage and compiled to C by two shardc
binaries, the plain one (gcc) and the ASan+UBSan one (clang), must give the
same bytes.  C leaves the order of a call's argument evaluation open, so a
pass that emits an instruction in each of two arguments builds another
program under each compiler: the gradient of gelu once did, and the
scheduled peaks of the remat tests differed between the two builds.

    tests/codegen/check_same_output.py --shardc build/shardc --other build/asan/shardc [--tmp DIR]

Each program is a check; the last line is "N passed, N failed".
"""
import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from tap import Tap  # noqa: E402

PROGRAMS = ["samples/*.tdsl", "tests/interp/progs/*.tdsl", "tests/codegen/progs/*.tdsl", "tests/lit/*/*.tdsl"]


def output(shardc, prog, tmp, tag):
    """The scheduled dump (both streams) and the C and header of `compile`."""
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    dump = subprocess.run([shardc, "dump", prog, "--stage", "scheduled"], capture_output=True, env=env)
    os.makedirs(os.path.join(tmp, tag), exist_ok=True)
    c_path = os.path.join(tmp, tag, "prog.c")       # one name: the C includes its header by it
    comp = subprocess.run([shardc, "compile", prog, "-o", c_path], capture_output=True, env=env)
    code = b""
    for path in (c_path, os.path.splitext(c_path)[0] + ".h"):
        if os.path.exists(path):
            with open(path, "rb") as f:
                code += f.read()
    shutil.rmtree(os.path.join(tmp, tag), ignore_errors=True)
    return dump.returncode, dump.stdout + dump.stderr, comp.returncode, code


def main():
    ap = script_args.new_parser(__doc__, "check-same-output")
    ap.add_argument("--other", required=True, help="a shardc built by another C compiler")
    ap.add_argument("--jobs", type=int, default=2, help="programs compiled at once")
    args = script_args.parse(ap)
    tap = Tap()
    progs = sorted(p for pat in PROGRAMS for p in glob.glob(os.path.join(ROOT, pat)))

    def both(i):
        return output(args.shardc, progs[i], args.tmp, "a%d" % i), output(args.other, progs[i], args.tmp, "b%d" % i)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:   # checked in order
        outputs = pool.map(both, range(len(progs)))
        for prog, (a, b) in zip(progs, outputs):
            name = os.path.relpath(prog, ROOT)
            what = "dump and C" if a[0] == 0 else "diagnostics"
            differs = [k for k, i in (("dump", 1), ("dump status", 0), ("C", 3), ("compile status", 2)) if a[i] != b[i]]
            tap.check(not differs, "%s: the same %s from both builds" % (name, what), "differ: " + ", ".join(differs))
    return tap.summary()


if __name__ == "__main__":
    sys.exit(main())
