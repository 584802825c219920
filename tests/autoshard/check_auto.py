#!/usr/bin/python3
"""It chooses what experts choose (issue 30, item 4): `shardc autoshard` on
programs whose expert sharding is clear gives that sharding.

Each case runs `shardc autoshard FILE --fn F [--auto] --const ... --target
T [--device-memory M]` (the output's contract: docs/autoshard.md), parses
the chosen signature it prints (the record declarations and the fn header,
as TDSL), and checks it against the plan the case's arithmetic gives (the
comments below and tests/autoshard/progs/; the hand-written forms are
bench/auto/*.tdsl, whose predicted times the numbers quote):

  mlp_dp        small weights, a large batch: data parallel (or ZeRO's
                sharded update, which sends no more)
  mlp_dp_1d     the same on a flat mesh of 8, written with `@auto` dims
  gpt_megatron  the GPT step at sizes where the weights dominate: Megatron
                (FSDP over the data axis allowed on top)
  mlp_fsdp_cap  a memory cap that data parallel and Megatron cannot meet: FSDP
  moe_expert    a mixture of experts as expert-parallel codes write it
                (tests/autoshard/progs/moe_dispatch.tdsl): both expert
                weights split on the experts dim
  moe_tensor    samples/moe.tdsl, whose tokens each gather their expert's
                whole weight: the hidden dim F split, no communication

    tests/autoshard/check_auto.py [--shardc build/shardc] [--only REGEX] [-v]

Prints one line per check and ends with "N passed, N failed".  About 5 s
with the auto branch's shardc at d28caa4 (45 s at 2b49a39, whose search
compiled 626 plans for the GPT case).
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- the chosen signature ----

def split_top(text, sep=","):
    """text split at sep outside parentheses and brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [x.strip() for x in out]


def dims_of(ty):
    """'f32[B@(X, Y), D]' -> [('B', {'X', 'Y'}), ('D', set())]; a record
    type name -> None."""
    m = re.match(r"\w+\[(.*)\]$", ty.strip())
    if not m:
        return None
    dims = []
    for d in split_top(m.group(1)):
        name, _, sh = d.partition("@")
        dims.append((name.strip(), set(re.findall(r"\w+", sh)) - {"auto"} if sh.strip() not in ("?", "") else set()))
    return dims


def fields_of(text):
    """'a: f32[..], b: Rec' (commas or newlines between fields) -> [(name, type)]."""
    out = []
    for line in text.splitlines():
        for f in split_top(line):
            if f and not f.startswith("#"):
                name, _, ty = f.partition(":")
                out.append((name.strip(), ty.strip()))
    return out


def parse_signature(out, fn):
    """The chosen plan: {'p.layers.wq': [(dim, axes), ...], ...} from the
    `record` declarations and the `fn F(...)` line after `# chosen:`."""
    text = out.split("# chosen:", 1)[1]
    records = {name: fields_of(body) for name, body in re.findall(r"^record (\w+) \{(.*?)\}", text, re.S | re.M)}
    m = re.search(r"^fn %s\((.*)\) ->" % re.escape(fn), text, re.M)
    if not m:
        raise RuntimeError("no `fn %s(...)` line after `# chosen:`" % fn)
    plan = {}

    def add(path, ty, depth=0):
        d = dims_of(ty)
        if d is not None:
            plan[path] = d
        elif ty in records and depth < 8:
            for name, fty in records[ty]:
                add(path + "." + name, fty, depth + 1)
        else:
            raise RuntimeError("parameter %s has type %r, neither an array nor a record printed" % (path, ty))

    for name, ty in fields_of(m.group(1)):
        add(name, ty)
    return plan


def fmt_plan(plan):
    return "\n".join("    %s: [%s]" % (k, ", ".join(d + ("@(%s)" % ",".join(sorted(a)) if a else "") for d, a in v))
                     for k, v in sorted(plan.items()))


# ---- what the cases expect ----

def axes(plan, path, dim):
    if path not in plan:
        raise RuntimeError("the chosen signature has no %s" % path)
    return plan[path][dim][1]


def expect_axes(plan, path, dim, want):
    got = axes(plan, path, dim)
    if got != set(want):
        raise RuntimeError("%s dim %d (%s) is split over {%s}, expected {%s}" %
                           (path, dim, plan[path][dim][0], ",".join(sorted(got)), ",".join(sorted(want))))


def expect_only(plan, path, dim, want):
    """path split over want on dim and nothing else on its other dims."""
    expect_axes(plan, path, dim, want)
    for i in range(len(plan[path])):
        if i != dim and axes(plan, path, i):
            raise RuntimeError("%s dim %d (%s) is split over {%s}, expected unsplit" %
                               (path, i, plan[path][i][0], ",".join(sorted(axes(plan, path, i)))))


def expect_replicated(plan, prefix):
    for path in plan:
        if path.startswith(prefix + "."):
            for i, (d, a) in enumerate(plan[path]):
                if a:
                    raise RuntimeError("%s dim %d (%s) is split over {%s}: the weights should be replicated" %
                                       (path, i, d, ",".join(sorted(a))))


def expect_tied(plan, a, b):
    """Parameters of one record type (weights and their momentum) share a plan."""
    pa = {k[len(a):]: v for k, v in plan.items() if k.startswith(a + ".")}
    pb = {k[len(b):]: v for k, v in plan.items() if k.startswith(b + ".")}
    if pa != pb:
        raise RuntimeError("%s and %s (one record type) have different plans" % (a, b))


def data_parallel(plan, mesh_axes, table):
    """The batch over every axis and no model parallelism: the weights
    replicated, or split only as ZeRO splits them (gradients
    reduce-scattered, the updated weights all-gathered: an all-reduce's
    bytes), so the plan sends no more than data parallel's row."""
    for x in ("x", "y"):
        expect_only(plan, x, 0, mesh_axes)
    found, dp = row(table, "found"), row(table, "data parallel")
    if found["sent"] > dp["sent"] * 1.01:
        raise RuntimeError("the plan sends %.0f bytes per device, data parallel %.0f: it moves more than the "
                           "gradients" % (found["sent"], dp["sent"]))
    expect_tied(plan, "p", "v")


def megatron_gpt(plan, table):
    # The batch over X (2), heads and the MLP's hidden dim over Y (4) and
    # over Y alone: the Megatron split of samples/gpt.tdsl, column-parallel
    # wq, wk, wv, w_in and row-parallel wo, w_out.  A weight's other dims
    # may also be split over X, the data axis: FSDP on top of Megatron (the
    # scaling book's mixed FSDP and tensor parallelism), each layer's
    # weights gathered over X before use.  Nothing is split over Y but the
    # model dims: Y is the model axis.
    for x in ("tokens", "labels"):
        expect_only(plan, x, 0, "X")
    model = {"wq": 2, "wk": 2, "wv": 2, "wo": 1, "w_in": 2, "b_in": 1, "w_out": 1}
    for w, dim in model.items():
        expect_axes(plan, "p.layers." + w, dim, "Y")
        for i, (d, a) in enumerate(plan["p.layers." + w]):
            if i != dim and "Y" in a:
                raise RuntimeError("p.layers.%s dim %d (%s) is split over Y as well as its model dim" % (w, i, d))
    expect_tied(plan, "p", "v")


def fsdp_mlp(plan, table):
    # The batch over both axes and each large weight split over both axes
    # (8 ways, on whichever dims): ZeRO-3 / FSDP.
    for x in ("x", "y"):
        expect_only(plan, x, 0, "XY")
    for w in ("p.w1", "p.w2"):
        got = set().union(*(a for _, a in plan[w]))
        if got != {"X", "Y"}:
            raise RuntimeError("%s is split over {%s}, expected over both X and Y (FSDP)" % (w, ",".join(sorted(got))))
    expect_tied(plan, "p", "v")


def expert_moe(plan, table):
    for w in ("w_in", "w_out"):
        if not axes(plan, w, 0):
            raise RuntimeError("%s's experts dim (E) is not split" % w)


def tensor_moe(plan, table):
    if axes(plan, "w", 0) or not axes(plan, "w", 2):
        raise RuntimeError("w is not split on F alone")
    if row(table, "found")["sent"] != 0:
        raise RuntimeError("the plan sends bytes")


SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
              "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def size(text):
    m = re.match(r"([0-9.]+(?:e[+-]?[0-9]+)?) ?([A-Za-z]+)$", text.strip())
    if not m or m.group(2) not in SIZE_UNITS:
        raise RuntimeError("not a size: %r" % text)
    return float(m.group(1)) * SIZE_UNITS[m.group(2)]


def row(table, name):
    """The first row `name  time  memory  sent  explanation` of the table
    of alternatives: {time, memory, sent (bytes), text}."""
    m = re.search(r"^%s {2,}(.*)$" % re.escape(name), table, re.M)
    if not m:
        raise RuntimeError("no `%s` row in the table of alternatives" % name)
    cols = re.split(r" {2,}", m.group(1).strip())
    if len(cols) < 4:
        raise RuntimeError("the `%s` row has %d columns: %r" % (name, len(cols) + 1, m.group(0)))
    return {"time": cols[0], "memory": size(cols[1]), "sent": size(cols[2]), "text": " ".join(cols[3:])}


def chosen_memory(out):
    """The chosen plan's peak memory per device in bytes: the first size in
    bytes on the `# chosen: TIME MEMORY SENT` line (`122 MiB`, `1.2GB`,
    `128000000 B`)."""
    line = re.search(r"^# chosen:(.*)$", out, re.M).group(1)
    for num, unit in re.findall(r"([0-9.]+(?:e[+-]?[0-9]+)?) ?([A-Za-z]+)\b", line):
        if unit in SIZE_UNITS:
            return float(num) * SIZE_UNITS[unit]
    raise RuntimeError("no memory on the `# chosen:` line: %r" % line)


# (name, file, fn, options, check, rows the table must show, cap in bytes)
CASES = [
    # samples/train_mlp.tdsl's SGD step at small weights and a large batch
    # on the 2x4 mesh: the arithmetic of tests/autoshard/progs/
    # train_mlp_1d.tdsl (weights 129 KiB, activations hundreds of MiB).
    # Predicted on tpu-v5e for the hand forms bench/auto/train_mlp_*.tdsl:
    # data parallel 1.14 ms (226 KiB sent per device), FSDP 1.24 ms (the
    # same bytes, the gathered copies read again), Megatron 1.98 ms (48 MiB
    # of activations all-reduced).
    ("mlp_dp", "samples/train_mlp.tdsl", "sgd_dp",
     ["--auto", "--const", "B=262144,D=64,H=256,O=64", "--target", "tpu-v5e"],
     lambda p, t: data_parallel(p, "XY", t), ("found", "data parallel", "megatron", "fsdp"), None),
    # The same on a flat mesh of 8, the dims written `@auto` (Megatron's row
    # is data parallel there: the batch over the only axis).
    ("mlp_dp_1d", "tests/autoshard/progs/train_mlp_1d.tdsl", "sgd", ["--target", "tpu-v5e"],
     lambda p, t: data_parallel(p, "X", t), ("found", "data parallel", "megatron", "fsdp"), None),
    # samples/gpt.tdsl's train_step where the weights dominate: B*S = 512
    # tokens, D = 1024, 2 layers.  Weights 12 D^2 L + 2 V D = 27M values
    # (105 MiB, and the momentum as much); activations B*S*D = 2 MiB a
    # tensor.  Data parallel all-reduces 105 MiB of gradients (2 * 7/8 of
    # it per device); FSDP gathers the weights twice and reduce-scatters
    # the gradients (3 * 7/8); Megatron (heads and F over Y = 4, batch over
    # X = 2) all-reduces the gradients of a quarter of the weights over X
    # (2 * 1/2 * 26 MiB) and four activations per layer over Y (2 * 3/4 *
    # 1 MiB each).  Predicted on tpu-v5e for the hand forms
    # bench/auto/gpt_*.tdsl: Megatron 1.81 ms, tensor parallel over both
    # axes (batch unsplit) 2.15 ms, Megatron with the axes swapped (model
    # over X) 2.57 ms, FSDP 4.38 ms, data parallel 4.92 ms.
    ("gpt_megatron", "samples/gpt.tdsl", "train_step",
     ["--auto", "--const", "B=8,S=64,D=1024,H=16,K=64,F=4096,V=1024,L=2", "--target", "tpu-v5e"],
     megatron_gpt, ("found", "data parallel", "megatron", "fsdp"), None),
    # samples/train_mlp.tdsl's SGD step with 32 MiB weights (w1, w2: 16 MiB
    # each) and B = 8192 under --device-memory 140 MiB.  Per device
    # (parameters and results plus the scheduled peak, bench/auto/
    # train_mlp_*.tdsl): data parallel 272 MiB (the weights and momentum
    # replicated: 64 MiB, the gradients, new weights and new momentum as
    # much again), Megatron 176 MiB (x and y split only 2 ways: 32 MiB),
    # FSDP 122 MiB (weights and momentum 8 MiB; one gathered weight at a
    # time).  Only FSDP fits (it is also the fastest predicted on tpu-v5e:
    # 1.13 ms, Megatron 1.21 ms, data parallel 1.67 ms).
    ("mlp_fsdp_cap", "samples/train_mlp.tdsl", "sgd_dp",
     ["--auto", "--const", "B=8192,D=1024,H=4096,O=1024", "--device-memory", "140M", "--target", "tpu-v5e"],
     fsdp_mlp, ("found", "data parallel", "megatron", "fsdp"), 140 << 20),
    # tests/autoshard/progs/moe_dispatch.tdsl (its comment has the
    # arithmetic): tokens dispatched into per-expert buffers, two expert
    # matmuls batched over e.  Experts over X and Y move the buffer and the
    # results (8 MiB each, 7/8 of them); F split all-reduces y[E, C, D];
    # replicated experts hold 256 MiB a device.  Predicted on tpu-v5e:
    # experts over (X, Y) 150 us, megatron 231 us, fsdp 514 us, data
    # parallel 772 us.
    ("moe_expert", "tests/autoshard/progs/moe_dispatch.tdsl", "moe", ["--target", "tpu-v5e"],
     expert_moe, ("found", "data parallel", "megatron", "fsdp", "ilp"), None),
    # samples/moe.tdsl: each token gathers its expert's whole [D, F] weight
    # (out[s, f] = w[route[s], d, f] * a[s, d]).  Split F, every device
    # computes its columns for every token with no collective (0 bytes);
    # split E, a device computes only its experts' tokens (the fill-mode
    # gather skips the others) but the outputs are partial sums to reduce.
    # Predicted on tpu-v5e: F over (X, Y) 213 ns, data parallel 1.31 us.
    ("moe_tensor", "samples/moe.tdsl", "moe", ["--auto", "--target", "tpu-v5e"],
     tensor_moe, ("found", "data parallel", "megatron", "fsdp"), None),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardc", default=os.path.join(ROOT, "build", "shardc"))
    ap.add_argument("--only", default="", help="a regex over the cases' names")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each autoshard output")
    args = ap.parse_args()
    passed = failed = 0
    for name, path, fn, opts, check, rows, cap in CASES:
        if not re.search(args.only, name):
            continue
        cmd = [args.shardc, "autoshard", os.path.join(ROOT, path), "--fn", fn] + opts
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if args.verbose:
                print(p.stdout + p.stderr)
            if p.returncode != 0 or "# chosen:" not in p.stdout:
                raise RuntimeError("`%s` failed (status %d): %s" % (" ".join(cmd[1:]), p.returncode,
                                                                   (p.stderr or p.stdout).strip()[-600:]))
            plan = parse_signature(p.stdout, fn)
            table = p.stdout.split("# chosen:", 1)[1]
            for name_ in rows:
                row(table, name_)
            try:
                check(plan, table)
            except RuntimeError as e:
                raise RuntimeError("%s; the chosen plan:\n%s" % (e, fmt_plan(plan)))
            if cap is not None:
                mem = chosen_memory(p.stdout)
                if mem > cap:
                    raise RuntimeError("the chosen plan needs %.0f bytes per device, over the cap %d" % (mem, cap))
                if "over memory" not in row(table, "data parallel")["text"]:
                    raise RuntimeError("the `data parallel` row does not say `over memory`")
            print("ok %s" % name)
            passed += 1
        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
            print("FAIL %s: %s" % (name, e))
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
