#!/usr/bin/python3
"""The build cache of `shardc build` and `run` (docs/cli.md, "The build
cache"), each point a check:

- `shardc cache hash` is SHA-256: the digests of files of 0 to 100,000
  bytes (every padding case) are hashlib's;
- a second build of the same program hits (SHARDC_CACHE_STATS says so, the
  entry count stays 1) and gives the same bytes; `run` hits the entry that
  `build` stored, and its results are the bits of a --no-cache run;
- a changed --const, --mesh, program (relu for gelu) or $CC misses; a
  program changed only in a comment generates the same C, and hits;
- in a copied build tree: a touched libshardc_lib.a, libshardc_rt.a or
  header misses, and the unchanged tree hits;
- SHARDC_CACHE=0 and --no-cache never create the cache directory;
- 4 concurrent builds of a new program all succeed with the same bytes,
  leaving one entry and no temporary file; 4 concurrent runs then all hit;
- a damaged entry (emptied, truncated, one byte altered, a shell script
  put there, another key's entry copied over it) is never used: build and
  run report it in one line, remove it, build again (the same bytes as a
  good build; the script never runs) and store a good entry;
- SHARDC_CACHE_MAX evicts the least recently used entry (a hit counts as a
  use); a bad value is a usage error (status 2);
- `cache info` without HOME says why the cache is off; it counts the entries, `cache clean` removes them and nothing
  else; $XDG_CACHE_HOME/shardc and ~/.cache/shardc are the defaults;
- the progress line: on a pseudo-terminal, "\\r"-redrawn, ending in "cc N s"
  on a miss and "cached" on a hit, a failing cc's messages after it, a
  slow cc's file and seconds ticking; on a pipe, standard error stays
  empty; with -v, a plain line per front-end stage, cache miss or hit, the
  C compiler's command line and time, on a pipe too.

    tests/codegen/check_cache.py [--shardc build/shardc] [--tmp DIR] [--only REGEX]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import concurrent.futures
import glob
import hashlib
import os
import pty
import re
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_args  # noqa: E402
from tap import Tap  # noqa: E402

MLP = os.path.join(ROOT, "samples", "mlp.tdsl")
CONST = "B=16,D=32,F=64"
TIMEOUT = 300
STAT = re.compile(r"^shardc: cache (hit|miss|stored|could not store) ([0-9a-f]{64})$", re.M)


class Cache:
    def __init__(self, shardc, tmp, tap):
        self.shardc, self.tmp, self.t = shardc, tmp, tap
        self.n = 0
        self.ins = []
        rng = np.random.default_rng(16)
        for name, shape in (("x", (16, 32)), ("w_in", (32, 64)), ("w_out", (64, 32))):
            path = os.path.join(tmp, name + ".npy")
            np.save(path, rng.standard_normal(shape).astype(np.float32))
            self.ins += ["--in", "%s=%s" % (name, path)]

    def env(self, cache, **extra):
        """The environment with the cache at `cache` (None: unset), stats on."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDC_CACHE")}
        if cache:
            env["SHARDC_CACHE_DIR"] = cache
        env["SHARDC_CACHE_STATS"] = "1"
        env.update(extra)
        return env

    def fresh(self, name):
        d = os.path.join(self.tmp, name)
        shutil.rmtree(d, ignore_errors=True)
        return d

    def out(self):
        self.n += 1
        return os.path.join(self.tmp, "out%d" % self.n)

    def build(self, cache, args=(), prog=MLP, shardc=None, env=None, out=None):
        """shardc build of mlp; returns (status, what the cache did, -o, stderr)."""
        out = out or self.out()
        argv = [shardc or self.shardc, "build", prog, "--fn", "mlp", "--const", CONST, "-o", out] + list(args)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env or self.env(cache))
        return p.returncode, [m[0] for m in STAT.findall(p.stderr)], out, p.stderr

    def run(self, cache, args=(), env=None):
        """shardc run of mlp; returns (status, what the cache did, result0's bytes)."""
        out = self.out()
        argv = [self.shardc, "run", MLP, "--fn", "mlp", "--const", CONST, "--out", out] + self.ins + list(args)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env or self.env(cache))
        data = open(os.path.join(out, "result0.npy"), "rb").read() if p.returncode == 0 else p.stderr
        return p.returncode, [m[0] for m in STAT.findall(p.stderr)], data


def entries(cache):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(cache, "v2", "*")))


def temps(cache):
    return glob.glob(os.path.join(cache, "v2", ".tmp-*"))


def same_file(a, b):
    return os.path.exists(a) and os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read()


def check_hash(c):
    bad = []
    for n in (0, 1, 55, 56, 63, 64, 65, 119, 120, 1000, 100000):
        path = os.path.join(c.tmp, "bytes%d" % n)
        data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
        open(path, "wb").write(data)
        got = subprocess.run([c.shardc, "cache", "hash", path], capture_output=True, text=True).stdout.split()
        if not got or got[0] != hashlib.sha256(data).hexdigest():
            bad.append("%d bytes: %s" % (n, got[:1]))
    c.t.check(not bad, "cache hash is SHA-256 (0 to 100000 bytes)", "; ".join(bad))


def check_hits(c):
    cache = c.fresh("hits")
    rc1, what1, a, err = c.build(cache)
    c.t.check(rc1 == 0 and what1 == ["miss", "stored"] and len(entries(cache)) == 1, "first build misses and stores",
              "status %d, %s, %s" % (rc1, what1, err.strip()[-300:]))
    rc2, what2, b, _ = c.build(cache)
    c.t.check(rc2 == 0 and what2 == ["hit"] and len(entries(cache)) == 1 and same_file(a, b),
              "second build hits: one entry, the same bytes", "%s, %d entries" % (what2, len(entries(cache))))
    c.t.check(os.access(b, os.X_OK) and os.stat(b).st_ino != os.stat(os.path.join(cache, "v2", entries(cache)[0])).st_ino,
              "build -o from the cache is an executable copy, not the entry's inode")
    rc3, what3, hit = c.run(cache)
    rc4, what4, miss = c.run(cache, ["--no-cache"])
    c.t.check(rc3 == 0 and what3 == ["hit"] and rc4 == 0 and what4 == [] and hit == miss,
              "run hits build's entry; its result is the bits of a --no-cache run", "%s %s" % (what3, what4))
    return cache


def check_misses(c, cache):
    cases = [("--const F=128", ["--const", "B=16,D=32,F=128"], MLP, None),
             ("--mesh X=4,Y=2", ["--mesh", "X=4,Y=2"], MLP, None)]
    relu = os.path.join(c.tmp, "mlp_relu.tdsl")
    open(relu, "w").write(open(MLP).read().replace("gelu(h)", "relu(h)"))
    cases.append(("relu for gelu", [], relu, None))
    cases.append(("CC=gcc", [], MLP, c.env(cache, CC="gcc")))
    cases.append(("SHARDC_CFLAGS=-O1", [], MLP, c.env(cache, SHARDC_CFLAGS="-O1")))
    for what, args, prog, env in cases:
        rc, did, _, err = c.build(cache, args, prog=prog, env=env)
        c.t.check(rc == 0 and did == ["miss", "stored"], "a changed build misses: %s" % what,
                  "status %d, %s, %s" % (rc, did, err.strip()[-300:]))
    comment = os.path.join(c.tmp, "mlp_comment.tdsl")
    open(comment, "w").write("# only a comment differs\n" + open(MLP).read())
    rc, did, _, _ = c.build(cache, prog=comment)
    c.t.check(rc == 0 and did == ["hit"], "a program changed in a comment only (the same C) hits", str(did))


def check_cflags(c):
    """$SHARDC_CFLAGS reaches the compiler: an unknown flag fails the build
    with the compiler's word; -march=native compiles the generated fns once,
    for this machine (no per-ISA versions where GCC makes them)."""
    env = c.env(None, SHARDC_CACHE="0", SHARDC_CFLAGS="-fno-such-flag")
    rc, _, _, err = c.build(None, env=env)
    c.t.check(rc != 0 and "no-such-flag" in err and "C compiler" in err,
              "SHARDC_CFLAGS=-fno-such-flag: the build fails, naming it", "status %d: %s" % (rc, err.strip()[-300:]))
    soft = os.path.join(c.tmp, "softmax.tdsl")
    open(soft, "w").write("fn soft(x: f32[64, 32]) -> f32[64, 32] {\n    e[r, c] = exp(x[r, c] - max[k](x[r, k]))\n"
                          "    p[r, c] = e[r, c] / sum[k](e[r, k])\n    return p\n}\n")
    clones = {}
    for flags in ("", "-march=native"):
        out = c.out()
        p = subprocess.run([c.shardc, "build", soft, "--fn", "soft", "-o", out], capture_output=True, text=True,
                           timeout=TIMEOUT, env=c.env(None, SHARDC_CACHE="0", SHARDC_CFLAGS=flags))
        syms = subprocess.run(["nm", out], capture_output=True, text=True).stdout if p.returncode == 0 else ""
        clones[flags] = (p.returncode, len(re.findall(r" shardc_soft\.arch_x86_64_v4$", syms, re.M)))
    tool = open(os.path.join(os.path.dirname(c.shardc), "shardc-toolchain")).read()
    cc = os.environ.get("CC") or re.search(r"^cc=(.*)$", tool, re.M).group(1)
    x86_gcc = "Free Software Foundation" in subprocess.run([cc, "--version"], capture_output=True, text=True).stdout \
        and os.uname().machine == "x86_64" and "-fsanitize" not in tool
    c.t.check(clones[""][0] == 0 and clones["-march=native"] == (0, 0) and clones[""][1] == (1 if x86_gcc else 0),
              "SHARDC_CFLAGS=-march=native: a softmax's loop compiled once (AVX-512 versions without it, with it: %s)"
              % clones, str(clones))


def copy_tree(c, build):
    """build/shardc, its libraries and the headers, copied where they can
    be touched without touching the real ones."""
    tree = c.fresh("tree")
    for d in ("build", "runtime", "lib"):
        os.makedirs(os.path.join(tree, d))
    shutil.copy2(os.path.join(build, "shardc"), os.path.join(tree, "build"))
    for lib in glob.glob(os.path.join(build, "libshardc_*.a")):
        shutil.copy2(lib, os.path.join(tree, "build"))
    for d in ("runtime", "lib"):
        for h in glob.glob(os.path.join(ROOT, d, "*.h")) + glob.glob(os.path.join(ROOT, d, "*.def")):
            shutil.copy2(h, os.path.join(tree, d))
    return tree


def check_inputs(c):
    """A touched library or header misses (a rebuilt one has a new mtime)."""
    tree = copy_tree(c, os.path.dirname(os.path.abspath(c.shardc)))
    shardc, cache = os.path.join(tree, "build", "shardc"), c.fresh("inputs")
    first = c.build(cache, shardc=shardc)
    again = c.build(cache, shardc=shardc)
    c.t.check(first[0] == 0 and first[1][0] == "miss" and again[1] == ["hit"], "a copied build tree misses, then hits",
              "%s %s %s" % (first[1], again[1], first[3].strip()[-300:]))
    for f in ("build/libshardc_lib.a", "build/libshardc_rt.a", "lib/shardc_main.h", "runtime/shardc_rt.h"):
        path = os.path.join(tree, f)
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        miss, hit = c.build(cache, shardc=shardc), c.build(cache, shardc=shardc)
        c.t.check(miss[0] == 0 and miss[1] == ["miss", "stored"] and hit[1] == ["hit"],
                  "a touched %s misses, then hits" % f, "%s %s" % (miss[1], hit[1]))


def check_off(c):
    for what, env, args in (("SHARDC_CACHE=0", {"SHARDC_CACHE": "0"}, []), ("--no-cache", {}, ["--no-cache"])):
        cache = c.fresh("off")
        rc, did, out, _ = c.build(cache, args, env=c.env(cache, **env))
        rc2, did2, _, _ = c.build(cache, args, env=c.env(cache, **env))
        c.t.check(rc == 0 and rc2 == 0 and os.access(out, os.X_OK) and did == did2 == [] and not os.path.exists(cache),
                  "%s: builds, never writes the cache" % what, "%s %s" % (did, did2))


def check_concurrent(c):
    cache = c.fresh("concurrent")              # empty: the program is new to it
    args = []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: c.build(cache, args), range(4)))
    outs = [g[2] for g in got]
    c.t.check(all(g[0] == 0 for g in got) and all(same_file(outs[0], o) for o in outs),
              "4 concurrent builds of a new program all succeed, the same bytes",
              "; ".join("%d %s" % (g[0], g[3].strip()[-200:]) for g in got))
    c.t.check(len(entries(cache)) == 1 and not temps(cache), "... leaving one entry and no temporary file",
              "%s %s" % (entries(cache), temps(cache)))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda i: c.run(cache, args), range(4)))
    c.t.check(all(r[0] == 0 and r[1] == ["hit"] and r[2] == runs[0][2] for r in runs),
              "4 concurrent runs all hit, with the same results",
              str([r[:2] + (r[2][-200:] if r[0] else "",) for r in runs]))


def damage_cases(c):
    """(what, how to damage the entry at `path` given another entry's bytes)."""
    def truncate(path, _):
        data = open(path, "rb").read()
        open(path, "wb").write(data[:len(data) // 2])

    def alter(path, _):
        data = bytearray(open(path, "rb").read())
        data[len(data) - 1000] ^= 1
        open(path, "wb").write(bytes(data))

    marker = os.path.join(c.tmp, "script-ran")

    def script(path, _):
        open(path, "w").write("touch %s\n" % marker)

    def foreign(path, other):
        open(path, "wb").write(other)

    return marker, [("emptied", lambda p, o: open(p, "wb").close()), ("truncated", truncate),
                    ("with one byte altered", alter), ("replaced by a shell script", script),
                    ("replaced by another key's entry", foreign)]


def check_damaged(c):
    cache = c.fresh("damaged")
    _, _, good, _ = c.build(cache)
    _, did, _, err = c.build(cache)
    mine = STAT.findall(err)[0][1]
    c.build(cache, ["--const", "B=16,D=32,F=96"])
    path = lambda k: os.path.join(cache, "v2", k)
    other = open(path([k for k in entries(cache) if k != mine][0]), "rb").read()
    _, _, want = c.run(cache)
    marker, cases = damage_cases(c)
    told = re.compile(r"^shardc: cache entry %s\.\.\. was damaged \(.+\): removed, building again$" % mine[:12],
                      re.M)
    for what, damage in cases:
        damage(path(mine), other)
        rc, did, out, err = c.build(cache)
        c.t.check(rc == 0 and same_file(good, out) and did == ["miss", "stored"] and len(told.findall(err)) == 1,
                  "build: an entry %s is reported in one line, removed and rebuilt" % what,
                  "status %d, %s, %r" % (rc, did, err[-300:]))
        damage(path(mine), other)
        out = c.out()
        p = subprocess.run([c.shardc, "run", MLP, "--fn", "mlp", "--const", CONST, "--out", out] + c.ins,
                           capture_output=True, text=True, env=c.env(cache), timeout=TIMEOUT)
        got = os.path.join(out, "result0.npy")
        c.t.check(p.returncode == 0 and len(told.findall(p.stderr)) == 1 and os.path.exists(got) and
                  open(got, "rb").read() == want and not os.path.exists(marker),
                  "run: an entry %s is reported, rebuilt, and the results are right" % what,
                  "status %d, %r" % (p.returncode, p.stderr[-300:]))
    rc, did, out, err = c.build(cache)
    c.t.check(rc == 0 and did == ["hit"] and same_file(good, out) and not temps(cache),
              "... the rebuilt entry then hits, with no temporary file left", "%s %s" % (did, temps(cache)))


def check_evict(c):
    cache = c.fresh("evict")
    rc, _, _, _ = c.build(cache)
    size = os.path.getsize(os.path.join(cache, "v2", entries(cache)[0]))
    env = c.env(cache, SHARDC_CACHE_MAX=str(int(size * 2.5)))
    f = {k: ["--const", "B=16,D=32,F=%d" % k] for k in (64, 96, 128)}
    c.build(cache, f[96], env=env)                      # entries: 64, 96
    time.sleep(0.05)
    hit = c.build(cache, f[64], env=env)[1]             # 64 used last
    time.sleep(0.05)
    c.build(cache, f[128], env=env)                     # 96 is the least recently used
    after = len(entries(cache))
    kept, gone = c.build(cache, f[64], env=env)[1], c.build(cache, f[128], env=env)[1]
    lost = c.build(cache, f[96], env=env)[1]
    c.t.check(rc == 0 and hit == ["hit"] and after == 2 and kept == ["hit"] and gone == ["hit"] and lost[0] == "miss",
              "SHARDC_CACHE_MAX: the least recently used entry is evicted",
              "hit %s, %d entries, then %s %s %s" % (hit, after, kept, gone, lost))
    p = subprocess.run([c.shardc, "build", MLP, "--fn", "mlp", "-o", c.out()], capture_output=True, text=True,
                       env=c.env(cache, SHARDC_CACHE_MAX="lots"))
    c.t.check(p.returncode == 2 and "SHARDC_CACHE_MAX" in p.stderr, "a bad SHARDC_CACHE_MAX is an error (status 2)",
              "status %d: %s" % (p.returncode, p.stderr.strip()))


def check_commands(c):
    cache = c.fresh("commands")
    c.build(cache)
    c.build(cache, ["--const", "B=16,D=32,F=32"])
    open(os.path.join(cache, "v2", "notes.txt"), "w").write("not an entry\n")
    env = c.env(cache)
    info = subprocess.run([c.shardc, "cache", "info"], capture_output=True, text=True, env=env).stdout
    clean = subprocess.run([c.shardc, "cache", "clean"], capture_output=True, text=True, env=env)
    info2 = subprocess.run([c.shardc, "cache", "info"], capture_output=True, text=True, env=env).stdout
    c.t.check("entries: 2," in info and clean.returncode == 0 and "entries: 0," in info2 and
              entries(cache) == ["notes.txt"], "cache info counts entries; cache clean removes them and nothing else",
              "%r %r %r %s" % (info, clean.stdout, info2, entries(cache)))
    bad = subprocess.run([c.shardc, "cache", "purge"], capture_output=True, text=True, env=env)
    c.t.check(bad.returncode == 2, "cache purge is a usage error", str(bad.returncode))
    env = {k: v for k, v in c.env(None).items() if k not in ("HOME", "XDG_CACHE_HOME")}
    info = subprocess.run([c.shardc, "cache", "info"], capture_output=True, text=True, env=env)
    c.t.check(info.returncode == 0 and "SHARDC_CACHE=0" not in info.stdout and
              "off: none of SHARDC_CACHE_DIR, XDG_CACHE_HOME (an absolute path) and HOME is set" in info.stdout,
              "cache info without HOME says why the cache is off", repr(info.stdout))
    home = c.fresh("home")
    for what, extra, where in (("XDG_CACHE_HOME", {"XDG_CACHE_HOME": os.path.join(home, "xdg")}, "xdg/shardc/v2"),
                               ("HOME", {"HOME": home}, ".cache/shardc/v2")):
        env = c.env(None, **extra)
        env.pop("XDG_CACHE_HOME", None) if what == "HOME" else None
        rc, did, _, _ = c.build(None, env=env)
        c.t.check(rc == 0 and len(glob.glob(os.path.join(home, where, "*"))) == 1,
                  "without SHARDC_CACHE_DIR the cache is under %s" % where, "%s %s" % (did, os.listdir(home)))


def pty_build(c, cache, args, **extra):
    """shardc build with standard error on a pseudo-terminal: what it drew."""
    master, slave = pty.openpty()
    env = {k: v for k, v in c.env(cache, **extra).items() if k != "SHARDC_CACHE_STATS"}
    p = subprocess.run([c.shardc, "build", MLP, "--fn", "mlp", "--const", CONST, "-o", c.out()] + args,
                       stderr=slave, stdout=subprocess.DEVNULL, env=env, timeout=TIMEOUT)
    os.close(slave)
    text = b""
    try:
        while True:
            chunk = os.read(master, 4096)
            if not chunk:
                break
            text += chunk
    except OSError:                  # EIO: the terminal's other end is closed
        pass
    os.close(master)
    return p.returncode, text.decode(errors="replace")


def check_status(c):
    cache = c.fresh("status")
    args = ["--const", "B=16,D=32,F=48"]
    rc1, miss = pty_build(c, cache, args)
    rc2, hit = pty_build(c, cache, args)
    last = lambda s: s.replace("\r\n", "\n").split("\r")[-1]   # what is left on screen
    c.t.check(rc1 == 0 and "\r" in miss and re.search(r"mlp\.tdsl \(mesh X=2,Y=4\): partitioned, scheduled, "
                                                     r"C \d+ lines, cc \d+\.\d\d s\n$", last(miss)),
              "on a terminal: the progress line of a miss ends in 'cc N s'", repr(miss[-200:]))
    c.t.check(rc2 == 0 and re.search(r"C \d+ lines, cached\n$", last(hit)),
              "on a terminal: the progress line of a hit ends in 'cached'", repr(hit[-200:]))
    rc3, bad = pty_build(c, cache, args, CC="/nonexistent/cc")
    c.t.check(rc3 == 1 and re.search(r", cc \d+\.\d\d s\r?\nshardc: error: cannot run '/nonexistent/cc'.*\n"
                                     r"shardc: error: the C compiler", bad),
              "on a terminal: a failing cc's messages come after the finished line", repr(bad[-300:]))
    p = subprocess.run([c.shardc, "build", MLP, "--fn", "mlp", "--const", CONST, "-o", c.out()] + args,
                       capture_output=True, text=True, env={k: v for k, v in c.env(cache).items()
                                                            if k != "SHARDC_CACHE_STATS"})
    c.t.check(p.returncode == 0 and p.stderr == "", "on a pipe: nothing on standard error", repr(p.stderr))
    slow_cc = os.path.join(c.tmp, "slow-cc")
    open(slow_cc, "w").write("#!/bin/sh\nsleep 1.2\nexec cc \"$@\"\n")
    os.chmod(slow_cc, 0o755)
    rc4, slow = pty_build(c, cache, ["--const", "B=16,D=32,F=40"], CC=slow_cc)
    c.t.check(rc4 == 0 and re.search(r"C \d+ lines, cc prog\.c [01]\.\d s\r", slow) and
              re.search(r"C \d+ lines, cc 1\.\d\d s\n$", last(slow)),
              "on a terminal: while cc runs, the file it compiles and its seconds tick", repr(slow[-300:]))
    quiet = {k: v for k, v in c.env(cache).items() if k != "SHARDC_CACHE_STATS"}
    verbose = []
    for _ in range(2):
        p = subprocess.run([c.shardc, "build", MLP, "--fn", "mlp", "--const", "B=16,D=32,F=24", "-o", c.out(), "-v"],
                           capture_output=True, text=True, env=quiet)
        verbose.append(p.stderr)
    stages = "".join("shardc: %s: %s \\(\\d+\\.\\d\\d s\\)\n" % (re.escape(MLP), st)
                     for st in ("parsed", "checked", "propagated", "partitioned", "scheduled"))
    miss = re.compile("^" + stages + r"shardc: \S+ \(mesh X=2,Y=4\)\nshardc: C \d+ lines\nshardc: cache miss [0-9a-f]{64}\n"
                      r"shardc: cc -std=c11 -O2 -fno-math-errno -o \S+ \S+/prog\.c .*-fopenmp.*\nshardc: cc \d+\.\d\d s\n"
                      r"shardc: cache stored [0-9a-f]{64}\n$")
    hit = re.compile("^" + stages + r"shardc: \S+ \(mesh X=2,Y=4\)\nshardc: C \d+ lines\nshardc: cache hit [0-9a-f]{64}\n"
                     r"shardc: cached\n$")
    c.t.check(miss.match(verbose[0]) and hit.match(verbose[1]),
              "build -v on a pipe: a plain line per stage, the cache's miss (the cc command and time) then hit",
              repr(verbose))
    p = subprocess.run([c.shardc, "dump", MLP, "--stage", "parsed", "-v"], capture_output=True, text=True)
    c.t.check(p.returncode == 2 and "-v goes with build, run and autoshard" in p.stderr, "dump -v is a usage error",
              repr(p.stderr))


def main():
    ap = script_args.new_parser(__doc__, "check-cache")
    ap.add_argument("--only", help="a regular expression: the checks whose names match (hits, misses, inputs, off, "
                                   "concurrent, damaged, evict, commands, status, cflags)")
    args = script_args.parse(ap)
    c = Cache(args.shardc, args.tmp, Tap())
    only = lambda name: not args.only or re.search(args.only, name)
    cache = check_hits(c) if only("hits") or only("misses") else None
    steps = [("hash", check_hash), ("misses", lambda c: check_misses(c, cache)), ("inputs", check_inputs),
             ("off", check_off), ("concurrent", check_concurrent), ("damaged", check_damaged), ("evict", check_evict),
             ("commands", check_commands), ("status", check_status), ("cflags", check_cflags)]
    for name, step in steps:
        if only(name):
            step(c)
    return c.t.summary()


if __name__ == "__main__":
    sys.exit(main())
