#!/usr/bin/python3
"""SHARDC_TRACE=x.json writes a Chrome trace of every device's kernels and collectives.

Builds samples/mlp.tdsl (small constants, its 2x4 mesh) for the threads
backend and for MPI, runs it with SHARDC_TRACE=PATH.json (lib/shardc_trace.h)
and reads the trace with Python's json module:

- it is the Trace Event Format: {"traceEvents": [...]}, each event a dict
  with a name, "ph" "X" (with numeric ts and dur >= 0, a cat, args.bytes)
  or "M" (metadata), and integer pid and tid;
- one track per device: tids 0..7, each named "device N" by a thread_name
  event, pid the process (MPI: process p writes PATH.pP.json with the
  tracks of its devices, pid p; tools/merge-traces joins them);
- every device has one event per dot and per collective (start and done)
  that `shardc dump --stage scheduled` lists for the fn, named from the
  dump's local shapes ("dot f32 [32,128]x[128,64]", "all-reduce-start f32
  sum [32,128] over {Y}"), in the dump's order, the collectives' args.bytes
  their operand's size;
- a device's events (the fn calls none: all are sequential) do not
  overlap, and all lie within the run's wall time;
- the result matches NumPy; without SHARDC_TRACE no file is written, and a
  path not ending in .json still gets the plain text, "device begin end name".

    tests/codegen/check_trace.py [--shardc build/shardc] [--tmp DIR]
        [--const B=64,D=128,F=256] [--backend threads,mpi]

Prints "ok N - ..." / "not ok N - ..." lines and ends with "N passed, N failed".
"""
import collections
import glob
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import script_args  # noqa: E402
from tap import Tap  # noqa: E402
from check_numpy import mpirun  # noqa: E402

SAMPLE = os.path.join(ROOT, "samples", "mlp.tdsl")
MERGE = os.path.join(ROOT, "tools", "merge-traces")
DEVICES = 8                      # the sample's mesh X = 2, Y = 4
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
REDUCER = {"add": "sum", "maximum": "max", "minimum": "min"}
TIMEOUT = 300


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def scheduled_events(dump, fn):
    """The events a device of `fn` should record, in order, from the
    scheduled dump: [(name, bytes or None)] for each dot and collective."""
    body = re.search(r"^partitioned fn %s\(.*?\{\n(.*?)^\}" % fn, dump, re.M | re.S)
    if not body:
        return None
    types, starts, events = {}, {}, []
    for line in body.group(1).splitlines():
        m = re.match(r"\s*%(\S+) = ([a-z-]+)\(([^)]*)\)(.*)", line)
        if not m:
            continue
        name, op, args, rest = m.groups()
        t = re.search(r" : (\w+)\[([0-9,]*)\]", rest)
        types[name] = (t.group(1), t.group(2)) if t else None
        operands = [a.strip().lstrip("%") for a in args.split(",") if a.strip().startswith("%")]
        if op == "dot":
            a, b = types[operands[0]], types[operands[1]]
            events.append(("dot %s [%s]x[%s]" % (a[0], a[1], b[1]), None))
            continue
        base = re.sub(r"-(start|done)$", "", op)
        if base not in COLLECTIVES:
            continue
        if op.endswith("-done"):
            start_name, nbytes = starts[operands[0]]
            events.append((start_name.replace(base + "-start ", base + "-done ", 1), nbytes))
            continue
        dt, dims = types[operands[0]]
        axes = re.search(r"axes=\{([^}]*)\}", rest).group(1)
        red = re.search(r"to_apply=(\w+)", rest)
        desc = "%s %s %s[%s]" % (op, dt, REDUCER[red.group(1)] + " " if red else "", dims)
        nbytes = int(np.prod([int(d) for d in dims.split(",") if d] or [1])) * {"f32": 4, "f64": 8}.get(dt, 2)
        if base in ("all-reduce", "collective-permute"):
            desc += " over {%s}" % axes
        else:
            desc = None              # named with dims this parser does not read: compare the op only
        if op.endswith("-start"):
            starts[name] = (desc or op, nbytes)
        events.append((desc or op, nbytes))
    return events


def check_format(t, doc, what):
    """Trace Event Format: the events, or None when it is not."""
    if not t.check(isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list),
                   "%s: an object with a traceEvents list" % what, "got %s" % type(doc).__name__):
        return None
    bad = []
    for e in doc["traceEvents"]:
        ok = isinstance(e, dict) and isinstance(e.get("name"), str) and e.get("ph") in ("X", "M", "b", "e") \
            and isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int)
        if ok and e["ph"] == "X":
            ok = all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur")) and e["dur"] >= 0 \
                and isinstance(e.get("cat"), str) and isinstance(e.get("args", {}).get("bytes"), int)
        if ok and e["ph"] in ("b", "e"):
            ok = isinstance(e.get("ts"), (int, float)) and isinstance(e.get("id"), int) and isinstance(e.get("cat"), str)
        if not ok:
            bad.append(e)
    t.check(not bad, "%s: every event has name, ph X (ts, dur >= 0, cat, args.bytes), b/e (ts, id, cat) or M, pid and tid" % what,
            "%d bad, the first %s" % (len(bad), bad[:1]))
    return doc["traceEvents"]


def check_tracks(t, events, what, devices, process_of):
    """One track per device, named "device N", under its process's pid."""
    names = {(e["pid"], e["tid"]): e["args"].get("name") for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    tracks = sorted({(e["pid"], e["tid"]) for e in events if e["ph"] == "X"})
    want = [(process_of(d), d) for d in devices]
    t.check(tracks == want, "%s: events on %d tracks, (pid, tid) = (process, device)" % (what, len(want)),
            "tracks %s" % tracks)
    t.check(all(names.get(k) == "device %d" % k[1] for k in want),
            "%s: each track is named \"device N\" (thread_name)" % what, "names %s" % names)


def check_device_events(t, events, what, expect, wall_us):
    """Each device has the dump's dots and collectives, in order, without
    overlaps, inside the run's wall time."""
    per_dev = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            per_dev[e["tid"]].append(e)
    names = [n for n, _ in expect]
    wrong, overlaps, bytes_wrong = {}, [], []
    for d in range(DEVICES):
        evs = sorted(per_dev.get(d, []), key=lambda e: e["ts"])
        seen = []
        for e in evs:
            word = e["name"].split(" ")[0]
            if word == "dot" or re.sub(r"-(start|done)$", "", word) in COLLECTIVES:
                full = next((n for n in names if n == e["name"]), None)
                seen.append(full or word)
                nb = dict(expect).get(e["name"])
                if nb is not None and e["args"]["bytes"] != nb:
                    bytes_wrong.append((d, e["name"], e["args"]["bytes"], nb))
        if seen != names:
            wrong[d] = seen
        for a, b in zip(evs, evs[1:]):
            if a["ts"] + a["dur"] > b["ts"] + 1e-3:
                overlaps.append((d, a["name"], b["name"]))
    t.check(not wrong, "%s: every device has the dump's %d dots and collectives, in its order (%s)"
            % (what, len(names), "; ".join(names)), "device: events %s" % wrong)
    t.check(not bytes_wrong, "%s: a collective's args.bytes is its operand's size" % what, str(bytes_wrong[:3]))
    t.check(not overlaps, "%s: a device's events do not overlap" % what, str(overlaps[:3]))
    check_spans(t, events, what, per_dev)
    xs = [e for e in events if e["ph"] == "X"]
    span = max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs) if xs else -1
    t.check(0 <= span <= wall_us, "%s: the events span %.0f us, within the run's %.0f us" % (what, span, wall_us))


def check_spans(t, events, what, per_dev):
    """Each start and its done make one async span (b, e with one id) from
    the start's begin to the done's end, named "device N: " and the
    collective without -start."""
    spans = collections.defaultdict(dict)        # (pid, id) -> ph -> event
    for e in events:
        if e["ph"] in ("b", "e"):
            spans[(e["pid"], e["id"])][e["ph"]] = e
    bad = []
    for d in range(DEVICES):
        evs = sorted(per_dev.get(d, []), key=lambda e: e["ts"])
        starts = [e for e in evs if e["name"].split(" ")[0].endswith("-start")]
        dones = [e for e in evs if e["name"].split(" ")[0].endswith("-done")]
        mine = sorted((s for s in spans.values() if s.get("b", {}).get("tid") == d), key=lambda s: s["b"]["ts"])
        if len(starts) != len(dones) or len(mine) != len(starts):
            bad.append((d, "%d starts, %d dones, %d spans" % (len(starts), len(dones), len(mine))))
            continue
        for s, dn, sp in zip(starts, dones, mine):
            op = s["name"].split(" ")[0][:-len("-start")]
            name = "device %d: %s" % (d, s["name"].replace(op + "-start", op, 1))
            ok = "e" in sp and sp["b"]["name"] == name == sp["e"]["name"] and abs(sp["b"]["ts"] - s["ts"]) < 1e-3 \
                and abs(sp["e"]["ts"] - (dn["ts"] + dn["dur"])) < 1e-3
            if not ok:
                bad.append((d, sp))
    t.check(not bad, "%s: each start and its done make an async span (b, e) from the start to the done's end"
            % what, str(bad[:2]))


class Check:
    def __init__(self, args):
        self.args, self.t = args, Tap()
        self.tmp = args.tmp
        self.shardc = args.shardc

    def run(self, argv, env_trace=None, tag="run"):
        env = {k: v for k, v in os.environ.items() if k not in ("SHARDC_TRACE", "SHARDC_LOCAL_DEVICES")}
        if env_trace:
            env["SHARDC_TRACE"] = env_trace
        env["OMPI_MCA_orte_tmpdir_base"] = os.path.join(self.tmp, "mpi-session-" + tag)
        os.makedirs(env["OMPI_MCA_orte_tmpdir_base"], exist_ok=True)
        start = time.monotonic()
        for _ in range(2):       # an mpirun that fails to start is tried again
            try:
                p = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env, timeout=TIMEOUT)
                rc, err = p.returncode, p.stderr + p.stdout
            except subprocess.TimeoutExpired:
                rc, err = 124, "timed out after %d s" % TIMEOUT
            if rc == 0 or "orte_init failed" not in err:
                break
        return rc, err.strip(), (time.monotonic() - start) * 1e6

    def inputs(self, consts):
        B, D, F = consts["B"], consts["D"], consts["F"]
        rng = np.random.default_rng(3)
        self.arrays = {"x": rng.standard_normal((B, D)).astype(np.float32),
                       "w_in": (rng.standard_normal((D, F)) * D ** -0.5).astype(np.float32),
                       "w_out": (rng.standard_normal((F, D)) * F ** -0.5).astype(np.float32)}
        self.ins = []
        for name, a in self.arrays.items():
            np.save(os.path.join(self.tmp, name + ".npy"), a)
            self.ins += ["--in", "%s=%s" % (name, os.path.join(self.tmp, name + ".npy"))]
        x = {k: v.astype(np.float64) for k, v in self.arrays.items()}
        self.want = gelu(x["x"] @ x["w_in"]) @ x["w_out"]

    def matches(self, out, what):
        try:
            got = np.load(os.path.join(out, "result0.npy")).astype(np.float64)
        except OSError as e:
            return self.t.check(False, "%s: the result matches NumPy" % what, str(e))
        err = float(np.max(np.abs(got - self.want)) / max(1.0, float(np.max(np.abs(self.want)))))
        return self.t.check(got.shape == self.want.shape and err < 1e-4, "%s: the result matches NumPy" % what,
                            "relative error %g" % err)

    def threads(self, exe, expect):
        t = self.t
        out = os.path.join(self.tmp, "out-threads")
        rc, err, _ = self.run([exe] + self.ins + ["--out", out])
        t.check(rc == 0 and not glob.glob(os.path.join(self.tmp, "trace*")),
                "threads: without SHARDC_TRACE the program runs and writes no trace", err)
        path = os.path.join(self.tmp, "trace.json")
        rc, err, wall = self.run([exe] + self.ins + ["--out", out], path)
        if not t.check(rc == 0 and os.path.exists(path), "threads: runs with SHARDC_TRACE=trace.json",
                       err or "no trace written"):
            return
        self.matches(out, "threads")
        try:
            with open(path) as f:
                doc = json.load(f)
        except ValueError as e:
            t.check(False, "threads: trace.json is JSON", str(e))
            return
        events = check_format(t, doc, "threads")
        if events is not None:
            check_tracks(t, events, "threads", range(DEVICES), lambda d: 0)
            check_device_events(t, events, "threads", expect, wall)
        self.text(exe, expect)

    def text(self, exe, expect):
        """A path without .json: the plain text lines, the same events."""
        path = os.path.join(self.tmp, "trace.txt")
        rc, err, _ = self.run([exe] + self.ins + ["--out", os.path.join(self.tmp, "out-text")], path)
        lines = open(path).read().splitlines() if rc == 0 and os.path.exists(path) else []
        per_dev = collections.defaultdict(list)
        for line in lines:
            dev, begin, end, name = line.split(" ", 3)
            per_dev[int(dev)].append((int(begin), int(end), name))
        names = [n for n, _ in expect]
        ok = sorted(per_dev) == list(range(DEVICES)) and all(
            [n for _, _, n in sorted(v) if n in names] == names and all(b <= e for b, e, _ in v)
            for v in per_dev.values())
        t = self.t
        t.check(ok, "threads: SHARDC_TRACE=trace.txt writes \"device begin end name\" lines, the same events",
                err or "devices %s, first lines %s" % (sorted(per_dev), lines[:3]))

    def mpi(self, exe, expect):
        t = self.t
        out = os.path.join(self.tmp, "out-mpi")
        path = os.path.join(self.tmp, "mpi.json")
        rc, err, wall = self.run(mpirun(2) + [exe] + self.ins + ["--out", out], path, "mpi")
        parts = [os.path.join(self.tmp, "mpi.p%d.json" % p) for p in range(2)]
        if not t.check(rc == 0 and all(map(os.path.exists, parts)) and not os.path.exists(path),
                       "mpi (2 processes): SHARDC_TRACE=mpi.json writes mpi.p0.json and mpi.p1.json",
                       err or "files: %s" % sorted(os.listdir(self.tmp))):
            return
        self.matches(out, "mpi")
        for p, part in enumerate(parts):
            try:
                with open(part) as f:
                    doc = json.load(f)
            except ValueError as e:
                t.check(False, "mpi: %s is JSON" % os.path.basename(part), str(e))
                return
            events = check_format(t, doc, "mpi process %d" % p)
            if events is None:
                return
            check_tracks(t, events, "mpi process %d" % p, range(4 * p, 4 * p + 4), lambda d: p)
        merged = os.path.join(self.tmp, "mpi-merged.json")
        r = subprocess.run([sys.executable, MERGE] + parts + ["-o", merged], capture_output=True, text=True)
        if not t.check(r.returncode == 0, "mpi: tools/merge-traces joins the processes' files", r.stderr.strip()):
            return
        with open(merged) as f:
            events = check_format(t, json.load(f), "mpi merged")
        if events is not None:
            check_tracks(t, events, "mpi merged", range(DEVICES), lambda d: d // 4)
            check_device_events(t, events, "mpi merged", expect, wall)

    def main(self):
        t, args = self.t, self.args
        consts = dict((k, int(v)) for k, v in (kv.split("=") for kv in args.const.split(",")))
        self.inputs(consts)
        r = subprocess.run([self.shardc, "dump", SAMPLE, "--stage", "scheduled", "--const", args.const],
                           capture_output=True, text=True)
        expect = scheduled_events(r.stdout, "mlp") if r.returncode == 0 else None
        ndots = sum(n.startswith("dot ") for n, _ in (expect or []))
        if not t.check(expect is not None and ndots >= 2 and len(expect) > ndots,
                       "the scheduled dump of mlp lists its dots and collectives",
                       r.stderr.strip() or "events %s" % expect):
            return t.summary()
        backends = args.backend.split(",")
        have_mpi = script_args.can_run_mpi(self.shardc)
        if "mpi" in backends and not have_mpi:
            print("# mpi skipped: libshardc_rt_mpi.a or mpirun missing")
            backends.remove("mpi")
        for backend in backends:
            exe = os.path.join(self.tmp, "mlp-" + backend)
            rc, err, _ = self.run([self.shardc, "build", SAMPLE, "--fn", "mlp", "--const", args.const,
                                   "--backend", backend, "-o", exe], tag="build-" + backend)
            if t.check(rc == 0, "shardc build samples/mlp.tdsl --fn mlp --const %s --backend %s"
                       % (args.const, backend), err):
                getattr(self, backend)(exe, expect)
        return t.summary()


def main():
    ap = script_args.new_parser(__doc__, "check-trace")
    ap.add_argument("--const", default="B=64,D=128,F=256")
    ap.add_argument("--backend", default="threads,mpi")
    return Check(script_args.parse(ap)).main()


if __name__ == "__main__":
    sys.exit(main())
