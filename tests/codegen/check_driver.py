#!/usr/bin/python3
"""`shardc run` owns the program it starts (docs/cli.md, "Exit status"),
each point a check on a long run (tests/codegen/progs/steps.tdsl's momentum
with --steps 2000000000, a private TMPDIR):

- the program killed by SIGSEGV (sent to it): shardc says "the program was
  killed by SIGSEGV (Segmentation fault)" with how to debug it, exits
  128 + 11, and leaves no temporary folder;
- SIGTERM, SIGINT and SIGHUP to shardc: the program is stopped, shardc dies
  by the same signal, the temporary folder is removed, --out has nothing;
- `timeout 2 shardc run ...`: status 124, no process, no temporary folder;
  on MPI too (`timeout 4`): mpirun and its ranks gone, and mpirun was told
  to keep OpenMPI's session folder inside shardc's (which an mpirun stopped
  as its ranks start may leave behind: $TMPDIR/ompi.HOST.UID, seen once);
- SIGKILL to shardc (nothing can catch it): the program still ends;
- SIGINT to `shardc build` while the C compiler runs: the compiler stops,
  no temporary folder, no -o file;
- a built program's `--repeat 0` is a clear usage error (status 2);
- a .npz member cut off inside its .npy header (40, 9 and 3 bytes kept) is
  said to be, by a built program and by `shardc interp`, not read past
  its end into the zip records ("contains a NUL byte").

    tests/codegen/check_driver.py [--shardc build/shardc] [--tmp DIR]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import io
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from tap import Tap  # noqa: E402

PROG = os.path.join(ROOT, "tests", "codegen", "progs", "steps.tdsl")
TIMEOUT = 120


def children(pid):
    """The processes whose parent is `pid`: [(pid, command name)]."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open("/proc/%s/stat" % d).read()
            except OSError:
                continue
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if int(rest[1]) == pid:
                found.append((int(d), name))
    return found


def alive(pid):
    try:
        stat = open("/proc/%d/stat" % pid).read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class Driver:
    def __init__(self, shardc, tmp, tap):
        self.shardc, self.tmp, self.t, self.n = shardc, tmp, tap, 0
        rng = np.random.default_rng(3)
        self.ins = []
        for name, shape in (("x", (8, 6)), ("y", (8, 5)), ("w", (6, 5)), ("v", (6, 5))):
            path = os.path.join(tmp, name + ".npy")
            np.save(path, (0.1 * rng.standard_normal(shape)).astype(np.float32))
            self.ins += ["--in", "%s=%s" % (name, path)]

    def start(self, prefix=(), ignored=()):
        """A long `shardc run` (under `prefix`, e.g. timeout; with the
        signals `ignored` ignored), its private TMPDIR and --out; returns
        once the program runs: (Popen, program's pid or None, tmpdir, out)."""
        self.n += 1
        tmpdir, out = os.path.join(self.tmp, "t%d" % self.n), os.path.join(self.tmp, "out%d" % self.n)
        os.makedirs(tmpdir)
        env = dict(os.environ, TMPDIR=tmpdir, SHARDC_CACHE_DIR=os.path.join(self.tmp, "cache"))
        argv = list(prefix) + [self.shardc, "run", PROG, "--fn", "momentum", "--steps", "2000000000",
                               "--log-every", "1000000000", "--out", out] + self.ins
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                             preexec_fn=dispositions(ignored))
        shardc = p.pid
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and p.poll() is None:
            if prefix:                       # timeout's child is shardc
                kids = [k for k in children(p.pid) if k[1] == "shardc"]
                shardc = kids[0][0] if kids else None
            prog = [k for k in children(shardc) if k[1] == "prog"] if shardc else []
            if prog:
                time.sleep(0.3)          # well into its steps
                return p, prog[0][0], tmpdir, out
            time.sleep(0.05)
        return p, None, tmpdir, out

    def finish(self, p, prog):
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        deadline = time.time() + 10
        while prog and alive(prog) and time.time() < deadline:
            time.sleep(0.05)
        return p.returncode, err, bool(prog) and alive(prog)


def dispositions(ignored=()):
    """preexec_fn: the stop signals at their defaults, as a terminal's shell
    starts a command, but those in `ignored` ignored, as nohup leaves
    SIGHUP.  shardc keeps ignoring what its caller ignores, and a suite run
    in the background (`nohup make check &`) passes on its ignored SIGINT
    and SIGHUP: without this the checks below would depend on how the
    suite was started."""
    def reset():
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
    return reset


def check_nohup(d):
    """Under nohup (SIGHUP ignored), SIGHUP leaves shardc run and its
    program running; SIGTERM then stops both."""
    p, prog, tmpdir, out = d.start(ignored=(signal.SIGHUP,))
    if prog:
        p.send_signal(signal.SIGHUP)
        time.sleep(1)
    running = bool(prog) and p.poll() is None and alive(prog)
    p.send_signal(signal.SIGTERM)
    rc, err, still = d.finish(p, prog)
    d.t.check(running and rc == -signal.SIGTERM and not still and not left(tmpdir),
              "SIGHUP ignored by the caller (nohup): shardc run and its program keep running; SIGTERM stops them",
              "running after SIGHUP: %s, status %s, program %s, left %s, %r"
              % (running, rc, "alive" if still else "gone", left(tmpdir), err[-300:]))


def left(tmpdir):
    return os.listdir(tmpdir)


def check_segv(d):
    p, prog, tmpdir, out = d.start()
    if prog:
        os.kill(prog, signal.SIGSEGV)
    rc, err, still = d.finish(p, prog)
    d.t.check(prog and rc == 128 + signal.SIGSEGV and "shardc: error: the program was killed by SIGSEGV "
              "(Segmentation fault); to debug it" in err and not left(tmpdir),
              "a program killed by SIGSEGV: named, how to debug it, status 139, no temporary folder",
              "status %s, %r, left %s" % (rc, err[-300:], left(tmpdir)))


def check_stop(d, sig):
    p, prog, tmpdir, out = d.start()
    if prog:
        p.send_signal(sig)
    rc, err, still = d.finish(p, prog)
    name = signal.Signals(sig).name
    d.t.check(prog and rc == -sig and not still and not left(tmpdir) and not (os.path.isdir(out) and os.listdir(out)),
              "%s to shardc run: the program stopped, shardc dies by %s, its temporary folder removed" % (name, name),
              "status %s, program %s, left %s, %r" % (rc, "alive" if still else "gone", left(tmpdir), err[-300:]))


def check_timeout(d):
    if not shutil.which("timeout"):
        return
    p, prog, tmpdir, out = d.start(["timeout", "2"])
    rc, err, still = d.finish(p, prog)
    d.t.check(prog and rc == 124 and not still and not left(tmpdir),
              "timeout 2 shardc run: status 124, the program gone, no temporary folder",
              "status %s, program %s, left %s, %r" % (rc, "alive" if still else "gone", left(tmpdir), err[-300:]))


def procs_under(path):
    """The live processes whose command line mentions `path`."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read().decode(errors="replace")
        except OSError:
            continue
        if path in cmd and alive(int(pid)):
            found.append(int(pid))
    return found


def check_timeout_mpi(d):
    """mpirun and its ranks are the program's process group: all stop."""
    if not shutil.which("timeout") or not shutil.which("mpirun"):
        return
    d.n += 1
    tmpdir, out = os.path.join(d.tmp, "t%d" % d.n), os.path.join(d.tmp, "out%d" % d.n)
    os.makedirs(tmpdir)
    # mpirun through a script that writes down its arguments, then is mpirun.
    wrapper, args = os.path.join(d.tmp, "mpirun-args.sh"), os.path.join(d.tmp, "mpirun-args.txt")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nprintf "%%s\\n" "$@" > %s\nexec mpirun "$@"\n' % args)
    os.chmod(wrapper, 0o755)
    env = dict(os.environ, TMPDIR=tmpdir, SHARDC_CACHE_DIR=os.path.join(d.tmp, "cache"), MPIRUN=wrapper)
    p = subprocess.run(["timeout", "4", d.shardc, "run", PROG, "--fn", "momentum", "--backend", "mpi", "--steps",
                        "2000000000", "--log-every", "1000000000", "--out", out] + d.ins,
                       capture_output=True, text=True, env=env, timeout=TIMEOUT)
    deadline = time.time() + 10
    while procs_under(tmpdir) and time.time() < deadline:
        time.sleep(0.1)
    left_procs = procs_under(tmpdir)
    d.t.check(p.returncode == 124 and not left_procs and not left(tmpdir),
              "timeout 4 shardc run --backend mpi: status 124, mpirun and its ranks gone, no temporary folder",
              "status %s, processes %s, left %s, %r" % (p.returncode, left_procs, left(tmpdir), p.stderr[-300:]))
    argv = open(args).read().split("\n") if os.path.exists(args) else []
    base = argv[argv.index("orte_tmpdir_base") + 1] if "orte_tmpdir_base" in argv else ""
    d.t.check(base.startswith(os.path.join(tmpdir, "shardc-")) and base.endswith("/mpi"),
              "timeout 4 shardc run --backend mpi: OpenMPI's session folder inside shardc's temporary folder",
              "orte_tmpdir_base %r" % base)


def check_build_stopped(d):
    """SIGINT during `shardc build`'s C compile (a $CC that sleeps first):
    the compiler's group stops, no temporary folder, no -o."""
    d.n += 1
    tmpdir, exe = os.path.join(d.tmp, "t%d" % d.n), os.path.join(d.tmp, "never%d" % d.n)
    os.makedirs(tmpdir)
    slow = os.path.join(d.tmp, "slow-cc")
    open(slow, "w").write("#!/bin/sh\nsleep 30\nexec cc \"$@\"\n")
    os.chmod(slow, 0o755)
    env = dict(os.environ, TMPDIR=tmpdir, CC=slow, SHARDC_CACHE_DIR=os.path.join(d.tmp, "cache"))
    p = subprocess.Popen([d.shardc, "build", MLP, "-o", exe] + MLP_CONST, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, preexec_fn=dispositions())
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not [k for k in children(p.pid) if k[1] in ("slow-cc", "sh")]:
        time.sleep(0.05)
    cc = [k[0] for k in children(p.pid)]
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    deadline = time.time() + 10
    while any(alive(c) for c in cc) and time.time() < deadline:
        time.sleep(0.05)
    d.t.check(cc and p.returncode == -signal.SIGINT and not any(alive(c) for c in cc) and not left(tmpdir) and
              not os.path.exists(exe) and "shardc: stopped by SIGINT, its temporary folder removed" in err,
              "SIGINT to shardc build while cc runs: cc stopped, shardc dies by SIGINT, no temporary folder, no -o",
              "status %s, cc %s, left %s, %r" % (p.returncode, cc, left(tmpdir), err[-300:]))


def check_kill(d):
    p, prog, tmpdir, out = d.start()
    if prog:
        p.kill()
    rc, err, still = d.finish(p, prog)
    d.t.check(prog and rc == -signal.SIGKILL and not still, "SIGKILL to shardc run: the program ends too",
              "status %s, program %s" % (rc, "alive" if still else "gone"))


MLP = os.path.join(ROOT, "samples", "mlp.tdsl")
MLP_CONST = ["--fn", "mlp", "--const", "B=16,D=32,F=64"]


def check_program_args(d):
    exe = os.path.join(d.tmp, "mlp")
    env = dict(os.environ, SHARDC_CACHE_DIR=os.path.join(d.tmp, "cache"))
    b = subprocess.run([d.shardc, "build", MLP, "-o", exe] + MLP_CONST, capture_output=True, text=True, env=env)
    rng = np.random.default_rng(5)
    arrays = {"x": (16, 32), "w_in": (32, 64), "w_out": (64, 32)}
    arrays = {k: rng.standard_normal(s).astype(np.float32) for k, s in arrays.items()}
    ins = []
    for k, a in arrays.items():
        np.save(os.path.join(d.tmp, "mlp-" + k + ".npy"), a)
        ins += ["--in", "%s=%s" % (k, os.path.join(d.tmp, "mlp-" + k + ".npy"))]
    p = subprocess.run([exe, "--repeat", "0", "--out", os.path.join(d.tmp, "r0")] + ins, capture_output=True,
                       text=True) if b.returncode == 0 else b
    d.t.check(b.returncode == 0 and p.returncode == 2 and
              "error: --repeat '0': a number of timed runs from 1 to 1000000" in p.stderr,
              "a built program's --repeat 0: a usage error that says why", "status %d: %r" % (p.returncode,
                                                                                              p.stderr[-300:]))
    for cut in (40, 9, 3):
        path = os.path.join(d.tmp, "cut%d.npz" % cut)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for k, a in arrays.items():
                buf = io.BytesIO()
                np.save(buf, a)
                z.writestr(k + ".npy", buf.getvalue()[:cut] if k == "w_in" else buf.getvalue())
        want = "'%s' array 'w_in' is cut off inside its header" % path
        for what, argv in (("a built program", [exe]), ("interp", [d.shardc, "interp", MLP] + MLP_CONST)):
            p = subprocess.run(argv + ["--in", path, "--out", os.path.join(d.tmp, "cut-out")], capture_output=True,
                               text=True)
            d.t.check(p.returncode == 1 and want in p.stderr and "NUL" not in p.stderr,
                      "%s: a .npz member cut off after %d bytes of its header is said to be" % (what, cut),
                      "status %d: %r" % (p.returncode, p.stderr[-300:]))


def main():
    ap = script_args.new_parser(__doc__, "check-driver")
    ap.add_argument("--fast", action="store_true", help="without the MPI run (make check-fast)")
    args = script_args.parse(ap)
    d = Driver(args.shardc, args.tmp, Tap())
    check_segv(d)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        check_stop(d, sig)
    check_nohup(d)
    check_timeout(d)
    if not args.fast:
        check_timeout_mpi(d)
    check_kill(d)
    check_build_stopped(d)
    check_program_args(d)
    return d.t.summary()


if __name__ == "__main__":
    sys.exit(main())
