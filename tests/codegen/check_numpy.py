#!/usr/bin/python3
"""Generated programs against NumPy: every case of the oracle table
(tests/interp/oracles.py: tests/interp/progs, every sample at small sizes,
every partitioning golden program of tests/lit/partitioned), compiled to C
and run on each backend, must compute what NumPy computes.

Meshes: 1, 2, 4 (2x2) and 8 (2x4) devices and an uneven one (3x2, or 3 for
one axis; sizes an fn's dims do not divide, so blocks are padded; an spmd fn's
blocks must divide, so its case gives sizes that fit), as
tests/interp/check_partition.py picks them; a case's `codegen` may name fewer.  A mesh a program cannot take
(`shardc dump --stage scheduled` fails with an error in the program, status
1) is skipped and counted, with the reason in the log.

Each (program, mesh, consts, flags) is built once, one executable of every
fn run with them (`shardc build --fn a,b`, each run naming its fn with
--fn), and each fn run on each of the case's input sets (random, fixed seeds):
`shardc build --backend B` (what `shardc run` does in a temporary directory;
`--backend mpi` where an mpi run needs it, whose executable runs on threads
too, the backend being chosen when it runs), then the executable per input
set: itself on the threads backend, under `mpirun -np P` (2 processes when
the device count is even, else one per device, with `shardc run`'s options)
on the mpi backend.  The threads backend runs every input set (case.runs, 2 by
default; on 2 devices the second with SHARDC_DEVICE_MEMORY=guarded: the
devices' arrays in memory that faults on any host access outside the ABI's
copy calls and the devices' work, docs/backends.md), the mpi backend the
first, on one mesh per case: the uneven one, else the 2x4 one, and only the
fns whose scheduled IR there has a collective or a call (the generated C is
the backends' same C; the transport is tested by tests/runtime on every
mesh and by --layouts on the samples, inputs and outputs across processes
by check_io.py, and an MPI launch costs most of a second: a quarter of the
fns, elementwise ones, initializers, draws, moved nothing between
processes).  The builds are for this machine's
ISA alone (SHARDC_CFLAGS=-march=native, docs/cli.md), not the three ISA
versions of a plain build: a third of the compile time, most of this
check's; tests/codegen/check_run.py, check_training.py and the others
build as users do.
Backends: --backend LIST (comma-separated), or by default threads, and mpi
when the MPI runtime library (libshardc_rt_mpi.a, next to shardc) exists;
a backend that is not available is reported as such, never as passed.

With --sanitize asan or tsan, the generated C (`shardc compile --fn F`) is
compiled with clang -fsanitize=address,undefined (or thread) against the
sanitized libraries in --libs DIR and run on the threads backend on the
8-device mesh (ASan also on the uneven one and on programs without a mesh;
TSan only on programs with a mesh), one input set each; any sanitizer report
or non-zero exit fails the run, and the results must still match NumPy.
Under ASan every run but the uneven mesh's keeps the devices' arrays in
guarded memory, poisoned outside the ABI's copy calls and the devices' work.

With --layouts, every sample's fns on the 8-device mesh run once on the
threads backend (1 process x 8 devices) and on the mpi backend as 1 x 8,
2 x 4, 4 x 2 and 8 x 1 processes x local devices (SHARDC_LOCAL_DEVICES):
each layout must match NumPy and give the threads run's results bit for
bit (collectives reduce in member order whatever the layout; see
docs/runtime.md).

    tests/codegen/check_numpy.py [--shardc build/shardc] [--tmp DIR] [--jobs 2]
        [--backend threads,mpi] [--sanitize asan|tsan --libs DIR] [--only REGEX]
        [--layouts]

Each run of a case on a backend is one check.  Prints one line per failure
and per skip, and ends with "N passed, N failed, N skipped; backends: ...".
A failed run keeps its inputs, and the line says how to run it again.
"""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import threading

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import script_args  # noqa: E402  (beside this file)
sys.path.insert(0, os.path.join(ROOT, "tests", "interp"))
from check_partition import load_results, meshes  # noqa: E402
from oracles import CASES, compare, seed  # noqa: E402

SAN_FLAGS = {"asan": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"],
             "tsan": ["-fsanitize=thread"]}
# Under TSan the programs run with one OpenMP thread per device: the
# OpenMP runtime (clang's libomp) is not instrumented, so TSan sees neither
# its barriers nor its locks and reports races inside it and on the buffers
# a parallel loop's threads write and the device's thread then reads.  With
# OMP_NUM_THREADS=1 no loop enters a parallel region (sk_parallel), and the
# devices' own threads and collectives are what TSan checks.  Even then a
# function with a parallel loop asks libomp for the calling thread's id on
# entry, which registers each device's thread with libomp, and libomp's own
# allocations race in TSan's eyes (seen: 1 run in ~16 with the cores busy);
# ignore_noninstrumented_modules leaves libomp's accesses out.
# tests/codegen/check_threads.py covers the loops on several threads.
SAN_ENV = {"asan": {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"},
           "tsan": {"TSAN_OPTIONS": "halt_on_error=1 exitcode=66 ignore_noninstrumented_modules=1",
                    "OMP_NUM_THREADS": "1"}}
BUILD_TIMEOUT, RUN_TIMEOUT = 300, 180
# As shardc build links: gold reads libdnnl.so's symbols 5x faster than GNU ld.
GOLD = ["-fuse-ld=gold"] if shutil.which("ld.gold") else []


def mpirun(np_):
    """The launcher, as `shardc run --backend mpi` starts it: $MPIRUN or
    mpirun, processes may outnumber cores, shared memory, as root too."""
    return (os.environ.get("MPIRUN") or "mpirun").split() + (["--allow-run-as-root"] if os.geteuid() == 0 else []) \
        + ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "--mca", "pml", "ob1", "-np", str(np_)]


def sh(argv, timeout, env=None):
    """(status, stderr) of a command; a time-out is status 124."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                           env=dict(os.environ, **(env or {})))
        return p.returncode, p.stderr + p.stdout
    except subprocess.TimeoutExpired:
        return 124, "timed out after %d s" % timeout


class Harness:
    def __init__(self, args):
        self.shardc = args.shardc
        self.tmp = args.tmp
        self.sanitize, self.libs = args.sanitize, args.libs and os.path.abspath(args.libs)
        self.layouts = args.layouts
        self.lock = threading.Lock()
        self.passed = self.failed = self.skipped = 0
        self.mesh_cache, self.sched_cache, self.dumps = {}, {}, {}
        self.backends, self.notes = self.pick_backends(args.backend)

    def pick_backends(self, want):
        mpi_lib = os.path.join(os.path.dirname(self.shardc), "libshardc_rt_mpi.a")
        have_mpi = os.path.exists(mpi_lib)
        if self.sanitize:
            return ["threads"], []
        if self.layouts:
            want = "threads,mpi"
        if want == "auto":
            return ["threads"] + (["mpi"] if have_mpi else []), \
                [] if have_mpi else ["mpi: not available, no %s" % os.path.relpath(mpi_lib, ROOT)]
        names = [b for b in want.split(",") if b]
        bad = [b for b in names if b not in ("threads", "mpi")]
        if bad:
            sys.exit("check_numpy.py: unknown backend %s" % ", ".join(bad))
        if "mpi" in names and not have_mpi:
            # Asked for by name: not being able to run it is a failure.
            self.fail("backend mpi", "not available: no %s" % mpi_lib)
            names.remove("mpi")
            return names, ["mpi: not available, no %s" % os.path.relpath(mpi_lib, ROOT)]
        return names, []

    def fail(self, what, msg):
        with self.lock:
            self.failed += 1
            print("FAIL %s: %s" % (what, msg), flush=True)

    def ok(self):
        with self.lock:
            self.passed += 1

    def skip(self, what, why, n=1):
        with self.lock:
            self.skipped += n
            print("SKIP %s: %s" % (what, why), flush=True)

    def mesh_of(self, path):
        """The program's mesh as written: [(axis, size)], [] for one device."""
        if path not in self.mesh_cache:
            st, out = sh([self.shardc, "dump", path, "--stage", "parsed"], 60)
            first = out.splitlines()[0] if st == 0 and out else ""
            self.mesh_cache[path] = [(a, int(n)) for a, n in re.findall(r"(\w+)=(\d+)", first)]
        return self.mesh_cache[path]

    def flags(self, spec, consts, extra=()):
        return (["--mesh", spec] if spec else []) + (["--const", consts] if consts else []) + list(extra)

    def schedulable(self, path, spec, consts, extra=()):
        """None when the program compiles for the mesh; otherwise (skip, why):
        skip for an error in the program (the mesh does not fit it), not
        skip (a failure) for anything else (an internal error, a crash)."""
        key = (path, spec, consts, tuple(extra))
        if key not in self.sched_cache:
            st, err = sh([self.shardc, "dump", path, "--stage", "scheduled"] + self.flags(spec, consts, extra), 120)
            self.dumps[key] = err if st == 0 else ""
            lines = [l for l in err.splitlines() if "error" in l]
            self.sched_cache[key] = None if st == 0 else (st == 1 and bool(lines),
                                                          "status %d: %s" % (st, (lines or [err.strip()])[0][:300]))
        return self.sched_cache[key]

    def talks(self, path, spec, consts, extra, fn):
        """Whether fn's scheduled IR on the mesh moves data between devices:
        a collective, or a call (whose callee may).  Without, an mpi run
        would run the threads run's C with nothing crossing the processes
        but inputs and outputs (check_io.py's subject).  A fn not found
        in the dump counts as talking."""
        text = self.dumps.get((path, spec, consts, tuple(extra)), "")
        for section in re.split(r"\n(?=(?:[a-z]+ )*fn \w+\()", text):
            if re.match(r"(?:[a-z]+ )*fn %s\(" % re.escape(fn), section):
                return bool(re.search(r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|call",
                                      section))
        return True

    def plan(self, only):
        """Groups: (path, spec, consts, flags) -> [(case, fn, k, m, sizes, mpi)],
        one build each: an executable of every fn run on that mesh and
        those consts (`shardc build --fn a,b`), each run naming its fn.  One
        build of a program's fns instead of one per fn: a third of the
        builds, which are most of this check's time."""
        groups = {}
        for case in CASES:
            if only and not re.search(only, "%s %s %s" % (case.name, os.path.relpath(case.prog, ROOT),
                                                          " ".join(case.fns))):
                continue
            if self.layouts and not os.path.relpath(case.prog, ROOT).startswith("samples" + os.sep):
                continue
            axes = self.mesh_of(case.prog)
            names = [a for a, _ in axes]
            specs = meshes(names)
            wanted = specs if case.codegen is None or not names else [specs[i] for i in case.codegen]
            if self.layouts:
                specs = specs[3:4] if names else []
            if self.sanitize:                       # the 8-device mesh; ASan: the uneven one too
                if not names:
                    specs = [None] if self.sanitize == "asan" else []
                else:
                    specs = specs[3:] if self.sanitize == "asan" else specs[3:4]
            specs = [s for s in specs if s in wanted]
            taken = []
            for spec in specs:
                sizes = [int(n) for n in re.findall(r"=(\d+)", spec)] if spec else [n for _, n in axes]
                m = dict(zip(names, sizes))
                consts, extra = case.consts(m), tuple(case.flags(m))
                what = "%s --fn %s%s" % (os.path.relpath(case.prog, ROOT), "/".join(case.fns),
                                         "".join(" " + f for f in self.flags(spec, consts, extra)))
                bad = self.schedulable(case.prog, spec, consts, extra)
                n = len(case.fns) * sum(len(self.backends_for(k, sizes, False)) for k in range(self.runs(case)))
                if bad and bad[0]:
                    self.skip(what, "the program does not take this mesh (%s)" % bad[1], n)
                    continue
                if bad:
                    self.fail(what, "shardc dump --stage scheduled: " + bad[1])
                    continue
                taken.append((spec, sizes, m, consts, extra))
            # The mpi backend runs each case once, on the uneven mesh, else
            # on the 8-device one, each fn whose processes talk there.
            mpi_spec = next((t[0] for t in reversed(taken) if int(np.prod(t[1])) in (3, 6, 8)), None)
            for spec, sizes, m, consts, extra in taken:
                for fn in case.fns:
                    g = groups.setdefault((case.prog, spec, consts, extra), [])
                    mpi = spec == mpi_spec and self.talks(case.prog, spec, consts, extra, fn)
                    g += [(case, fn, k, m, sizes, mpi) for k in range(self.runs(case))]
        return groups

    def backends_for(self, k, sizes, mpi_mesh):
        """The backends that run input set k on a mesh of `sizes`: all the
        first on the case's mpi mesh (mpi_mesh), threads the others; with
        --layouts, threads and then mpi in each layout."""
        if self.layouts:
            return ["threads"] + ["mpi:%d" % p for p in LAYOUTS if "mpi" in self.backends]
        return [b for b in self.backends if b == "threads" or (k == 0 and mpi_mesh)]

    def guarded(self, backend, k, sizes):
        """Whether a run's devices keep their arrays in guarded memory
        (SHARDC_DEVICE_MEMORY=guarded, docs/backends.md): under ASan (where
        it poisons, at little cost) every threads run but the uneven mesh's,
        which keeps ASan's own redzones around the driver's blocks;
        otherwise the second input set on 2 devices (each bracket is two
        mprotect calls: on more devices they would double this check's
        time)."""
        if backend != "threads" or self.sanitize == "tsan":
            return False
        if self.sanitize == "asan":
            return 3 not in sizes
        return k == 1 and int(np.prod(sizes)) == 2

    def runs(self, case):
        return 1 if self.sanitize or self.layouts else case.runs

    def build(self, d, path, fns, flags, backend):
        """An executable of the fns for the backend, or (None, why)."""
        exe = os.path.join(d, "prog-" + backend)
        fn = ",".join(fns)
        if not self.sanitize:
            st, err = sh([self.shardc, "build", path, "--fn", fn, "--backend", backend, "-o", exe] + flags,
                         BUILD_TIMEOUT, {"SHARDC_CFLAGS": os.environ.get("SHARDC_CFLAGS", "-march=native")})
            return (exe, None) if st == 0 else (None, "shardc build: status %d: %s" % (st, err.strip()[:600]))
        src = os.path.join(d, "prog.c")
        st, err = sh([self.shardc, "compile", path, "--fn", fn, "-o", src] + flags, BUILD_TIMEOUT)
        if st:
            return None, "shardc compile: status %d: %s" % (st, err.strip()[:600])
        # -O0: clang compiles a large program's C with ASan seven times
        # faster than at -O1 -g (gpt's train_step: 0.9 against 7.4 s), and
        # the small inputs run about as fast; every access is still checked.
        cmd = ["clang", "-std=c11", "-O0", "-g", "-fopenmp"] + SAN_FLAGS[self.sanitize] + [
            "-I" + os.path.join(ROOT, "runtime"), "-I" + os.path.join(ROOT, "lib"), "-o", exe, src,
            os.path.join(self.libs, "libshardc_lib.a"), os.path.join(self.libs, "libshardc_rt.a"),
            "-ldnnl", "-lopenblas", "-lm", "-pthread"] + GOLD
        st, err = sh(cmd, BUILD_TIMEOUT)
        return (exe, None) if st == 0 else (None, "clang: status %d: %s" % (st, err.strip()[:600]))

    def launch(self, backend, exe, ndev):
        """The command line that runs exe on the backend: itself, or under
        mpirun with `shardc run --backend mpi`'s options (docs/cli.md;
        $MPIRUN replaces mpirun), as 2 processes of ndev / 2 devices when
        ndev is even, else one process per device (mpi:P: P processes of
        ndev / P devices).  Two processes cross the process boundary as
        eight do, and start in half the time (0.6 against 1.2 s here);
        --layouts runs every layout."""
        if backend == "threads":
            return [exe]
        np_ = int(backend.split(":")[1]) if ":" in backend else 2 if ndev % 2 == 0 else ndev
        return mpirun(np_) + ["-x", "SHARDC_LOCAL_DEVICES=%d" % (ndev // np_), exe]

    def group(self, i, key, items):
        path, spec, consts, extra = key
        flags = self.flags(spec, consts, extra)
        fns = list(dict.fromkeys(item[1] for item in items))
        d = os.path.join(self.tmp, "g%d" % i)
        os.makedirs(d)
        # One build for both backends: with MPI when a run needs it, which
        # the same executable then runs on threads too (the backend is
        # chosen when it runs, lib/host/backend.c).
        used = {b.split(":")[0] for _, _, k, _, sizes, mm in items for b in self.backends_for(k, sizes, mm)}
        built = self.build(d, path, fns, flags, "mpi" if "mpi" in used else "threads")
        exes = {b: built for b in used}
        kept = False
        for case, fn, k, m, sizes, mpi_mesh in items:
            what = "%s --fn %s%s" % (os.path.relpath(path, ROOT), fn, "".join(" " + f for f in flags))
            label = "%s (case '%s', input %d)" % (what, case.name, k)
            made = case.make(np.random.default_rng(seed(case.name, *sizes, k)), m)
            if made is None:
                self.skip(label, "the case does not apply to this mesh", len(self.backends_for(k, sizes, mpi_mesh)))
                continue
            inputs, wants = made
            run_dir = os.path.join(d, "in%d-%s-%s" % (k, re.sub(r"\W", "_", case.name), fn))
            os.makedirs(run_dir, exist_ok=True)
            ins = []
            for name, a in inputs.items():
                f = os.path.join(run_dir, name + ".npy")
                np.save(f, a)
                ins += ["--in", "%s=%s" % (name, f)]
            first = None                        # --layouts: the threads run's results
            for backend in self.backends_for(k, sizes, mpi_mesh):
                guarded = self.guarded(backend, k, sizes)
                tag = backend + ("+" + self.sanitize if self.sanitize else "") + ("+guarded" if guarded else "")
                out = os.path.join(run_dir, "out-" + backend.replace(":", "-"))
                exe, why = exes[backend.split(":")[0]]
                if exe is None:
                    self.fail("[%s] %s" % (tag, label), why)
                    kept = True
                    continue
                argv = self.launch(backend, exe, int(np.prod(sizes))) + ["--fn", fn] + ins + ["--out", out]
                env = dict(SAN_ENV[self.sanitize]) if self.sanitize else {}
                if guarded:
                    env["SHARDC_DEVICE_MEMORY"] = "guarded"
                if backend.startswith("mpi"):
                    # Each mpirun keeps its session files apart (concurrent
                    # jobs otherwise collide there now and then), and one
                    # that fails to start (orte_init) is tried once more:
                    # that is the launcher, not the program.
                    env["OMPI_MCA_orte_tmpdir_base"] = os.path.join(run_dir, "mpi-session")
                    os.makedirs(env["OMPI_MCA_orte_tmpdir_base"], exist_ok=True)
                st, err = sh(argv, RUN_TIMEOUT, env)
                if backend.startswith("mpi") and st != 0 and "orte_init failed" in err:
                    st, err = sh(argv, RUN_TIMEOUT, env)
                msg = self.judge(st, err, out, wants, case)
                if self.layouts and not msg:
                    msg, first = same_bits(first, load_results(out), backend)
                if msg:
                    self.fail("[%s] %s" % (tag, label), "%s\n    again: %s%s" % (
                        msg, "SHARDC_DEVICE_MEMORY=guarded " if guarded else "", " ".join(argv)))
                    kept = True
                else:
                    self.ok()
                shutil.rmtree(out, ignore_errors=True)
            if not kept:
                shutil.rmtree(run_dir, ignore_errors=True)
        if not kept:
            shutil.rmtree(d, ignore_errors=True)

    def judge(self, st, err, out, wants, case):
        """None for a run that matches the oracle, else why not."""
        report = [l for l in err.splitlines() if "Sanitizer" in l or "runtime error" in l]
        if report:
            return "sanitizer report: %s" % " | ".join(report[:3])
        if st == -11:
            return "segmentation fault (with SHARDC_DEVICE_MEMORY=guarded: the host touched device memory)" \
                ": %s" % err.strip()[-600:]
        if st:
            return "status %d: %s" % (st, err.strip()[-600:])
        got = load_results(out)
        if len(got) != len(wants):
            return "%d results, want %d" % (len(got), len(wants))
        bad = []
        for r, (g, (w, dt)) in enumerate(zip(got, wants)):
            ok, detail = compare(g, w, dt, case.exact, case.scaled)
            if not ok:
                bad.append("result %d: %s" % (r, detail))
        return "; ".join(bad) or None


LAYOUTS = (1, 2, 4, 8)                      # --layouts: processes on the 8-device mesh


def same_bits(first, got, backend):
    """(why the results differ from the first run's bit for bit, or None;
    the first run's results)."""
    if first is None:
        return None, got
    for r, (a, b) in enumerate(zip(first, got)):
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            n = int(np.sum(a.view(np.uint8) != b.view(np.uint8))) if a.shape == b.shape else -1
            return "result %d: %s differs from the threads run's bits (%d bytes)" % (r, backend, n), first
    return None, first


def main():
    ap = script_args.new_parser(__doc__, "check-numpy")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--backend", default="auto", help="threads,mpi (default: threads, and mpi when built)")
    ap.add_argument("--sanitize", choices=["asan", "tsan"])
    ap.add_argument("--libs", help="with --sanitize: the folder of the sanitized libshardc_lib.a and libshardc_rt.a")
    ap.add_argument("--only", help="only the cases whose name, program or fns match this regular expression")
    ap.add_argument("--layouts", action="store_true",
                    help="samples on the 8-device mesh in every layout of processes x devices, bitwise")
    args = script_args.parse(ap)
    if args.sanitize and not args.libs:
        ap.error("--sanitize needs --libs")
    h = Harness(args)
    groups = h.plan(args.only)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = [(key, pool.submit(h.group, i, key, items)) for i, (key, items) in enumerate(groups.items())]
        for key, f in futs:
            try:
                f.result()
            except Exception as e:                  # a broken case is a failure, not a crash
                h.fail("%s --fn %s" % (os.path.relpath(key[0], ROOT), key[1]), "%s: %s" % (type(e).__name__, e))
    print("%d passed, %d failed, %d skipped; backends: %s" % (
        h.passed, h.failed, h.skipped, ", ".join(h.backends + h.notes) + (" +" + h.sanitize if h.sanitize else "")))
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
