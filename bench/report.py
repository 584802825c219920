#!/usr/bin/python3
"""bench/report.py: every benchmark of `make bench` in one run.

  (0) the machine's limits: bench/limits (FMA peak on one core and on
      every core for the ISA CPUID reports, STREAM triad on every core) and
      the kernels lib/ chose; every later figure is also given as a
      fraction of these;
  (a) GEMM: bench/gemm, the f32 engines against each other (sk_dot,
      oneDNN, OpenBLAS as it picks its kernels and with its core type set
      from the ISA);
  (b) MLP: samples/mlp.tdsl built by `shardc build` for 8 threads-backend
      devices, timed with the built program's --repeat, against the same
      global math as plain oneDNN calls (bench/mlp_blas.c);
  (f) attention: samples/attention.tdsl on 8 devices, against the FMA peak;
  (c) collectives: the threads backend's all-reduce, all-gather and
      all-to-all on 8 devices (bench/coll_threads.c) against OpenMPI on 8
      ranks (bench/coll_mpi.c) and against the memory-bandwidth bound (a
      STREAM copy on 2 threads, measured in the same run); small sizes (1 to
      64 KiB per device) again in alternating runs of both, best of
      SMALL_ROUNDS, on 8 devices and on as many devices as cores;
  (d) compile time: generated programs of about 1,000, 10,000 and 100,000
      IR instructions through `shardc dump --stage scheduled` and
      `shardc compile`;
  (e) collective matmuls against their auto-partitioned twins;
  (g) mixture of experts: samples/moe.tdsl (partitioned by the compiler)
      against moe_spmd's all-gather and all-to-all versions, moe_topk and
      moe_local (one device): time on both backends, bytes sent and peak
      bytes per device; its own section of the document ("bench/moe").
  (h) training: one step of samples/train_mlp.tdsl (data parallel and
      FSDP, Adam) and of samples/gpt.tdsl's train_step against their
      forward passes (the ratio should be near 3), as a fraction of the FMA
      peak, and FSDP's memory per device against data parallel's; its own
      section of the document ("bench/training").
  (k) the cost model: writes build/host.target (this machine as 8
      threads-backend devices: limits' peak and STREAM divided among them,
      the link fitted to coll_threads' all-gather, the GEMM efficiency by
      shape of gemm_shapes) and compares shardc's
      predicted time (`show --cost`) with every threads-backend time the
      other sections measured this run; its own section ("bench/cost").
  (l) auto-sharding: the data-parallel, Megatron and FSDP forms of mlp,
      train_mlp's sgd_dp, gpt's train_step and moe (bench/auto/*.tdsl)
      against the plan `shardc build --auto` chooses for the sample (against
      build/host.target; --shardc names another shardc): time on 8
      threads-backend devices, the auto plan's over the best hand form's
      (target at most 1.10), and the plan chosen; its own section
      ("bench/auto").  It runs before (k), which predicts its times too.
  (m) memory-bound loops: bench/loops.tdsl's layernorm, softmax, gelu,
      residual, SGD and Adam updates and casts, one fused loop each on one
      device per core, their bytes over their time as a fraction of the
      STREAM triad (target at least 0.7), each checked against NumPy; its
      own section ("bench/loops").

Prints every table and whether each target is met, and rewrites the
"bench/machine" and "bench/report" sections of the document (the machine
the numbers came from, then the results): --doc in place, or, with --out,
a copy of --doc written to --out (`make bench` writes
build/bench/performance.md so that a clone stays clean; `make bench-doc`
rewrites docs/performance.md).  Timings are informative: the
exit status is 0 whatever they are, and nonzero only when a benchmark fails
to run or computes a wrong result.

Usage: bench/report.py [--build DIR] [--doc FILE [--out FILE]] [--quick] [--only LETTERS] [--shardc PATH]
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The MLP sample at full size on a 2x4 mesh.
MLP_CONST = "B=1024,D=2048,F=8192"
MLP_MESH = "X=2,Y=4"
MLP_RUNS = 3
NDEV = 8

TARGET_GEMM_PEAK = 0.85    # sk_dot 2048^3 f32 / FMA peak, 1 core and every core
TARGET_MLP = 0.85          # sharded / plain oneDNN GFLOP/s
TARGET_MLP_PEAK = 0.75     # sharded MLP / every core's FMA peak
TARGET_ATTN_PEAK = 0.5     # sharded attention / every core's FMA peak
ATTN_CONST = "B=16,S=512,D=1024,H=16,K=64"
ATTN_MESH = "X=2,Y=4"
ATTN_LONG_CONST = "B=2,S=4096,D=1024,H=16,K=64"   # the attention sample at a long sequence
TARGET_AR_VS_MPI = 3.0     # threads all-reduce of 64 MiB: times faster than OpenMPI
TARGET_AR_BOUND = 0.8      # ... and at least this fraction of the bandwidth bound
SMALL_MIN, SMALL_MAX = 1 << 10, 64 << 10   # small collectives: threads no slower than OpenMPI
SMALL_ROUNDS = 3           # alternating runs of threads and OpenMPI at small sizes
COLL_KINDS = ("all-reduce", "all-gather", "all-to-all")
TARGET_COMPILE_10K = 1.0   # seconds for `shardc compile` at 10,000 instructions
LINEAR_SLACK = 2.0         # 10x the instructions may take at most 20x the time
# (i) cost against depth (issue 26): GPT train_step on small dims at L = 4,
# 48, 96; the RNN step (tests/codegen/progs/rnn.tdsl) at T = 200 and 1000.
DEPTH_GPT = "B=2,S=8,D=16,H=4,K=4,F=32,V=32"
DEPTH_LAYERS = (4, 48, 96)
DEPTH_STEPS = (200, 1000)
TARGET_DEPTH_COMPILE = 1.0  # seconds for `shardc compile` at any depth
TARGET_DEPTH_C = 1.5        # generated C at L = 48, 96 against L = 4's
TARGET_DEPTH_BUILD = 2.0    # `shardc build --no-cache` at L = 48, 96 against L = 4's
TARGET_RNN_BUILD = 10.0     # seconds to build the 1000-step RNN's training step
DEPTH_TIMEOUT = 600


def log(msg=""):
    print(msg, flush=True)


def run(cmd, timeout=None, env=None, check=True):
    """Runs cmd; returns (seconds, stdout, stderr)."""
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    t = time.monotonic() - t0
    if check and p.returncode != 0:
        raise RuntimeError("%s failed (status %d):\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:],
                                                           p.stderr[-2000:]))
    return t, p.stdout, p.stderr


def first_line(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def fmt_bytes(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%d %s" % (n // size, unit)
    return "%d B" % n


def fmt_time(s):
    if s >= 1:
        return "%.2f s" % s
    if s >= 1e-3:
        return "%.2f ms" % (s * 1e3)
    return "%.1f us" % (s * 1e6)


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def prose(text):
    """Wraps each paragraph of text (not tables or lists) at 100 columns."""
    import textwrap
    out = []
    for para in text.split("\n\n"):
        if para.startswith(("|", "- ", "#", "<!--")) or not para.strip():
            out.append(para)
        else:
            out.append(textwrap.fill(para, 100, break_long_words=False, break_on_hyphens=False))
    return "\n\n".join(out)


def met(ok):
    return "met" if ok else "NOT met"


# ---- the machine ----

def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = "%.0f GiB" % (kb / 2**20)
    except (OSError, ValueError, IndexError):
        pass
    cc = os.environ.get("CC", "cc")
    blas = "unknown"
    try:
        import ctypes
        import ctypes.util
        lib = ctypes.CDLL(ctypes.util.find_library("openblas") or "libopenblas.so.0")
        lib.openblas_get_config.restype = ctypes.c_char_p
        blas = lib.openblas_get_config().decode()
    except (OSError, AttributeError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 1,
        "memory": mem,
        "kernel": platform.release(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cc": first_line([cc, "--version"]),
        "blas": blas,
        "mpi": first_line(["mpirun", "--version"]) if shutil.which("mpirun") else "not installed",
        "load": "%.2f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else "?",
    }


def bench_limits(build):
    """bench/limits: `name value` lines."""
    _, out, _ = run([os.path.join(build, "bench", "limits")], timeout=300)
    lim = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    for k in ("fma_peak_1", "fma_peak_all", "stream_triad_all", "bf16_peak_1", "bf16_peak_all"):
        if k in lim:
            lim[k] = float(lim[k])
    return lim


def bf16_limits(lim):
    """The machine section's words for the bf16 peak."""
    if lim.get("bf16_unit", "none") == "none":
        return "no bf16 unit (neither AMX nor AVX512-BF16): bf16 dots are widened to the f32 GEMM"
    return "bf16 peak (%s) %.1f GFLOP/s on one core, %.1f on all %s" % (
        lim["bf16_unit"], lim["bf16_peak_1"], lim["bf16_peak_all"], lim["cores"])


# ---- (a) GEMM ----

# The OpenBLAS core type whose kernels fit each ISA bench/limits names.
OPENBLAS_CORE_FOR_ISA = {"avx512_amx": "SkylakeX", "avx512_bf16": "SkylakeX", "avx512": "SkylakeX",
                         "avx2": "Haswell", "sse4.1": "Nehalem"}


def bench_gemm(build, lim, quick):
    """bench/gemm as built, then with OpenBLAS's core type set from the ISA:
    {(threads, engine): GFLOP/s}, and the core types."""
    cmd = [os.path.join(build, "bench", "gemm")] + (["512"] if quick else [])
    rates, cores = {}, {}
    core = OPENBLAS_CORE_FOR_ISA.get(lim["isa"])
    for label, env in (("", None), (" (core type from ISA)", dict(os.environ, OPENBLAS_CORETYPE=core))):
        if env is not None and core is None:
            continue
        _, out, _ = run(cmd, env=env, timeout=600)
        for line in out.splitlines():
            f = line.split()
            if f[0] == "gemm" and (label == "" or f[2] == "cblas_sgemm"):
                rates[(int(f[1]), f[2] + label)] = float(f[3])
            elif f[0] == "openblas_core":
                cores[label] = f[1]
    return {"rates": rates, "cores": cores, "dim": 512 if quick else 2048}


def gemm_section(g, lim, summary):
    peak = {1: lim["fma_peak_1"], int(lim["cores"]): lim["fma_peak_all"]}
    names = {"sk_dot": "`sk_dot` (shardc, as chosen: oneDNN)", "dnnl_sgemm": "`dnnl_sgemm` (oneDNN 2.6 direct)",
             "cblas_sgemm": "`cblas_sgemm`, OpenBLAS as it picks (%s kernels)" % g["cores"].get("", "?"),
             "cblas_sgemm (core type from ISA)": "`cblas_sgemm`, OpenBLAS with `OPENBLAS_CORETYPE=%s`" %
             g["cores"].get(" (core type from ISA)", "?")}
    rows = []
    for (threads, eng), rate in sorted(g["rates"].items()):
        if eng in names and threads in peak:
            rows.append((names[eng], threads, "%.1f" % rate, "%.2f" % (rate / peak[threads])))
    tab = table(("engine", "threads", "GFLOP/s", "fraction of FMA peak"), rows)
    log(tab)
    for threads in sorted(peak):
        rate = g["rates"].get((threads, "sk_dot"))
        if rate:
            frac = rate / peak[threads]
            summary.append(("(a) GEMM %d^3 f32, %d thread%s: fraction of FMA peak (target >= %.2f)" %
                            (g["dim"], threads, "" if threads == 1 else "s", TARGET_GEMM_PEAK),
                            "%.2f (%.1f of %.1f GFLOP/s)" % (frac, rate, peak[threads]), met(frac >= TARGET_GEMM_PEAK)))
    bf16 = g["rates"].get((1, "sk_dot_bf16"))
    bf16_words = "-"
    if bf16:
        bf16_words = "%.1f GFLOP/s" % bf16
        if lim.get("bf16_peak_1"):
            bf16_words += ", %.2f of the bf16 peak (%s, %.1f on one core)" % (
                bf16 / lim["bf16_peak_1"], lim["bf16_unit"], lim["bf16_peak_1"])
        else:
            bf16_words += " (no bf16 unit: widened to the f32 GEMM), %.2f of the f32 FMA peak" % (
                bf16 / lim["fma_peak_1"])
    return ("## GEMM engines\n\n"
            "bench/gemm.c: one f32 einsum `out[m,n] = x[m,k] * w[k,n]`, m = n = k = %d, best of 5 runs of each "
            "engine in turn, at 1 thread and at every core, each against the FMA peak of as many "
            "cores (bench/limits.c). The second OpenBLAS row is the same program run again with OpenBLAS's "
            "core type set from the ISA, as a user who knows to would. shardc runs f32 GEMMs on oneDNN: "
            "it picks its kernels from the ISA CPUID reports, so its speed does not depend on the CPU's "
            "model name (docs/kernels.md).\n\n%s\n"
            "The bf16 einsum (1024^3, `sk_dot`, one thread; the engine is in the kernels line above): "
            "%s.\n\n" % (g["dim"], tab, bf16_words))


# ---- (b) the MLP sample ----

def parse_time(stderr):
    m = re.search(r"time: best ([\d.e+-]+) s, median ([\d.e+-]+) s over (\d+) run", stderr)
    return (float(m.group(1)), float(m.group(2)), int(m.group(3))) if m else None


def bench_mlp(build, work, quick):
    import numpy as np
    shardc = os.path.join(build, "shardc")
    sample = os.path.join(ROOT, "samples", "mlp.tdsl")
    const = "B=256,D=512,F=2048" if quick else MLP_CONST
    B, D, F = (int(v.split("=")[1]) for v in const.split(","))
    prog = os.path.join(work, "mlp")
    run([shardc, "build", sample, "--fn", "mlp", "--mesh", MLP_MESH, "--const", const, "-o", prog])
    rng = np.random.default_rng(0)
    files = {}
    for name, shape, scale in (("x", (B, D), 1.0), ("w_in", (D, F), D ** -0.5), ("w_out", (F, D), F ** -0.5)):
        files[name] = os.path.join(work, name + ".npy")
        np.save(files[name], (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32))
    flop = 2.0 * B * D * F * 2
    ins = [a for n in ("x", "w_in", "w_out") for a in ("--in", "%s=%s" % (n, files[n]))]
    res = {"flop": flop, "const": const}

    # The baseline: plain oneDNN (every core) and a gelu loop over the cores.
    _, _, err = run([os.path.join(build, "bench", "mlp_blas"), files["x"], files["w_in"], files["w_out"],
                     os.path.join(work, "blas"), str(MLP_RUNS)])
    res["blas"] = parse_time(err)

    # The sharded program as built (it shares the cores among its devices'
    # GEMMs), and with every device's GEMMs asking for every core, for
    # comparison.
    cores = str(os.cpu_count() or 1)
    for key, extra_env in (("sharded", {}), ("sharded_all", {"OMP_NUM_THREADS": cores})):
        env = dict(os.environ, **extra_env)
        wall, _, err = run([prog] + ins + ["--out", os.path.join(work, key), "--repeat", str(MLP_RUNS)], env=env)
        t = parse_time(err)
        if t is None:
            # A program without --repeat: the whole run, minus a run that
            # does the I/O of the same files but no device work is not
            # available, so the whole run is reported and marked.
            res["note"] = "built program has no --repeat: whole runs, file I/O included"
            t = (wall, wall, 1)
        res[key] = t
    if "note" not in res:
        measured(sample, "mlp", const, MLP_MESH, res["sharded"][0])
    a = np.load(os.path.join(work, "blas", "result0.npy"))
    for key in ("sharded", "sharded_all"):
        b = np.load(os.path.join(work, key, "result0.npy"))
        err = float(np.abs(a - b).max() / max(1.0, float(np.abs(a).max())))
        res[key + "_err"] = err
        if not err < 1e-4:
            raise RuntimeError("MLP: the sharded result differs from oneDNN's by %.2e (relative)" % err)
    return res


# ---- (c) collectives ----

def parse_coll(text):
    stream, times = None, {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "stream-copy":
            stream = float(f[2])
            times["stream-threads"] = int(f[1])
        elif len(f) == 5 and f[0] in ("threads", "mpi"):
            times[(f[0], f[1], int(f[2]))] = float(f[3])
    return stream, times


def mpirun_cmd(np_):
    cmd = ["mpirun"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if np_ > (os.cpu_count() or 1):
        # More ranks than cores: idle ranks must not spin.
        cmd += ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
    return cmd + ["-np", str(np_)]


def merge_best(times, new):
    for key, t in new.items():
        if isinstance(key, tuple):
            times[key] = min(t, times.get(key, t))


def bench_coll(build, quick):
    top = str((4 if quick else 64) << 20)
    _, out, _ = run([os.path.join(build, "bench", "coll_threads"), top], timeout=600)
    stream, times = parse_coll(out)
    mpi = os.path.join(build, "bench", "coll_mpi")
    mpi_note = None
    have_mpi = os.path.exists(mpi) and shutil.which("mpirun")
    if have_mpi:
        try:
            _, out, _ = run(mpirun_cmd(NDEV) + [mpi, top], timeout=900)
            times.update(parse_coll(out)[1])
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            mpi_note = "OpenMPI run failed: %s" % str(e).splitlines()[0]
            have_mpi = False
    else:
        mpi_note = "OpenMPI is not installed (no mpicc/mpirun): no MPI column"
    # Small sizes again, threads and OpenMPI alternating, best of
    # SMALL_ROUNDS (the machine may be busy: the two see the same load).
    small = {}
    cores = os.cpu_count() or 1
    for ndev in sorted({NDEV, min(cores, NDEV)}, reverse=True):
        best = {}
        for _ in range(1 if quick else SMALL_ROUNDS):
            # Bound to cores as OpenMPI binds its ranks when they fit
            # (mpirun's default; mpirun_cmd unbinds only past the cores).
            _, out, _ = run([os.path.join(build, "bench", "coll_threads"), str(SMALL_MAX), str(SMALL_MIN), "all",
                             str(ndev)], timeout=600, env=dict(os.environ, SHARDC_BIND="core"))
            merge_best(best, parse_coll(out)[1])
            if have_mpi:
                try:
                    _, out, _ = run(mpirun_cmd(ndev) + [mpi, str(SMALL_MAX), str(SMALL_MIN)], timeout=600)
                    merge_best(best, parse_coll(out)[1])
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    log("OpenMPI run on %d ranks failed: %s" % (ndev, str(e).splitlines()[0]))
        if ndev == NDEV:
            # One set of numbers: the main tables and this one show the best of all runs.
            merge_best(times, best)
            best = {key: t for key, t in times.items() if isinstance(key, tuple) and SMALL_MIN <= key[2] <= SMALL_MAX}
        small[ndev] = best
    return {"stream": stream, "stream_threads": times.pop("stream-threads", 2), "times": times,
            "mpi_note": mpi_note, "small": small}


def small_section(small, ndev):
    """The small sizes' table for ndev devices and whether threads is no
    slower than OpenMPI at every size and kind (None without MPI)."""
    rows, ok, worst = [], None, None
    for kind in COLL_KINDS:
        for s in sorted(sz for (impl, k, sz) in small if impl == "threads" and k == kind):
            th = small[("threads", kind, s)]
            mp = small.get(("mpi", kind, s))
            if mp:
                ok = (ok is None or ok) and th <= mp
                worst = mp / th if worst is None else min(worst, mp / th)
            rows.append((kind, fmt_bytes(s), fmt_time(th), fmt_time(mp) if mp else "-",
                         "%.2f" % (mp / th) if mp else "-"))
    return table(("collective", "bytes per device", "threads", "OpenMPI", "OpenMPI / threads"), rows), ok, worst


# ---- (e) collective matmuls against their auto-partitioned twins ----

# (sample, the spmd fn, its fn twin, parameters as (name, rows, cols) of B, D, F)
COLLMM = [
    ("collective_matmul", "collective_matmul", "matmul", (("lhs", "B", "D"), ("rhs", "D", "F"))),
    ("bidirectional_matmul", "collective_matmul_bidir", "matmul_ag", (("lhs", "B", "D"), ("rhs", "D", "F"))),
    ("allreduce_matmul", "allreduce_matmul", "allreduce_matmul_twin", (("lhs", "B", "D"), ("rhs", "D", "F"))),
    ("allreduce_matmul", "allreduce_matmul_rows", "allreduce_matmul_twin", (("lhs", "B", "D"), ("rhs", "D", "F"))),
    ("reduce_scatter_matmul", "reduce_scatter_matmul", "reduce_scatter_matmul_twin",
     (("lhs", "B", "D"), ("rhs", "D", "F"))),
    ("bidirectional_matmul", "reduce_scatter_matmul_bidir", "matmul_rs", (("lhs", "B", "D"), ("rhs", "D", "F"))),
    ("collective_mlp", "collective_mlp", "mlp_block", (("x", "B", "D"), ("w_in", "D", "F"), ("w_out", "F", "D"))),
]


def mesh_flags(mesh):
    return ["--mesh", mesh] if mesh else []


def scheduled_numbers(shardc, sample, fn, const, mesh=MLP_MESH):
    """(peak bytes per device, bytes sent per device or None) from the
    scheduled dump of fn."""
    _, out, _ = run([shardc, "dump", sample, "--stage", "scheduled", "--fn", fn, "--const", const] + mesh_flags(mesh))
    sent = re.search(r"total bytes sent per device by \S+: (\d+)", out)
    return int(re.search(r"peak bytes per device of \S+: (\d+)", out).group(1)), int(sent.group(1)) if sent else None


def peak_bytes(shardc, sample, fn, const):
    return scheduled_numbers(shardc, sample, fn, const)[0]


def time_program(shardc, work, sample, fn, const, mesh, backend, ins, repeat=3, record=True):
    """(best time of the device phase, its results) of fn built for the mesh
    (None: a program without one) and backend; recorded for section k's
    predictions unless record is false."""
    import numpy as np
    prog = os.path.join(work, "%s-%s" % (fn, backend))
    run([shardc, "build", sample, "--fn", fn, "--const", const, "--backend", backend, "-o", prog] + mesh_flags(mesh))
    out = os.path.join(work, "out-%s-%s" % (fn, backend))
    cmd = ([prog] if backend == "threads" else mpirun_cmd(NDEV) + [prog]) + ins + ["--out", out, "--repeat", str(repeat)]
    _, _, err = run(cmd, timeout=900)
    results = sorted(f for f in os.listdir(out) if re.match(r"result\d+\.npy$", f))
    got = [np.load(os.path.join(out, f)) for f in results]
    if backend == "threads" and record:
        measured(sample, fn, const, mesh, parse_time(err)[0])
    return parse_time(err)[0], got[0] if len(got) == 1 else got


# ---- (f) the attention sample ----

def bench_attention(build, work, const):
    """samples/attention.tdsl on 8 devices at sizes const: best time, GFLOP
    per run, the largest relative difference from NumPy's result (computed
    a head at a time: at S = 4096 the scores of all heads would not fit),
    and the scheduler's peak bytes per device."""
    import numpy as np
    c = {k: int(v) for k, v in (kv.split("=") for kv in const.split(","))}
    B, S, D, H, K = c["B"], c["S"], c["D"], c["H"], c["K"]
    rng = np.random.default_rng(1)
    arrays = {"x": rng.standard_normal((B, S, D), dtype=np.float32)}
    for w in ("wq", "wk", "wv"):
        arrays[w] = rng.standard_normal((D, H, K), dtype=np.float32) * np.float32(D ** -0.5)
    arrays["wo"] = rng.standard_normal((H, K, D), dtype=np.float32) * np.float32((H * K) ** -0.5)
    ins = []
    for name, a in arrays.items():
        path = os.path.join(work, name + ".npy")
        np.save(path, a)
        ins += ["--in", "%s=%s" % (name, path)]
    sample = os.path.join(ROOT, "samples", "attention.tdsl")
    t, got = time_program(os.path.join(build, "shardc"), work, sample, "attention", const, ATTN_MESH, "threads", ins)
    x = arrays["x"].astype(np.float64)
    want = np.zeros((B, S, D))
    for h in range(H):
        q, k, v = (np.einsum("bsd,dk->bsk", x, arrays[w][:, h], optimize=True) for w in ("wq", "wk", "wv"))
        logits = np.einsum("bsk,btk->bst", q, k, optimize=True) * 0.125
        e = np.exp(logits - logits.max(axis=2, keepdims=True))
        want += np.einsum("bst,btk,kd->bsd", e / e.sum(axis=2, keepdims=True), v, arrays["wo"][h], optimize=True)
    err = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
    if not err < 1e-4:
        raise RuntimeError("attention: the sharded result differs from NumPy's by %.2e (relative)" % err)
    flop = 2.0 * B * S * H * K * (4 * D + 2 * S)
    peak, _ = scheduled_numbers(os.path.join(build, "shardc"), sample, "attention", const, ATTN_MESH)
    nx, ny = (int(v.split("=")[1]) for v in ATTN_MESH.split(","))
    scores = 4 * (B // nx) * (H // ny) * S * S       # one [B, H, S, S] f32 array per device
    return {"time": t, "flop": flop, "rate": flop / t * 1e-9, "const": const, "err": err, "peak": peak,
            "scores": scores}


def bench_collmm(build, work, quick):
    """Each collective matmul and its twin (which the partitioner lowers to
    an all-gather or reduce-scatter and one matmul): time on each backend
    and peak bytes per device."""
    import numpy as np
    shardc = os.path.join(build, "shardc")
    const = "B=128,D=256,F=512" if quick else MLP_CONST
    size = dict(v.split("=") for v in const.split(","))
    backends = ["threads"] + (["mpi"] if os.path.exists(os.path.join(build, "libshardc_rt_mpi.a")) else [])
    rng = np.random.default_rng(0)
    rows = []
    for name, fn, twin, params in COLLMM:
        sample = os.path.join(ROOT, "samples", name + ".tdsl")
        ins = []
        for p, r, c in params:
            f = os.path.join(work, "%s-%s.npy" % (name, p))
            if not os.path.exists(f):
                a = rng.standard_normal((int(size[r]), int(size[c])), dtype=np.float32) * int(size[r]) ** -0.5
                np.save(f, a.astype(np.float32))
            ins += ["--in", "%s=%s" % (p, f)]
        row = {"fn": fn, "twin": twin, "peak": peak_bytes(shardc, sample, fn, const),
               "twin_peak": peak_bytes(shardc, sample, twin, const)}
        for b in backends:
            t, got = time_program(shardc, work, sample, fn, const, MLP_MESH, b, ins)
            tt, want = time_program(shardc, work, sample, twin, const, MLP_MESH, b, ins)
            err = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
            if not err < 1e-4:
                raise RuntimeError("%s differs from %s by %.1e (relative)" % (fn, twin, err))
            row[b] = (t, tt)
        log("%s: %s" % (fn, ", ".join("%s %s vs %s" % (b, fmt_time(row[b][0]), fmt_time(row[b][1]))
                                      for b in backends)))
        rows.append(row)
    return {"const": const, "backends": backends, "rows": rows}


def collmm_section(r):
    trows = []
    for row in r["rows"]:
        cells = ["`%s` / `%s`" % (row["fn"], row["twin"])]
        for b in r["backends"]:
            t, tt = row[b]
            cells += [fmt_time(t), fmt_time(tt), "%.2f" % (tt / t)]
        cells += [fmt_bytes(row["peak"]), fmt_bytes(row["twin_peak"]), "%.2f" % (row["twin_peak"] / row["peak"])]
        trows.append(cells)
    head = ["collective / twin"]
    for b in r["backends"]:
        head += ["%s" % b, "%s, twin" % b, "twin / collective"]
    head += ["peak per device", "twin's peak", "twin / collective"]
    tab = table(head, trows)
    log(tab)
    return ("## Collective matmuls against all-gather or reduce-scatter + matmul\n\n"
            "Each `spmd fn` of the worked problems (samples/collective_matmul.tdsl, bidirectional_matmul.tdsl, "
            "allreduce_matmul.tdsl, reduce_scatter_matmul.tdsl, collective_mlp.tdsl) against its `fn` twin, "
            "which the partitioner lowers to one all-gather or reduce-scatter (or all-reduce) and one matmul; "
            "`--const %s --mesh %s`, built with `shardc build --backend B` and run with `--repeat 3` (best "
            "time of the device phase; MPI under `%s`). Peak bytes per device are the scheduler's "
            "(`shardc dump --stage scheduled`, parameters not included). Ratios above 1 favour the collective "
            "version. On this 2-core machine 8 devices share 2 cores, so overlapping communication with "
            "compute saves little time, while the collective versions do more, smaller GEMMs. Their peak "
            "memory is at or below their twins': each step reads its block of the weights where it lies (a "
            "view, strided for a column block) and adds its product into the accumulator (docs/scheduling.md), "
            "the reduce-scatter versions never hold the full partial product, and both all-reduce versions "
            "write each tile's product and its all-reduce, in place, into the tile's part of the result: "
            "`allreduce_matmul_rows` into its rows, `allreduce_matmul` into its column block (the dot stores "
            "with the result's row stride and the runtime reduces the strided block where it lies), so each "
            "holds only its result, as the twin does. Each product of the row tiles reads all of `rhs`, of the "
            "column tiles only its column block; the row tiles' `[128,512] x [512,8192]` products ran at half "
            "their rate (0.52 of the twin) until the kernel library copied operands that oneDNN's no-copy "
            "kernels read at a stride of a multiple of 1 KiB (docs/kernels.md, \"Padded rows\")."
            "\n\n%s\n" % (r["const"], MLP_MESH, " ".join(mpirun_cmd(NDEV)), tab))


# ---- (m) memory-bound loops against the STREAM triad ----

LOOPS_CONST = "R=8192,D=1024"
TARGET_LOOPS = 0.7
# Runs of a few ms each: the best of 30 rather than 5, since on a shared VM a
# loop's best of 5 moved by half between runs (2026-11-29: gelu_bias 0.29-0.50).
LOOPS_REPEAT = 30


def gelu_tanh(x):
    import numpy as np
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def bench_loops(build, work, quick):
    """Each fn of bench/loops.tdsl on one device per core: its best time, the
    bytes its parameters and results hold (read once, written once), and
    the largest relative difference from NumPy's result."""
    import numpy as np
    shardc = os.path.join(build, "shardc")
    src = os.path.join(ROOT, "bench", "loops.tdsl")
    const = "R=64,D=128" if quick else LOOPS_CONST
    R, D = (int(v.split("=")[1]) for v in const.split(","))
    rng = np.random.default_rng(3)
    a = {k: rng.standard_normal((R, D), dtype=np.float32) for k in ("x", "y", "w", "g", "m")}
    a["v"] = np.abs(rng.standard_normal((R, D), dtype=np.float32))
    for k in ("gain", "shift", "b"):
        a[k] = rng.standard_normal(D, dtype=np.float32)
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from shardc._convert import bf16_bits, bf16_float
    xb = bf16_float(bf16_bits(a["x"]))       # x rounded to bf16, nearest even
    paths = {}
    for k, arr in list(a.items()) + [("xb", xb.astype(np.float64))]:   # xb: exact in bf16, --cast rounds nothing
        paths[k] = os.path.join(work, k + ".npy")
        np.save(paths[k], arr)
    x64, g64 = a["x"].astype(np.float64), a["g"].astype(np.float64)
    mu = x64.mean(axis=1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=1, keepdims=True)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    m2 = 0.9 * a["m"] + 0.1 * g64
    v2 = 0.999 * a["v"] + 0.001 * g64 ** 2
    # (fn, its parameters, bytes per element read and written, NumPy's results)
    loops = [
        ("layernorm", ("x", "gain", "shift"), 8, [(x64 - mu) / np.sqrt(var + 1e-5) * a["gain"] + a["shift"]]),
        ("softmax_rows", ("x",), 8, [e / e.sum(axis=1, keepdims=True)]),
        ("gelu_bias", ("x", "b"), 8, [gelu_tanh(x64 + a["b"])]),
        ("residual", ("x", "y"), 12, [x64 + a["y"]]),
        ("sgd", ("w", "g"), 12, [a["w"] - 0.01 * g64]),
        ("adam", ("w", "g", "m", "v"), 28, [a["w"] - 0.001 * m2 / (np.sqrt(v2) + 1e-8), m2, v2]),
        ("to_bf16", ("x",), 6, [xb]),
        ("from_bf16", ("xb",), 6, [xb]),
    ]
    rows = []
    for fn, params, per_elem, want in loops:
        ins = []
        for p in params:
            ins += ["--in", "%s=%s" % ("x" if p == "xb" else p, paths[p])]
        if "xb" in params:
            ins.append("--cast")
        t, got = time_program(shardc, work, src, fn, const, None, "threads", ins, repeat=LOOPS_REPEAT, record=False)
        got = got if isinstance(got, list) else [got]
        err = max(float(np.abs(g.astype(np.float64) - w).max() / max(1.0, float(np.abs(w).max())))
                  for g, w in zip(got, want))
        if not err < 1e-4:
            raise RuntimeError("bench/loops.tdsl %s differs from NumPy's by %.1e (relative)" % (fn, err))
        rows.append({"fn": fn, "bytes": per_elem * R * D, "time": t, "err": err})
        log("%s: %s, %s" % (fn, fmt_time(t), fmt_bytes(per_elem * R * D)))
    return {"const": const, "rows": rows}


def loops_section(r, lim, summary):
    stream = lim["stream_triad_all"] * 1e9
    trows, worst = [], None
    for row in r["rows"]:
        rate = row["bytes"] / row["time"]
        frac = rate / stream
        worst = frac if worst is None else min(worst, frac)
        trows.append(("`%s`" % row["fn"], fmt_bytes(row["bytes"]), fmt_time(row["time"]), "%.1f" % (rate * 1e-9),
                      "%.2f" % frac, "%.0e" % row["err"]))
    tab = table(("loop", "bytes read + written", "best", "GB/s", "of the STREAM triad", "difference from NumPy"),
                trows)
    log(tab)
    summary.append(("(m) memory-bound loops, the worst fraction of the STREAM triad (target >= %.1f)" % TARGET_LOOPS,
                    "%.2f" % worst, met(worst >= TARGET_LOOPS)))
    return ("## Memory-bound loops against the STREAM triad\n\n"
            "The elementwise and row loops of a training step (bench/loops.tdsl: layernorm, softmax over rows, "
            "gelu of a biased input, a residual add, the SGD and Adam updates, casts between f32 and bf16), each "
            "a fn of one fused loop, `--const %s` with the rows split over 2 devices, one per core, built with "
            "`shardc build` and run with `--repeat %d` (best time of the device phase). Bytes are what the "
            "loop must move, its parameters read once and its results written once (STREAM's convention: "
            "no count of the cache lines a store reads first), and the rate is a fraction of the STREAM "
            "triad on every core measured in the same run (bench/limits.c: %.1f GB/s); target >= %.1f. Each "
            "result is checked against NumPy's.\n\n%s\n"
            % (r["const"], LOOPS_REPEAT, lim["stream_triad_all"], TARGET_LOOPS, tab))


# ---- (g) mixture of experts: the MoE samples against the auto-partitioned moe ----

MOE_CONST = "E=8,S=4096,D=1024,F=2048"
MOE_QUICK = "E=8,S=128,D=64,F=128"

# (sample, fn, extra consts given S as s, E as e; whether its result is moe's)
MOE_VARIANTS = [
    ("moe", "moe", "", "same"),
    ("moe_spmd", "moe_gather", "", "same"),
    ("moe_spmd", "moe_dispatch", "C=%(half)d", "same"),   # C = S / X: nothing drops
    ("moe_topk", "moe_topk", "K=2", None),
    ("moe_local", "moe_local", "C=%(cap)d", "kept"),      # capacity factor 2: drops some
]


def moe_inputs(work, size, rng):
    import numpy as np
    e, s, d, f = (size[k] for k in "ESDF")
    arrays = {"w": rng.standard_normal((e, d, f), dtype=np.float32) * np.float32(d ** -0.5),
              "a": rng.standard_normal((s, d), dtype=np.float32),
              "route": rng.integers(0, e, s).astype(np.int32),
              "router": rng.standard_normal((d, e), dtype=np.float32) * np.float32(d ** -0.5)}
    files = {}
    for name, a in arrays.items():
        files[name] = os.path.join(work, name + ".npy")
        np.save(files[name], a)
    return files


def moe_check(fn, how, got, want):
    """moe_gather and moe_dispatch compute moe's result; moe_local the rows
    it kept (the others are zeros), as many dropped as it counts."""
    import numpy as np
    out = got[0] if isinstance(got, list) else got
    rows = np.abs(out).max(axis=1) > 0 if how == "kept" else np.ones(len(out), bool)
    if how == "kept" and int(got[1]) != int(np.sum(~rows)):
        raise RuntimeError("%s counts %d dropped tokens, but %d rows are zeros" % (fn, int(got[1]), np.sum(~rows)))
    err = float(np.abs(out[rows] - want[rows]).max() / max(1.0, float(np.abs(want).max())))
    if not err < 1e-4:
        raise RuntimeError("%s differs from moe by %.1e (relative)" % (fn, err))


def bench_moe(build, work, quick):
    """Each MoE variant on the 2x4 mesh (moe_local on one device): time on
    each backend, bytes sent and peak bytes per device, checked against moe."""
    import numpy as np
    shardc = os.path.join(build, "shardc")
    base = MOE_QUICK if quick else MOE_CONST
    size = {k: int(v) for k, v in (kv.split("=") for kv in base.split(","))}
    params = {"half": size["S"] // 2, "cap": 2 * size["S"] // size["E"]}
    files = moe_inputs(work, size, np.random.default_rng(3))
    backends = ["threads"] + (["mpi"] if os.path.exists(os.path.join(build, "libshardc_rt_mpi.a")) else [])
    rows, want = [], None
    for name, fn, extra, how in MOE_VARIANTS:
        sample = os.path.join(ROOT, "samples", name + ".tdsl")
        const = base + ("," + extra % params if extra else "")
        mesh = None if fn == "moe_local" else MLP_MESH
        names = ("w", "router", "a") if fn == "moe_topk" else ("w", "a", "route")
        ins = [x for n in names for x in ("--in", "%s=%s" % (n, files[n]))]
        peak, sent = scheduled_numbers(shardc, sample, fn, const, mesh)
        row = {"fn": fn, "const": const, "peak": peak, "sent": sent or 0, "devices": 1 if mesh is None else NDEV}
        for b in (backends if mesh else ["threads"]):
            t, got = time_program(shardc, work, sample, fn, const, mesh, b, ins)
            if fn == "moe" and b == "threads":
                want = got
            elif how:
                moe_check(fn, how, got, want)
            row[b] = t
        log("%s: %s, %s sent, peak %s" % (fn, ", ".join("%s %s" % (b, fmt_time(row[b])) for b in backends if b in row),
                                          fmt_bytes(row["sent"]), fmt_bytes(peak)))
        rows.append(row)
    _, out, _ = run([shardc, "dump", os.path.join(ROOT, "samples", "moe.tdsl"), "--stage", "partitioned",
                     "--const", base, "--mesh", MLP_MESH])
    note = re.search(r"  # ((?:a masked gather|the table all-gathered).*)", out)
    return {"const": base, "size": size, "backends": backends, "rows": rows, "params": params,
            "choice": note.group(1) if note else "no note"}


def moe_section(r, lim):
    twin = r["rows"][0]
    trows = []
    for row in r["rows"]:
        cells = ["`%s`%s" % (row["fn"], " (1 device)" if row["devices"] == 1 else "")]
        for b in r["backends"]:
            cells += [fmt_time(row[b]) if b in row else "-",
                      "%.2f" % (twin[b] / row[b]) if b in row else "-"]
        cells += [fmt_bytes(row["sent"]), "%.2f" % (twin["sent"] / row["sent"]) if row["sent"] else "-",
                  fmt_bytes(row["peak"]), "%.2f" % (twin["peak"] / row["peak"])]
        trows.append(cells)
    head = ["variant"]
    for b in r["backends"]:
        head += [b, "moe / variant"]
    head += ["sent per device", "moe / variant", "peak per device", "moe / variant"]
    tab = table(head, trows)
    log(tab)
    s = r["size"]
    flop = 2.0 * s["S"] * s["D"] * s["F"]
    rate = flop / twin["threads"] * 1e-9
    return ("## Mixture of experts\n\n"
            "The MoE samples (docs/partitioning.md, \"Partial sums kept past a dot\") at `--const %s` on "
            "`--mesh %s`, routes uniform over the experts, built with `shardc build --backend B` and run with "
            "`--repeat 3` (best time of the device phase; MPI under `%s`): `moe`, partitioned by the compiler "
            "(its dump's note on the expert gather: \"%s\"; either way the gather is folded into the dot, "
            "`sk_gather_dot`); `moe_gather` and `moe_dispatch`, the same written as `spmd fn`s (all-gathering "
            "the tokens; sending them to their experts' devices and back with `all_to_all` at capacity "
            "`C=%d`, so nothing drops; both multiply more rows than `moe`: every gathered token, masked "
            "after, and every slot, empty ones too); `moe_topk` (a router, two experts per token: twice the products); "
            "`moe_local` on one device (one-hot, `cumsum`, scatter into `[E, C, D]` with `C=%d`, twice the "
            "fair share, one batched matmul: the way capacity-based layers are written, doing `E * C / S` = "
            "%.0fx the products of `moe`, and dropping the tokens past capacity). Every result is checked "
            "against `moe`'s (for `moe_local`, the rows it kept). Bytes and peaks are the scheduled dump's "
            "(parameters not included). Ratios above 1 favour the variant. `moe` runs the %.1f GFLOP of its products "
            "at %.1f GFLOP/s on the threads backend, %.2f of every core's FMA peak (%.1f GFLOP/s).\n\n%s\n"
            % (r["const"], MLP_MESH, " ".join(mpirun_cmd(NDEV)), r["choice"], r["params"]["half"],
               r["params"]["cap"], s["E"] * r["params"]["cap"] / s["S"], flop * 1e-9, rate, rate / lim["fma_peak_all"], lim["fma_peak_all"], tab))


# ---- (h) training steps against their forward passes ----

TRAIN_CONST = "B=8192,D=512,H=2048,O=512"
TRAIN_QUICK = "B=256,D=32,H=128,O=32"
GPT_CONST = "B=8,S=128,D=512,H=8,K=64,F=2048,V=4096,L=4"
GPT_QUICK = "B=2,S=16,D=32,H=4,K=8,F=64,V=64,L=2"
# (sample, step, forward, FLOP of the forward, FLOP of the step as the
# ideal backward pass needs them)
def mlp_flop(c):
    fwd = 2.0 * c["B"] * (c["D"] * c["H"] + c["H"] * c["O"])
    return fwd, fwd + 2.0 * c["B"] * (c["D"] * c["H"] + 2 * c["H"] * c["O"])   # no gradient of x


def gpt_flop(c):
    b, s, d, h, k, f, v, l = (c[x] for x in "BSDHKFVL")
    per_layer = 2.0 * b * s * (4 * d * h * k + 2 * d * f) + 4.0 * b * h * s * s * k
    fwd = l * per_layer + 2.0 * b * s * d * v
    return fwd, 3 * fwd


def signature_inputs(shardc, work, sample, fn, const, rng, ints):
    """Random .npy inputs for fn's parameters (--in flags), and the bytes of
    parameters per device (global shapes divided by their shardings)."""
    import numpy as np
    _, out, _ = run([shardc, "dump", sample, "--stage", "partitioned", "--fn", fn, "--const", const,
                     "--mesh", MLP_MESH])
    sig = [l for l in out.splitlines() if l.startswith("partitioned fn %s(" % fn)][0].split(" -> ")[0]
    sizes = dict(kv.split("=") for kv in MLP_MESH.split(","))
    flags, local = [], 0
    for name, dtype, dims, sh in re.findall(r"([\w.]+): (\w+)\[([\d,]*)\](?: \{([^}]*)\})?", sig):   # a record's p.w1
        shape = tuple(int(x) for x in dims.split(",") if x)
        path = os.path.join(work, "%s-%s.npy" % (fn, name))
        if dtype == "i32":
            a = rng.integers(0, ints, shape).astype(np.int32)
        elif name == "t":
            a = np.zeros(shape, np.float32)
        elif name.startswith(("v_", "v.")) and "adam" in fn:
            a = np.full(shape, 1e-3, np.float32)         # Adam's second moments: positive
        else:
            a = (rng.standard_normal(shape) * (0.02 if len(shape) > 1 else 1.0)).astype(np.float32)
        np.save(path, a)
        flags += ["--in", "%s=%s" % (name, path)]
        n = a.nbytes
        for d, part in enumerate(re.findall(r"\([^)]*\)|[^,]+", sh) if shape else []):
            for axis in re.findall(r"\w+", part):
                n //= int(sizes.get(axis, 1))
        local += n
    return flags, local


def bench_training(build, work, quick):
    import numpy as np
    shardc = os.path.join(build, "shardc")
    rng = np.random.default_rng(5)
    rows = []
    mlp_const, gpt_const = (TRAIN_QUICK, GPT_QUICK) if quick else (TRAIN_CONST, GPT_CONST)
    runs = (("train_mlp", "adam_dp", "dp_forward", mlp_const, mlp_flop),
            ("train_mlp", "adam_fsdp", "fsdp_forward", mlp_const, mlp_flop),
            ("gpt", "train_step", "gpt", gpt_const, gpt_flop),
            ("gpt", "train_step_bf16", "gpt_bf16", gpt_const, gpt_flop))
    for name, step, fwd, const, flop in runs:
        sample = os.path.join(ROOT, "samples", name + ".tdsl")
        c = {k: int(v) for k, v in (kv.split("=") for kv in const.split(","))}
        row = {"step": step, "fwd": fwd, "const": const, "flop": flop(c)}
        for fn in (fwd, step):
            ins, local = signature_inputs(shardc, work, sample, fn, const, rng, c.get("V", 2))
            t, got = time_program(shardc, work, sample, fn, const, MLP_MESH, "threads", ins)
            loss = float(np.asarray(got[0] if isinstance(got, list) else got))
            if not np.isfinite(loss):
                raise RuntimeError("%s computes a loss of %r" % (fn, loss))
            _, out, _ = run([shardc, "dump", sample, "--stage", "scheduled", "--fn", fn, "--const", const,
                             "--mesh", MLP_MESH])
            peak = int(re.search(r"peak bytes per device of \S+: (\d+)", out).group(1))
            sent = re.search(r"with the fns it calls: \d+ collectives, (\d+) bytes", out)   # the callees' too
            row[fn] = {"time": t, "params": local, "peak": peak, "sent": int(sent.group(1)) if sent else 0}
        log("%s: forward %s, step %s (%.2fx)" % (step, fmt_time(row[fwd]["time"]), fmt_time(row[step]["time"]),
                                                 row[step]["time"] / row[fwd]["time"]))
        rows.append(row)
    return rows


def training_section(rows, lim, summary):
    trows = []
    for r in rows:
        s, f = r[r["step"]], r[r["fwd"]]
        rate = r["rate"] = r["flop"][1] / s["time"] * 1e-9
        of_peak = "%.1f (%.2f)" % (rate, rate / lim["fma_peak_all"])
        if r["step"].endswith("_bf16") and lim.get("bf16_peak_all"):   # its dots run at the bf16 rate
            of_peak = "%.1f (%.2f of the bf16 peak)" % (rate, rate / lim["bf16_peak_all"])
        trows.append(("`%s` / `%s`" % (r["step"], r["fwd"]), fmt_time(f["time"]), fmt_time(s["time"]),
                      "%.2f" % (s["time"] / f["time"]), "%.2f" % (r["flop"][1] / r["flop"][0]),
                      of_peak, fmt_bytes(s["sent"]),
                      fmt_bytes(s["params"]), fmt_bytes(s["peak"])))
    tab = table(("step / forward", "forward", "step", "step / forward", "ideal (FLOP)", "step GFLOP/s (of peak)",
                 "step sent per device", "parameters and state per device", "peak per device"), trows)
    log(tab)
    dp, fsdp = rows[0][rows[0]["step"]], rows[1][rows[1]["step"]]
    mem = (dp["params"] + dp["peak"]) / float(fsdp["params"] + fsdp["peak"])
    summary.append(("(h) FSDP memory per device: data parallel / FSDP (target > 1)", "%.2f" % mem, met(mem > 1)))
    for r in rows:
        ratio = r[r["step"]]["time"] / r[r["fwd"]]["time"]
        summary.append(("(h) %s / %s time (target near 3, at most 4)" % (r["step"], r["fwd"]), "%.2f" % ratio,
                        met(ratio <= 4)))
    f32, bf16 = rows[2]["train_step"], rows[3]["train_step_bf16"]
    speedup = f32["time"] / bf16["time"]
    unit = lim.get("bf16_unit", "none")
    bf16_peak = lim.get("bf16_peak_all")
    bf16_rate = rows[3]["rate"]
    want = {"amx": 2.0, "avx512_bf16": 1.4}.get(unit)
    summary.append(("(h) GPT train_step / train_step_bf16 time (target >= %s)"
                    % (("%.1f on %s" % (want, unit)) if want else "2 on AMX, 1.4 on AVX512-BF16; none here"),
                    "%.2f" % speedup, met(speedup >= want) if want else "no bf16 unit: bf16 widened to f32"))
    mixed = ("Mixed precision: `train_step_bf16` (bf16 compute, f32 weights, docs/grad.md) runs in %s against "
             "`train_step`'s %s, a speedup of %.2f; its %.1f GFLOP/s are %s. " % (
                 fmt_time(bf16["time"]), fmt_time(f32["time"]), speedup, bf16_rate,
                 "%.2f of the bf16 peak (%s)" % (bf16_rate / bf16_peak, unit) if bf16_peak else
                 "%.2f of the f32 FMA peak: this CPU has no bf16 unit, so its bf16 dots are widened to the f32 "
                 "GEMM (docs/kernels.md) and the step can only match the f32 one" % (bf16_rate / lim["fma_peak_all"])))
    return ("## Training\n\n"
            "One training step (`value_and_grad` of the loss and the optimizer, docs/grad.md) against the "
            "forward pass sharded the same way, each built with `shardc build --backend threads` for "
            "`--mesh %s` and run with `--repeat 3` (best time of the device phase): `samples/train_mlp.tdsl` "
            "at `--const %s` (Adam; data parallel over both axes, and FSDP over X), and `samples/gpt.tdsl`'s "
            "`train_step` (SGD with momentum, Megatron over Y, batch over X) at `--const %s`. \"ideal\" is the "
            "step's FLOP over the forward's (the MLP needs no gradient of its input: 2.5; the GPT about 3). "
            "GFLOP/s count the ideal step's FLOP, against every core's FMA peak (%.1f GFLOP/s; a bf16 step's "
            "against the bf16 peak where the CPU has a bf16 unit). Parameters "
            "and optimizer state per device come from the signature's shardings; the peak is the scheduled "
            "dump's (parameters not included). FSDP holds %.2fx less than data parallel per device. %s\n\n%s\n"
            % (MLP_MESH, rows[0]["const"], rows[2]["const"], lim["fma_peak_all"], mem, mixed, tab))


# ---- (j) a Python loop (python/shardc, docs/python.md) ----

def python_section(build, quick, summary):
    const = TRAIN_QUICK if quick else "B=1024,D=256,H=1024,O=256"
    _, out, _ = run([sys.executable, os.path.join(ROOT, "bench", "python_loop.py"), "--build", build,
                     "--const", const, "--steps", "100"])
    r = json.loads(out.strip().splitlines()[-1])
    log("100 steps: Python loop %s, shardc run --steps %s: ratio %.3f" % (fmt_time(r["python"]), fmt_time(r["run"]),
                                                                          r["ratio"]))
    summary.append(("(j) Python loop / `--steps` time, 100 steps (target at most 1.05)", "%.3f" % r["ratio"],
                    met(r["ratio"] <= 1.05)))
    return ("## A Python loop\n\n"
            "`samples/train_mlp.tdsl`'s `sgd_dp` at `--const %s` on `--mesh X=2,Y=4` (threads), 100 steps: "
            "called from a Python loop through the package (`shardc.compile`, each call's results fed back as "
            "the next call's arguments; bench/python_loop.py) against `shardc run --steps 100`. Each is timed as "
            "110 steps less 10 (no start-up), best of 3. Python loop: %s; `--steps`: %s; ratio %.3f.\n\n"
            % (const, fmt_time(r["python"]), fmt_time(r["run"]), r["ratio"]))


# ---- (d) compile time ----

def chain_program(layers):
    """A straight line of `layers` MLP-like blocks (two dots with sharding
    constraints, elementwise ops, a residual): about 16 IR instructions each."""
    out = ["# generated by bench/report.py: %d layers" % layers,
           "mesh X = 2, Y = 4", "const B = 64, D = 128, F = 256",
           "fn chain(x: f32[B@X, D], w1: f32[D, F@Y], w2: f32[F@Y, D], bias: f32[D]) -> f32[B@X, D] {",
           "    x0 = x"]
    for i in range(layers):
        out += ["    h%d[b@X, f@Y] = x%d[b, d] * w1[d, f]" % (i, i),
                "    g%d = gelu(h%d) * 0.5 + 1" % (i, i),
                "    y%d[b@X, e] = g%d[b, f] * w2[f, e] + bias[e]" % (i, i),
                "    x%d = relu(y%d) + x%d * 0.25" % (i + 1, i, i)]
    out += ["    return x%d" % layers, "}"]
    return "\n".join(out) + "\n"


def wide_program(branches):
    """`branches` independent dots whose results all stay live until a tree
    of sums adds them: about 7 IR instructions per branch; thousands of
    values live at once (the buffer assignment's worst case)."""
    out = ["# generated by bench/report.py: %d branches" % branches,
           "mesh X = 2, Y = 4", "const B = 64, D = 128, F = 256",
           "fn wide(x: f32[B@X, D], w1: f32[D, F@Y], w2: f32[F@Y, D]) -> f32[B@X, D] {"]
    for i in range(branches):
        out += ["    h%d[b, f] = x[b, d] * w1[d, f] * %d" % (i, i + 1),
                "    v%d[b, e] = tanh(h%d[b, f]) * w2[f, e]" % (i, i)]
    cur, k = ["v%d" % i for i in range(branches)], 0
    while len(cur) > 1:
        nxt = []
        for j in range(0, len(cur) - 1, 2):
            out.append("    s%d = %s + %s" % (k, cur[j], cur[j + 1]))
            nxt.append("s%d" % k)
            k += 1
        cur = nxt + (cur[-1:] if len(cur) % 2 else [])
    out += ["    return %s" % cur[0], "}"]
    return "\n".join(out) + "\n"


def best_time(cmd, reps, timeout):
    best = None
    for _ in range(reps):
        t, out, _ = run(cmd, timeout=timeout)
        best = t if best is None or t < best else best
    return best


def bench_compile(build, work, quick):
    shardc = os.path.join(build, "shardc")
    sizes = (1000, 10000) if quick else (1000, 10000, 100000)
    rows = []
    for family, gen, per in (("chain", chain_program, 16), ("wide", wide_program, 7)):
        for target in sizes:
            path = os.path.join(work, "%s%d.tdsl" % (family, target))
            with open(path, "w") as f:
                f.write(gen(max(1, target // per)))
            _, ir, _ = run([shardc, "dump", path, "--stage", "parsed"])
            ninst = sum(1 for line in ir.splitlines() if line.lstrip().startswith("%"))
            _, ir, _ = run([shardc, "dump", path, "--stage", "scheduled"])
            nsched = sum(1 for line in ir.splitlines() if line.lstrip().startswith("%"))
            reps = 3 if target <= 10000 else 1
            t_sched = best_time([shardc, "dump", path, "--stage", "scheduled", "-o", os.devnull], reps, 300)
            try:
                t_comp = best_time([shardc, "compile", path, "-o", os.path.join(work, "out.c")], reps, 300)
            except subprocess.TimeoutExpired:
                t_comp = None
            rows.append({"family": family, "target": target, "ninst": ninst, "nsched": nsched,
                         "sched": t_sched, "compile": t_comp})
            log("  %-5s %7d IR instructions (%d scheduled): dump --stage scheduled %.3f s, compile %s" %
                (family, ninst, nsched, t_sched, "%.3f s" % t_comp if t_comp is not None else "timed out"))
    return rows


# ---- (i) cost against depth ----

def depth_row(shardc, work, prog, fn, const):
    """Compile time (best of 3), generated C bytes, and `shardc build
    --no-cache` time (C compiler and link included) of fn at const."""
    c_path, exe = os.path.join(work, "depth.c"), os.path.join(work, "depth.exe")
    row = {"const": const, "compile": None, "c_bytes": None, "build": None}
    try:
        row["compile"] = best_time([shardc, "compile", prog, "--fn", fn, "--const", const, "-o", c_path], 3,
                                   DEPTH_TIMEOUT)
        row["c_bytes"] = os.path.getsize(c_path)
        row["build"] = best_time([shardc, "build", prog, "--fn", fn, "--const", const, "--no-cache", "-o", exe], 1,
                                 DEPTH_TIMEOUT)
    except (subprocess.TimeoutExpired, RuntimeError) as e:
        log("  %s %s: %s" % (fn, const, e))
    log("  %s %s: compile %s, %s of C, build %s" %
        (fn, const, "%.3f s" % row["compile"] if row["compile"] is not None else "-",
         fmt_bytes(row["c_bytes"]) if row["c_bytes"] else "-",
         "%.1f s" % row["build"] if row["build"] is not None else "timed out or failed"))
    return row


def bench_depth(build, work, quick):
    shardc = os.path.join(build, "shardc")
    gpt = os.path.join(ROOT, "samples", "gpt.tdsl")
    rnn = os.path.join(ROOT, "tests", "codegen", "progs", "rnn.tdsl")
    layers = DEPTH_LAYERS[:2] if quick else DEPTH_LAYERS
    return {"gpt": [depth_row(shardc, work, gpt, "train_step", "%s,L=%d" % (DEPTH_GPT, n)) for n in layers],
            "rnn": [depth_row(shardc, work, rnn, "step", "T=%d" % t) for t in (DEPTH_STEPS[:1] if quick else DEPTH_STEPS)]}


def depth_section(r, summary):
    def cell(x, f):
        return f % x if x is not None else "timed out"
    rows = []
    for name, fn in (("gpt", "gpt.tdsl train_step"), ("rnn", "rnn.tdsl step")):
        base = r[name][0]
        for row in r[name]:
            ratio_c = row["c_bytes"] / base["c_bytes"] if row["c_bytes"] and base["c_bytes"] else None
            ratio_b = row["build"] / base["build"] if row["build"] and base["build"] else None
            rows.append((fn, row["const"].split(",")[-1], cell(row["compile"], "%.3f"),
                         fmt_bytes(row["c_bytes"]) if row["c_bytes"] else "-", cell(ratio_c, "%.2fx"),
                         cell(row["build"], "%.1f"), cell(ratio_b, "%.2fx")))
    g = r["gpt"]
    worst_compile = max((x["compile"] for x in g + r["rnn"] if x["compile"] is not None), default=None)
    ok = worst_compile is not None and all(x["compile"] is not None for x in g + r["rnn"])
    summary.append(("(i) shardc compile, GPT L = %s and RNN T = %s (target < %.0f s)" %
                    ("/".join(str(n) for n in DEPTH_LAYERS), "/".join(str(t) for t in DEPTH_STEPS),
                     TARGET_DEPTH_COMPILE), "%.2f s at most" % worst_compile if worst_compile else "timed out",
                    met(ok and worst_compile < TARGET_DEPTH_COMPILE)))
    for row in g[1:]:
        c = row["c_bytes"] / g[0]["c_bytes"] if row["c_bytes"] and g[0]["c_bytes"] else None
        b = row["build"] / g[0]["build"] if row["build"] and g[0]["build"] else None
        depth = row["const"].split(",")[-1]
        summary.append(("(i) GPT train_step generated C, %s / L=4 (target <= %.1fx)" % (depth, TARGET_DEPTH_C),
                        cell(c, "%.2fx"), met(c is not None and c <= TARGET_DEPTH_C)))
        summary.append(("(i) GPT train_step build --no-cache, %s / L=4 (target <= %.1fx)" % (depth, TARGET_DEPTH_BUILD),
                        cell(b, "%.2fx"), met(b is not None and b <= TARGET_DEPTH_BUILD)))
    b1000 = r["rnn"][-1]["build"]
    summary.append(("(i) RNN step, %s, build --no-cache (target < %.0f s)" % (r["rnn"][-1]["const"], TARGET_RNN_BUILD),
                    cell(b1000, "%.1f s"), met(b1000 is not None and b1000 < TARGET_RNN_BUILD)))
    tab = table(("program", "depth", "compile (s)", "generated C", "C / first", "build --no-cache (s)",
                 "build / first"), rows)
    log(tab)
    return ("## Cost against depth\n\n"
            "What a model's depth and a loop's length cost the compiler: `shardc compile --fn F --const ...` "
            "(best of 3: parsing to C), the generated C's size, and `shardc build --no-cache` (the C compiler "
            "and the link included), for samples/gpt.tdsl's `train_step` at `--const %s` and L layers, and the "
            "tanh RNN's training step of tests/codegen/progs/rnn.tdsl at T steps (its gradient through the "
            "loop). A compiler whose cost grows with depth is one users cannot take to a real model: the "
            "targets are a compile under %.0f s at any depth, C within %.1fx and a build within %.1fx of "
            "L = 4's, and a 1000-step RNN step built in under %.0f s.\n\n%s\n"
            % (DEPTH_GPT, TARGET_DEPTH_COMPILE, TARGET_DEPTH_C, TARGET_DEPTH_BUILD, TARGET_RNN_BUILD, tab))


# ---- the report ----


# ---- (l) auto-sharding against the hand-written shardings ----

# Each sample's hand forms (bench/auto/*.tdsl: the sample with only its
# shardings changed; tests/autoshard/check_hand.py checks that they compute
# what the sample does) and the plan `shardc build --auto` chooses for the
# sample against this machine's target, all timed on the threads backend
# at the bench's sizes: (name, sample, fn, const, quick const, integer
# inputs' bound (a const), [(form, file)]).
AUTO_PROGRAMS = [
    ("mlp", "mlp", "mlp", MLP_CONST, "B=64,D=64,F=256", None,
     [("data parallel", "mlp_dp"), ("Megatron", "mlp_megatron"), ("FSDP", "mlp_fsdp")]),
    ("train_mlp", "train_mlp", "sgd_dp", TRAIN_CONST, TRAIN_QUICK, None,
     [("data parallel", "train_mlp_dp"), ("Megatron", "train_mlp_megatron"), ("FSDP", "train_mlp_fsdp")]),
    ("gpt", "gpt", "train_step", GPT_CONST, GPT_QUICK, "V",
     [("data parallel", "gpt_dp"), ("Megatron", "gpt_megatron"), ("FSDP", "gpt_fsdp")]),
    ("moe", "moe", "moe", MOE_CONST, MOE_QUICK, "E",
     [("data parallel", "moe_dp"), ("Megatron", "moe_megatron"), ("FSDP", "moe_fsdp"),
      ("experts over X, Y", "moe_expert"), ("the sample (experts over X, F over Y)", None)]),
]
TARGET_AUTO = 1.10         # the auto plan's time / the best hand form's, at most


AUTO_ROUNDS = 5            # runs of every form in turn, best of each: a 10% comparison on a shared machine


def build_form(shardc, work, sample, fn, const, extra=()):
    """fn built from sample for 8 threads-backend devices (extra: more
    build flags): the program's path."""
    os.makedirs(work, exist_ok=True)
    prog = os.path.join(work, "prog")
    run([shardc, "build", sample, "--fn", fn, "--const", const, "--backend", "threads", "-o", prog] +
        mesh_flags(MLP_MESH) + list(extra), timeout=900)
    return prog


def run_form(prog, ins):
    """(best time of the device phase of `--repeat 3`, {result file: array})."""
    import numpy as np
    out = os.path.join(os.path.dirname(prog), "out")
    shutil.rmtree(out, ignore_errors=True)
    _, _, err = run([prog] + ins + ["--out", out, "--repeat", "3"], timeout=900)
    got = {}
    for root, _, files in os.walk(out):
        for f in files:
            if f.endswith(".npy"):
                got[os.path.relpath(os.path.join(root, f), out)] = np.load(os.path.join(root, f))
    return parse_time(err)[0], got


def same_results(what, got, want):
    """A sanity check at the bench's sizes (tests/autoshard/check_hand.py
    is the exact one, at small sizes): a loss is a sum of millions of f32
    terms in an order each sharding picks, and differs by about 1e-3
    between forms (train_mlp's sgd_dp at TRAIN_CONST: data parallel 1.6e-4
    from float64, Megatron, whose devices each sum 4x the terms, 1.5e-3)."""
    import numpy as np
    if sorted(got) != sorted(want):
        raise RuntimeError("%s writes %s, the first form %s" % (what, sorted(got), sorted(want)))
    for k in want:
        scale = max(1.0, float(np.max(np.abs(want[k]), initial=0)))
        err = float(np.max(np.abs(got[k].astype(np.float64) - want[k]), initial=0)) / scale
        if not err < 1e-2:
            raise RuntimeError("%s: %s differs from the first form's by %.1e (relative)" % (what, k, err))


def auto_supported(shardc):
    p = subprocess.run([shardc, "autoshard", "--help"], capture_output=True, text=True)
    return p.returncode == 0 and "--auto" in p.stdout + p.stderr


def auto_plan(shardc, sample, fn, const, target):
    """The `# chosen:` line, the chosen fn header and the `found` row's
    explanation of `shardc autoshard --auto`."""
    _, out, _ = run([shardc, "autoshard", sample, "--fn", fn, "--auto", "--const", const, "--target", target] +
                    mesh_flags(MLP_MESH), timeout=600)
    chosen = re.search(r"^# chosen: (.*)$", out, re.M)
    header = re.search(r"^fn %s\(.*$" % re.escape(fn), out, re.M)
    found = re.search(r"^\s*found\s+(.*)$", out, re.M)
    return {"chosen": chosen.group(1).strip() if chosen else "?", "header": header.group(0) if header else "?",
            "found": re.split(r"\s{2,}", found.group(1).strip())[-1] if found else "?", "output": out}


def bench_auto(build, work, quick, shardc_auto, lim):
    """Every hand form and the auto plan of each AUTO_PROGRAMS sample:
    rows of {name, fn, const, forms: [(form, time)], auto: time or None,
    plan}."""
    import numpy as np
    shardc = os.path.join(build, "shardc")
    target = os.path.join(build, "host.target")
    if not os.path.exists(target):
        target, _ = write_host_target(build, lim, NDEV)
    have_auto = auto_supported(shardc_auto)
    if not have_auto:
        log("%s has no `autoshard --auto`: timing the hand forms only" % shardc_auto)
    rng = np.random.default_rng(11)
    rows = []
    for name, sample, fn, const, qconst, ints, forms in AUTO_PROGRAMS:
        const = qconst if quick else const
        c = {k: int(v) for k, v in (kv.split("=") for kv in const.split(","))}
        sample = os.path.join(ROOT, "samples", sample + ".tdsl")
        wdir = os.path.join(work, name)
        os.makedirs(wdir)
        ins, _ = signature_inputs(shardc, wdir, sample, fn, const, rng, c[ints] if ints else 2)
        row = {"name": name, "fn": fn, "const": const, "forms": [], "auto": None, "plan": None}
        progs = []     # (form, sample or hand form, program)
        for form, file in forms:
            prog = sample if file is None else os.path.join(ROOT, "bench", "auto", file + ".tdsl")
            progs.append((form, prog, build_form(shardc, os.path.join(wdir, file or "sample"), prog, fn, const)))
        if have_auto:
            row["plan"] = auto_plan(shardc_auto, sample, fn, const, target)
            progs.append(("auto", sample, build_form(shardc_auto, os.path.join(wdir, "auto"), sample, fn, const,
                                                     ["--auto", "--target", target])))
        # Every form in turn, AUTO_ROUNDS times: a busy spell of the machine
        # then slows one run of each rather than every run of one form.
        best, want = {}, None
        for _ in range(1 if quick else AUTO_ROUNDS):
            for form, prog, exe in progs:
                t, got = run_form(exe, ins)
                if want is None:
                    want = got
                else:
                    same_results("%s %s" % (name, form), got, want)
                best[form] = min(best.get(form, t), t)
        for form, prog, _ in progs:
            log("%s `%s`, %s: %s" % (name, fn, form, fmt_time(best[form])))
            if form == "auto":
                row["auto"] = best[form]
            else:
                measured(prog, fn, const, MLP_MESH, best[form])
                row["forms"].append((form, best[form]))
        if have_auto:
            hand = min(x[1] for x in row["forms"])
            log("%s `%s`: auto %.2fx the best hand form; chosen: %s\n  %s\n  %s" %
                (name, fn, row["auto"] / hand, row["plan"]["chosen"], row["plan"]["header"], row["plan"]["found"]))
        rows.append(row)
    return {"rows": rows, "target": target, "auto": have_auto, "shardc": shardc_auto}


def auto_section(r, summary):
    trows = []
    for row in r["rows"]:
        best_form, best = min(row["forms"], key=lambda x: x[1])
        forms = "; ".join("%s %s" % (f, fmt_time(t)) for f, t in row["forms"])
        if row["auto"] is not None:
            ratio = row["auto"] / best
            summary.append(("(l) %s: auto plan / best hand form time (target <= %.2f)" % (row["name"], TARGET_AUTO),
                            "%.2f (%s against %s)" % (ratio, fmt_time(row["auto"]), best_form), met(ratio <= TARGET_AUTO)))
            auto, rtext = fmt_time(row["auto"]), "%.2f" % ratio
            plan = "`%s`: %s" % (row["plan"]["header"].replace("|", "\\|"), row["plan"]["found"].replace("|", "\\|"))
        else:
            summary.append(("(l) %s: auto plan / best hand form time (target <= %.2f)" % (row["name"], TARGET_AUTO),
                            "no auto plan", "not measured"))
            auto, rtext, plan = "-", "-", "(shardc without `--auto`)"
        trows.append(("`%s` `%s`" % (row["name"], row["fn"]), "`%s`" % row["const"], forms,
                      "%s (%s)" % (fmt_time(best), best_form), auto, rtext, plan))
    tab = table(("program", "const", "hand forms", "best hand form", "auto", "auto / best", "plan chosen"), trows)
    log(tab)
    return ("## Auto-sharding against hand-written shardings\n\n"
            "Each sample's data-parallel, Megatron and FSDP forms (bench/auto/*.tdsl: the sample with only its "
            "shardings changed; moe also with its experts split, and the sample as written) and the plan "
            "`shardc build --auto --fn F --target %s` chooses for the sample, each built for `--mesh %s` "
            "(8 threads-backend devices) and run with `--repeat 3` on the same random inputs, every form in turn, "
            "%d times (the best time of the device phase of each); every form's results agree with the first "
            "form's. The target (the issue's): the auto "
            "plan's time at most %.2fx the best hand form's.%s\n\n%s\n"
            % (os.path.basename(r["target"]), MLP_MESH, AUTO_ROUNDS, TARGET_AUTO,
               "" if r["auto"] else " This run's shardc (`%s`) has no `--auto`: the hand forms alone were timed." %
               os.path.relpath(r["shardc"], ROOT), tab))


# ---- (k) the cost model: this machine's target and predicted against measured ----

# Every threads-backend time the sections above measured: (sample path, fn,
# const, mesh, best seconds).  Section k predicts each with shardc's cost
# model (docs/autoshard.md) and compares.
MEASURED = []
TARGET_COST = 0.30         # |predicted / measured - 1| within this


def measured(sample, fn, const, mesh, t):
    if t:
        MEASURED.append((sample, fn, const, mesh, t))


def fit_link(build, ndev):
    """Latency per ring step and bandwidth per device of the threads
    backend from its all-gather at two sizes per device: t = (n-1) *
    (latency + bytes / bw) (bench/coll_threads.c; its bytes are the result's)."""
    small, large = 4 << 10, 16 << 20
    _, out, _ = run([os.path.join(build, "bench", "coll_threads"), str(large), str(small), "all-gather", str(ndev)],
                    timeout=600)
    times = {key[2]: t for key, t in parse_coll(out)[1].items() if isinstance(key, tuple) and key[1] == "all-gather"}
    s1, s2 = min(times), max(times)
    b1, b2 = s1 / ndev, s2 / ndev          # each device's block
    bw = (ndev - 1) * (b2 - b1) / max(times[s2] - times[s1], 1e-12)
    lat = max(times[s1] / (ndev - 1) - b1 / bw, 1e-9)
    return bw, lat, times


def gemm_rates(build):
    """What sk_dot (shardc's GEMM) computes at 1024^3 on every core, f32,
    and on one core times the cores, bf16 (bench/gemm.c), in GFLOP/s by the
    wall clock: the cost model's bf16 peak keeps their proportion (its f32
    peak is gemm_shapes' rate per CPU second, write_host_target)."""
    _, out, _ = run([os.path.join(build, "bench", "gemm"), "1024"], timeout=600)
    rates = {}
    for line in out.splitlines():
        f = line.split()
        if f[0] == "gemm" and f[2] in ("sk_dot", "sk_dot_bf16"):
            key = f[2] if f[2] == "sk_dot_bf16" else "sk_dot_%s" % f[1]
            rates[key] = float(f[3])
    top = max(int(k.rsplit("_", 1)[1]) for k in rates if k != "sk_dot_bf16")
    return rates["sk_dot_%d" % top], rates["sk_dot_bf16"] * top


# The GEMM efficiency grids of host.target: sk_dot on ndev threads at once
# at every M, N, K of these (bench/gemm_shapes.c, rates per CPU second), in
# each layout of EFF_LAYOUTS, against 1024^3 in nn (the shape of the peak).
# N, the width of a weight (what a sharding splits), reaches 8192 as the
# samples' do; K 4096, the tokens a device holds (a weight gradient's
# x^T dy contracts them); 512 on M and N because tn dips there (0.71 at
# 512 x 512, K 4096, against 0.93 to 0.98 at 128 and 2048 on an AVX2 EPYC),
# and on K because the rate climbs from K = 128 to 512 and then stays
# (nn 512 x 8192: 0.35 at K 128, 0.85 at 512, 0.76 at 1024), which
# interpolation across it would miss.  nt and tt read nn's and tn's grids
# (nt ran within 0.1 of nn there).  About 3 minutes for both.
EFF_GRID = ((16, 128, 512, 2048), (16, 128, 512, 2048, 8192), (16, 128, 512, 1024, 4096))
EFF_LAYOUTS = ("nn", "tn")
EFF_REF = 1024


def gemm_efficiency(build, ndev):
    """bench/gemm_shapes' `dot_efficiency LAYOUT M N K EFF` lines of every
    layout, all over one reference, and that reference in GFLOP per CPU
    second."""
    _, out, _ = run([os.path.join(build, "bench", "gemm_shapes"), str(ndev), str(EFF_REF)] +
                    [",".join(str(d) for d in axis) for axis in EFF_GRID] + [",".join(EFF_LAYOUTS)], timeout=1200)
    lines = [line for line in out.splitlines() if line.startswith("dot_efficiency ")]
    ref = float(re.search(r"^reference \d+ (\S+)$", out, re.M).group(1))
    return lines, ref


def write_host_target(build, lim, ndev):
    """build/host.target: this machine as ndev threads-backend devices
    sharing its cores and memory bandwidth (the default target of
    `shardc dump --cost` and `show --cost`)."""
    bw, lat, _ = fit_link(build, ndev)
    f32_wall, bf16_wall = gemm_rates(build)
    eff, eff_ref = gemm_efficiency(build, ndev)
    # The peak is the grid's own reference, per CPU second, times the cores:
    # the wall-clock rate of bench/gemm.c read 108.6 and 146 GFLOP/s in two
    # runs an hour apart as other VMs took the cores, and the step times it
    # predicts are the best of several runs, which a quiet moment gives.
    f32 = eff_ref * int(lim["cores"])
    bf16 = bf16_wall * f32 / f32_wall
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 8 << 30
    text = ("# This machine as %d threads-backend devices sharing its %s cores, written by make bench\n"
            "# (bench/report.py): sk_dot's GEMM rate at %d^3 per CPU second on %d threads at once (bench/gemm_shapes.c:\n"
            "# %.1f GFLOP), times the cores (%.1f GFLOP/s f32; bf16 in bench/gemm.c's proportion to f32, %.1f),\n"
            "# and the STREAM triad on every core (bench/limits.c: %.1f GB/s), divided among the devices; the link\n"
            "# fitted to bench/coll_threads.c's all-gather at two sizes.\n"
            "name host\n"
            "peak_flops f32 %.4g\n"
            "peak_flops bf16 %.4g\n"
            "mem_bw %.4g\n"
            "mem_per_device %d\n"
            "link intra %.4g %.4g\n"
            "# tanhf calls per second on one core (bench/limits.c: %.4g), times the cores, divided among the devices\n"
            "libm_rate %.4g\n"
            "# GEMM efficiency by shape and layout (bench/gemm_shapes.c): sk_dot on %d threads at once, one per\n"
            "# device, the rate of each [M,K] x [K,N] over the rate at %d^3 in nn\n"
            % (ndev, lim["cores"], EFF_REF, ndev, eff_ref, f32, bf16, lim["stream_triad_all"], f32 * 1e9 / ndev,
               bf16 * 1e9 / ndev, lim["stream_triad_all"] * 1e9 / ndev, mem // ndev, bw, lat,
               float(lim["libm_rate_1"]), float(lim["libm_rate_1"]) * int(lim["cores"]) / ndev, ndev, EFF_REF)
            + "".join(line + "\n" for line in eff))
    path = os.path.join(build, "host.target")
    with open(path, "w") as f:
        f.write(text)
    return path, text


def predicted(shardc, target, sample, fn, const, mesh):
    _, out, _ = run([shardc, "show", sample, "--fn", fn, "--cost", "--target", target, "--const", const] +
                    mesh_flags(mesh))
    m = re.search(r"# predicted time of \S+ on target \S+: ([0-9.e+-]+)(ns|us|ms|s)\n#   compute (\S+), memory "
                  r"(\S+), comm (\S+), hidden by overlap (\S+);", out)
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    def secs(x):
        u = re.match(r"([0-9.e+-]+)(ns|us|ms|s),?$", x)
        return float(u.group(1)) * unit[u.group(2)]
    return float(m.group(1)) * unit[m.group(2)], [secs(x) for x in m.group(3, 4, 5, 6)]


def cost_section(build, lim, summary):
    path, text = write_host_target(build, lim, NDEV)
    log("wrote %s:\n%s" % (path, text))
    shardc = os.path.join(build, "shardc")
    rows, within = [], 0
    for sample, fn, const, mesh, t in MEASURED:
        p, (comp, mem, comm, hidden) = predicted(shardc, path, sample, fn, const, mesh)
        ok = abs(p / t - 1) <= TARGET_COST
        within += ok
        rows.append(("%s `%s`" % (os.path.basename(sample), fn), fmt_time(t), fmt_time(p), "%.2f" % (p / t),
                     "yes" if ok else "**no**", "%s / %s / %s / %s" % tuple(fmt_time(x) for x in (comp, mem, comm,
                                                                                                  hidden))))
    tab = table(("program", "measured", "predicted", "predicted / measured", "within 30%",
                 "compute / memory / comm / hidden"), rows) if rows else "(no program was timed in this run)\n"
    log(tab)
    if rows:
        summary.append(("(k) cost model: predictions within %.0f%% of the measured time" % (TARGET_COST * 100),
                        "%d of %d" % (within, len(rows)), met(within == len(rows))))
    fields = [line.split(None, 1) for line in text.splitlines() if line and not line.startswith("#")]
    grids = [v.split() for k, v in fields if k == "dot_efficiency"]
    fields = [(k, v) for k, v in fields if k != "dot_efficiency"]
    for layout in EFF_LAYOUTS:
        effs = sorted((float(g[4]), " ".join(g[1:4])) for g in grids if g[0] == layout)
        if effs:
            fields.append(("dot_efficiency %s" % layout,
                           "%d shapes, M in {%s}, N in {%s}, K in {%s}: from %.2f (%s) to %.2f (%s), median %.2f"
                           % ((len(effs),) + tuple(", ".join(str(d) for d in axis) for axis in EFF_GRID) +
                              (effs[0][0], effs[0][1], effs[-1][0], effs[-1][1], effs[len(effs) // 2][0]))))
    ttab = table(("field", "value"), [("`%s`" % k, v) for k, v in fields])
    return ("## The cost model against measured times\n\n"
            "`make bench` writes this machine's target, build/host.target (docs/autoshard.md), the default of "
            "`shardc dump --cost` and `shardc show --cost`: this machine as %d threads-backend devices, "
            "the GEMM rate of `sk_dot` at 1024^3 per CPU second on 8 threads at once times the cores "
            "(bench/gemm_shapes.c), the STREAM triad and the rate "
            "of `tanhf` calls (bench/limits.c) divided among them, the link fitted to the threads backend's all-gather "
            "(bench/coll_threads.c), and the GEMM efficiency by shape: `sk_dot` on %d threads at once (one per "
            "device, as the devices run) at each shape of a grid, in two layouts (nn, and tn: the lhs read "
            "transposed, as a weight gradient's x^T dy), against 1024^3 in nn, in FLOPs per CPU second "
            "(bench/gemm_shapes.c):\n\n%s\n"
            "Each program timed above on the threads backend, predicted by `shardc show --fn F --cost` with that "
            "target (the same `--const` and `--mesh`), against its best measured time. The target's peak is "
            "what shardc's GEMM reaches on a large product, times each dot's efficiency by shape, its memory "
            "bandwidth STREAM's: a prediction below the measured time is the distance of other loops from those "
            "rates (or of a GEMM from its grid's, strided operands and shapes between grid points), one above "
            "it work the model counts that the kernels avoid (fused elementwise chains read from registers, "
            "blocks read from cache).\n\n%s\n"
            % (NDEV, NDEV, ttab, tab))


def update_doc(path, name, text, before=None):
    """Replaces the section between `<!-- NAME: begin/end -->` in path;
    a new one goes before the section `before` (when there is one) or at
    the end."""
    begin, end = "<!-- %s: begin -->\n" % name, "<!-- %s: end -->\n" % name
    try:
        with open(path) as f:
            old = f.read()
    except OSError:
        old = "# Performance\n\n"
    block = begin + text + end
    b = old.find(begin)
    e = old.find(end, b) if b >= 0 else -1
    if b >= 0 and e >= 0:
        new = old[:b] + block + old[e + len(end):]
    else:
        at = old.find("<!-- %s: begin -->" % before) if before else -1
        if at >= 0:
            new = old[:at] + block + "\n" + old[at:]
        else:
            new = old + ("" if old.endswith("\n\n") else "\n") + block
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--doc", default=None, help="the document to rewrite (docs/performance.md)")
    ap.add_argument("--out", default=None, help="write the rewritten document here, leaving --doc as it is")
    ap.add_argument("--quick", action="store_true", help="small sizes, for testing the script")
    ap.add_argument("--only", default="abcdefghijlmk", help="which benchmarks: letters of abcdefghijklm (g: mixture of "
                    "experts, h: training, i: cost against depth, j: a Python loop, l: auto-sharding against the "
                    "hand-written shardings, m: memory-bound loops against the STREAM triad, k: the cost model (last: it predicts the "
                    "times the others measured), each its own section of the document, so `--only g` "
                    "refreshes just that)")
    ap.add_argument("--shardc", default=None, help="the shardc whose `build --auto` section l times (default: "
                    "BUILD/shardc)")
    args = ap.parse_args()
    shared = set(args.only) & set("abcdef")
    in_place = args.doc and (not args.out or os.path.abspath(args.out) == os.path.abspath(args.doc))
    if in_place and shared and shared != set("abcdef"):
        ap.error("a to f share one section of the document, which --only %s would rewrite with just %s: "
                 "run them together, or write the result elsewhere with --out" % (args.only, "".join(sorted(shared))))
    build = os.path.abspath(args.build)
    doc = args.doc
    if doc and args.out and os.path.abspath(args.out) != os.path.abspath(doc):
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        shutil.copyfile(doc, args.out)     # the sections not measured this run stay as --doc has them
        doc = args.out
    t_start = time.monotonic()
    m = machine()
    log("machine: %s, %d cores, %s; %s; %s; %s" % (m["cpu"], m["cores"], m["memory"], m["cc"], m["blas"], m["mpi"]))
    log("date: %s; load average %s" % (m["date"], m["load"]))
    lim = bench_limits(build)
    log("ISA (CPUID): %s; kernels: %s" % (lim["isa"], lim["kernels"]))
    log("limits: FMA peak %.1f GFLOP/s on 1 core, %.1f on %s cores; %s; STREAM triad %.1f GB/s on every core" %
        (lim["fma_peak_1"], lim["fma_peak_all"], lim["cores"], bf16_limits(lim), lim["stream_triad_all"]))
    work = tempfile.mkdtemp(prefix="shardc-bench.")
    summary, sections = [], []
    own = {}        # sections with a part of the doc of their own: marker -> text
    try:
        if "a" in args.only:
            log("\n== (a) GEMM engines (bench/gemm.c)")
            sections.append(gemm_section(bench_gemm(build, lim, args.quick), lim, summary))

        if "b" in args.only:
            log("\n== (b) the MLP sample on %d threads-backend devices against plain oneDNN" % NDEV)
            os.makedirs(os.path.join(work, "mlp"))
            r = bench_mlp(build, os.path.join(work, "mlp"), args.quick)
            gf = lambda t: r["flop"] / t * 1e-9
            rows = []
            for key, what in (("blas", "plain oneDNN (`bench/mlp_blas.c`), every core"),
                              ("sharded", "`shardc build`, 8 devices, as built"),
                              ("sharded_all", "`shardc build`, 8 devices, `OMP_NUM_THREADS=%d`" %
                               (os.cpu_count() or 1))):
                best, med, n = r[key]
                rows.append((what, fmt_time(best), fmt_time(med), "%.1f" % gf(best),
                             "%.3f" % (r["blas"][0] / best)))
            ratio = r["blas"][0] / r["sharded"][0]
            ratio_all = r["blas"][0] / r["sharded_all"][0]
            tab = table(("program", "best", "median", "GFLOP/s (best)", "ratio to oneDNN"), rows)
            log(tab)
            log("largest relative difference from oneDNN's result: %.1e (as built), %.1e (every core)" %
                (r["sharded_err"], r["sharded_all_err"]))
            summary.append(("(b) MLP sharded / oneDNN GFLOP/s (target >= %.2f)" % TARGET_MLP,
                            "%.3f (%.3f with OMP_NUM_THREADS=%d)" % (ratio, ratio_all, os.cpu_count() or 1),
                            met(ratio >= TARGET_MLP)))
            frac = gf(r["sharded"][0]) / lim["fma_peak_all"]
            summary.append(("(b) MLP sharded, fraction of every core's FMA peak (target >= %.2f)" % TARGET_MLP_PEAK,
                            "%.2f (%.1f of %.1f GFLOP/s)" % (frac, gf(r["sharded"][0]), lim["fma_peak_all"]),
                            met(frac >= TARGET_MLP_PEAK)))
            note = (" " + r["note"] + ".") if "note" in r else ""
            sections.append(
                "## The MLP sample against plain oneDNN\n\n"
                "`samples/mlp.tdsl --fn mlp --const %s --mesh %s`, built with `shardc build` and run on "
                "8 threads-backend devices with `--repeat %d` (the device phase only, no file I/O), against "
                "the same global math written directly in C: `dnnl_sgemm`, a gelu loop split over the "
                "cores, `dnnl_sgemm` (bench/mlp_blas.c, oneDNN on every core). %.1f GFLOP per run "
                "(the two matrix products). As built, the program gives each device's GEMMs its share "
                "of the cores (cores / devices, at least 1); the last row overrides that with "
                "`OMP_NUM_THREADS`, so that every device's GEMM asks for every core.%s\n\n%s\n"
                "Ratio (oneDNN time / sharded time, best runs): **%.3f**; target >= %.2f: %s.\n\n"
                % (r["const"], MLP_MESH, MLP_RUNS, r["flop"] * 1e-9, note, tab, ratio, TARGET_MLP,
                   met(ratio >= TARGET_MLP)))

        if "c" in args.only:
            log("\n== (c) collectives on %d devices: threads backend, OpenMPI, bandwidth bound" % NDEV)
            c = bench_coll(build, args.quick)
            stream, times = c["stream"], c["times"]
            log("STREAM copy, %d threads: %.1f GB/s (bytes read + written)" % (c["stream_threads"], stream * 1e-9))
            if c["mpi_note"]:
                log(c["mpi_note"])
            text = ""
            ar_ok = None
            for kind in COLL_KINDS:
                sizes = sorted(s for (impl, k, s) in times if impl == "threads" and k == kind)
                rows = []
                for s in sizes:
                    th = times[("threads", kind, s)]
                    mp = times.get(("mpi", kind, s))
                    bound = 2.0 * NDEV * s / stream
                    rows.append((fmt_bytes(s), fmt_time(th), fmt_time(mp) if mp else "-",
                                 "%.2f" % (mp / th) if mp else "-", fmt_time(bound), "%.2f" % (bound / th)))
                tab = table(("bytes per device", "threads", "OpenMPI", "OpenMPI / threads", "bound",
                             "bound / threads"), rows)
                log("\n%s%s" % (kind, " (sum f32)" if kind == "all-reduce" else ""))
                log(tab)
                text += "**%s**%s\n\n%s\n" % (kind, " (sum, f32)" if kind == "all-reduce" else "", tab)
                if kind == "all-reduce" and sizes:
                    s = sizes[-1]
                    th = times[("threads", kind, s)]
                    mp = times.get(("mpi", kind, s))
                    frac = 2.0 * NDEV * s / stream / th
                    vs = mp / th if mp else None
                    ar_ok = (vs is not None and vs >= TARGET_AR_VS_MPI, frac >= TARGET_AR_BOUND)
                    summary.append(("(c) all-reduce %s: OpenMPI time / threads time (target >= %.0f)" %
                                    (fmt_bytes(s), TARGET_AR_VS_MPI),
                                    "%.2f (%s against %s)" % (vs, fmt_time(th), fmt_time(mp)) if vs else "no MPI",
                                    met(ar_ok[0]) if vs else "not measured"))
                    summary.append(("(c) all-reduce %s: fraction of the bandwidth bound (target >= %.1f)" %
                                    (fmt_bytes(s), TARGET_AR_BOUND), "%.2f (bound %s)" %
                                    (frac, fmt_time(2.0 * NDEV * s / stream)), met(ar_ok[1])))
            small_text = ""
            for ndev in sorted(c["small"], reverse=True):
                tab, ok, worst = small_section(c["small"][ndev], ndev)
                log("\nsmall sizes, %d devices (best of %d alternating runs)" % (ndev, SMALL_ROUNDS))
                log(tab)
                verdict = ("no MPI" if ok is None else "%s (OpenMPI / threads at least %.2f)" % (met(ok), worst))
                summary.append(("(c) %s..%s per device, %d devices: threads no slower than OpenMPI" %
                                (fmt_bytes(SMALL_MIN), fmt_bytes(SMALL_MAX), ndev),
                                "worst OpenMPI / threads %.2f" % worst if worst else "no MPI",
                                "no MPI" if ok is None else met(ok)))
                small_text += ("**%d devices%s** (OpenMPI on %d ranks under `%s`): %s.\n\n%s\n"
                               % (ndev, " (as many as cores)" if ndev < NDEV else "", ndev,
                                  " ".join(mpirun_cmd(ndev)), verdict, tab))
            sections.append(
                "## Collectives: threads backend, OpenMPI and the bandwidth bound\n\n"
                "8 devices on a flat mesh; bytes per device is the size of each device's result (all-reduce "
                "and all-to-all send as much, all-gather an eighth). Threads: bench/coll_threads.c, one "
                "`sc_run` on `sc_threads_create` per size; OpenMPI: bench/coll_mpi.c under `%s` "
                "(`MPI_Allreduce`, `MPI_Allgather`, `MPI_Alltoall` on `MPI_COMM_WORLD`). Each time is the best "
                "of 5 loops of back-to-back calls, divided by the calls (2 at 64 MiB, up to 200 at small "
                "sizes); from %s to %s, the best of that and of %d more runs of each, alternating threads and "
                "OpenMPI (below). The bound is the time to read every device's input once and write every device's "
                "result once, 2 x 8 x bytes, at the STREAM copy rate measured in the same run on %d threads: "
                "%.1f GB/s (bytes read + written; `c[i] = a[i]` on 64 MiB of doubles per thread). "
                "\"bound / threads\" is the fraction of it reached; it can pass 1 when blocks are read "
                "from cache.%s\n\n%s"
                "### Small collectives\n\n"
                "Latency per call from %s to %s per device, threads against OpenMPI, best of %d runs of each "
                "taken in turn (on 8 devices also of the run above; the target: threads no slower than OpenMPI "
                "at every size and kind on 8 devices). The threads runs set `SHARDC_BIND=core`, as mpirun binds "
                "its ranks to cores when they fit the cores (on 8 devices, more than the cores, neither binds).\n\n%s"
                % (" ".join(mpirun_cmd(NDEV)), fmt_bytes(SMALL_MIN), fmt_bytes(SMALL_MAX), SMALL_ROUNDS,
                   c["stream_threads"], stream * 1e-9, (" " + c["mpi_note"] + ".") if c["mpi_note"] else "", text,
                   fmt_bytes(SMALL_MIN), fmt_bytes(SMALL_MAX), SMALL_ROUNDS, small_text))

        if "d" in args.only:
            log("\n== (d) compile time")
            rows = bench_compile(build, work, args.quick)
            trows = []
            for r in rows:
                trows.append((r["family"], "{:,}".format(r["ninst"]), "{:,}".format(r["nsched"]),
                              "%.3f" % r["sched"], "{:,.0f}".format(r["nsched"] / r["sched"]),
                              "%.3f" % r["compile"] if r["compile"] is not None else "timed out",
                              "{:,.0f}".format(r["nsched"] / r["compile"]) if r["compile"] else "-"))
            tab = table(("program", "IR instructions (parsed)", "scheduled", "dump --stage scheduled (s)",
                         "instructions/s", "compile (s)", "instructions/s"), trows)
            log(tab)
            growth = []
            for fam in ("chain", "wide"):
                by = {r["target"]: r for r in rows if r["family"] == fam}
                if 10000 in by:
                    c10 = by[10000]["compile"]
                    if fam == "chain":
                        summary.append(("(d) compile at 10,000 instructions (%s; target < %.0f s)" %
                                        (fam, TARGET_COMPILE_10K), "%.3f s" % c10,
                                        met(c10 is not None and c10 < TARGET_COMPILE_10K)))
                for stage in ("sched", "compile"):
                    if 10000 in by and 100000 in by and by[10000][stage] and by[100000][stage]:
                        f = by[100000][stage] / by[10000][stage]
                        size = by[100000]["nsched"] / by[10000]["nsched"]
                        ok = f <= size * LINEAR_SLACK
                        what = "dump --stage scheduled" if stage == "sched" else "compile"
                        growth.append("%s %s: %.1fx the time for %.1fx the instructions (%s)" %
                                      (fam, what, f, size, "linear" if ok else "NOT linear"))
                        summary.append(("(d) %s, %s, 10k -> 100k (linear: <= %.0fx)" %
                                        (what, fam, size * LINEAR_SLACK), "%.1fx" % f, met(ok)))
            for g in growth:
                log(g)
            sections.append(
                "## Compile time\n\n"
                "Generated programs (bench/report.py): *chain* is a straight line of MLP-like blocks (two "
                "dots with sharding constraints, elementwise ops, a residual; one all-reduce per block), "
                "*wide* has independent branches whose results all stay live until a tree of sums (the "
                "buffer assignment's worst case). Seconds are the best of 3 runs (1 run at 100,000) of "
                "`shardc dump --stage scheduled -o /dev/null` (parsing to scheduling) and of "
                "`shardc compile -o out.c` (everything, C included); instructions/s counts the scheduled "
                "program's instructions.\n\n%s\n%s\n"
                % (tab, "".join("- %s\n" % g for g in growth)))
        if "f" in args.only:
            log("\n== (f) the attention sample on %d threads-backend devices" % NDEV)
            os.makedirs(os.path.join(work, "attention"))
            a = bench_attention(build, os.path.join(work, "attention"),
                                "B=2,S=64,D=128,H=8,K=16" if args.quick else ATTN_CONST)
            os.makedirs(os.path.join(work, "attention-long"))
            long = bench_attention(build, os.path.join(work, "attention-long"),
                                   "B=2,S=512,D=128,H=8,K=16" if args.quick else ATTN_LONG_CONST)
            rate, long_rate = a["rate"], long["rate"]
            frac = rate / lim["fma_peak_all"]
            for r in (a, long):
                log("%s: best %s, %.1f GFLOP/s, %.2f of the FMA peak; largest relative difference from NumPy %.1e; "
                    "peak %s per device (one [B, H, S, S] array: %s)" %
                    (r["const"], fmt_time(r["time"]), r["rate"], r["rate"] / lim["fma_peak_all"], r["err"],
                     fmt_bytes(r["peak"]), fmt_bytes(r["scores"])))
            summary.append(("(f) attention, fraction of every core's FMA peak (target >= %.2f)" % TARGET_ATTN_PEAK,
                            "%.2f (%.1f of %.1f GFLOP/s)" % (frac, rate, lim["fma_peak_all"]),
                            met(frac >= TARGET_ATTN_PEAK)))
            sections.append(
                "## The attention sample\n\n"
                "`samples/attention.tdsl --fn attention --const %s --mesh %s`, built with `shardc build` and "
                "run on 8 threads-backend devices with `--repeat 3`: best %s for %.1f GFLOP (the six "
                "contractions), %.1f GFLOP/s, **%.2f** of every core's FMA peak (target >= %.2f: %s). The "
                "result agrees with NumPy's (float64) to %.1e relative.\n\n"
                "The scores, softmax and product with `v` are one `sk_attention` call per device "
                "(docs/scheduling.md, \"Attention\"): no `[B, H, S, S]` array exists. The scheduler's peak "
                "per device is %s, where one such array would be %s. At a long sequence, `--const %s`: best "
                "%s, %.1f GFLOP/s, **%.2f** of the peak, peak %s per device against %s for one `[B, H, S, S]` "
                "array; NumPy agrees to %.1e.\n\n"
                % (a["const"], ATTN_MESH, fmt_time(a["time"]), a["flop"] * 1e-9, rate, frac, TARGET_ATTN_PEAK,
                   met(frac >= TARGET_ATTN_PEAK), a["err"], fmt_bytes(a["peak"]), fmt_bytes(a["scores"]),
                   long["const"], fmt_time(long["time"]), long_rate, long_rate / lim["fma_peak_all"],
                   fmt_bytes(long["peak"]), fmt_bytes(long["scores"]), long["err"]))
        if "e" in args.only:
            log("\n== (e) collective matmuls against their auto-partitioned twins")
            os.makedirs(os.path.join(work, "collmm"))
            sections.append(collmm_section(bench_collmm(build, os.path.join(work, "collmm"), args.quick)))
        if "g" in args.only:
            log("\n== (g) mixture of experts: the MoE samples against the auto-partitioned moe")
            os.makedirs(os.path.join(work, "moe"))
            own["bench/moe"] = moe_section(bench_moe(build, os.path.join(work, "moe"), args.quick), lim)
        if "h" in args.only:
            log("\n== (h) training steps against their forward passes")
            os.makedirs(os.path.join(work, "train"))
            own["bench/training"] = training_section(bench_training(build, os.path.join(work, "train"), args.quick), lim, summary)
        if "i" in args.only:
            log("\n== (i) cost against depth: compile and build time of deep and long programs")
            os.makedirs(os.path.join(work, "depth"))
            own["bench/depth"] = depth_section(bench_depth(build, os.path.join(work, "depth"), args.quick), summary)
        if "j" in args.only:
            log("\n== (j) a training step called from a Python loop against shardc run --steps")
            own["bench/python"] = python_section(build, args.quick, summary)
        if "l" in args.only:
            log("\n== (l) auto-sharding: the plan --auto chooses against the hand-written shardings")
            os.makedirs(os.path.join(work, "auto"))
            own["bench/auto"] = auto_section(bench_auto(build, os.path.join(work, "auto"), args.quick,
                                                        os.path.abspath(args.shardc or os.path.join(build, "shardc")),
                                                        lim), summary)
        if "m" in args.only:
            log("\n== (m) memory-bound loops against the STREAM triad")
            os.makedirs(os.path.join(work, "loops"))
            own["bench/loops"] = loops_section(bench_loops(build, os.path.join(work, "loops"), args.quick), lim,
                                               summary)
        if "k" in args.only:
            log("\n== (k) the cost model: this machine's target, predicted against measured times")
            own["bench/cost"] = cost_section(build, lim, summary)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    log("\n== summary")
    for what, value, verdict in summary:
        log("%-75s %-40s %s" % (what, value, verdict))
    elapsed = time.monotonic() - t_start
    log("bench: %.0f s" % elapsed)
    if doc:
        mtext = ("## Machine\n\n"
                 "The numbers of this page come from one run of `make bench` (bench/report.py), %s, on:\n\n"
                 "- CPU: %s, %d cores, %s memory, Linux %s\n- ISA (CPUID, lib/cpu.c): %s\n"
                 "- kernels chosen: %s\n"
                 "- limits (bench/limits.c): FMA peak %.1f GFLOP/s (f32) on one core, %.1f on all %s; "
                 "%s; STREAM triad %.1f GB/s on all cores\n"
                 "- compiler: %s\n- BLAS: %s\n- MPI: %s\n"
                 "- load average (1 minute) when the run started: %s\n\n"
                 % (m["date"], m["cpu"], m["cores"], m["memory"], m["kernel"], lim["isa"], lim["kernels"],
                    lim["fma_peak_1"], lim["fma_peak_all"], lim["cores"], bf16_limits(lim), lim["stream_triad_all"],
                    m["cc"],
                    m["blas"], m["mpi"], m["load"]))
        if sections:
            update_doc(doc, "bench/machine", prose(mtext), before="bench/report")
            stext = "## Targets\n\n" + table(("measure", "value", "target"), summary) + "\n"
            update_doc(doc, "bench/report", stext + "".join(prose(x) for x in sections))
        for marker, text in own.items():
            update_doc(doc, marker, prose(text + "Measured %s, load average %s when the run started.\n\n"
                                          % (m["date"], m["load"])))
        log("updated %s%s" % (doc, "" if doc == args.doc else " (%s is unchanged: `make bench-doc` rewrites it)"
                                                          % args.doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
