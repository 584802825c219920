/* The cost columns of `dump --stage scheduled --cost` and the summary that
 * dump and show print (docs/autoshard.md, "Reading the output"). */
#include "cost.h"

/* Seconds with a unit, 4 significant digits: deterministic text. */
static void print_time(FILE *out, double s) {
    if (s == 0)
        fputs("0s", out);
    else if (s < 1e-6)
        fprintf(out, "%.4gns", s * 1e9);
    else if (s < 1e-3)
        fprintf(out, "%.4gus", s * 1e6);
    else if (s < 1)
        fprintf(out, "%.4gms", s * 1e3);
    else
        fprintf(out, "%.4gs", s);
}

static void print_inst(FILE *out, Cost *cost, int fn, int v) {
    const Inst *in = &cost->m->fns[fn].insts[v];
    if (in->op == OP_PARAMETER || in->op == OP_RETURN || in->op == OP_GET_TUPLE_ELEMENT)
        return;
    InstCost c = cost_inst(cost, fn, v);
    fprintf(out, "  # flops=%.0f bytes=%.0f sent=%.0f t=", c.flops, c.bytes, c.sent);
    print_time(out, c.time);
    fprintf(out, " bound=%s", bound_name[c.bound]);
    if (in->op == OP_DONE)
        fputs(" (waits for its start)", out);
}

static void print_fn(FILE *out, Cost *cost, int fn) {
    const Target *t = cost->t;
    const Module *m = cost->m;
    FnCost c = *cost_fn(cost, fn);
    const char *name = sym_name(m->syms, m->fns[fn].sym);
    fprintf(out, "# predicted time of %s on target %s: ", name, t->name);
    print_time(out, c.time);
    fputs("\n#   compute ", out);
    print_time(out, c.compute);
    fputs(", memory ", out);
    print_time(out, c.memory);
    fputs(", comm ", out);
    print_time(out, c.comm);
    fputs(", hidden by overlap ", out);
    print_time(out, c.hidden);
    fprintf(out, "; flops=%.0f bytes=%.0f sent=%.0f per device\n", c.flops, c.bytes, c.sent);
    const Fn *f = &m->fns[fn];
    int64_t peak = f->peak_nested > f->peak_bytes ? f->peak_nested : f->peak_bytes;
    if (f->scheduled && peak > t->mem_per_device)   /* parameters not included: the least it needs */
        fprintf(out, "#   does not fit target %s: %lld bytes per device of buffers alone (parameters not included), "
                "mem_per_device %lld\n", t->name, (long long)peak, (long long)t->mem_per_device);
}

static void hook_inst(void *ctx, FILE *out, const Module *m, int fn, int v) {
    if (m->fns[fn].scheduled)
        print_inst(out, ctx, fn, v);
}

static void hook_fn(void *ctx, FILE *out, const Module *m, int fn) {
    if (m->fns[fn].scheduled)
        print_fn(out, ctx, fn);
}

static void print_target(FILE *out, const Target *t) {
    fprintf(out, "# target %s (%s)\n", t->name, t->source);
}

void cost_dump(const Module *m, FILE *out, int only_fn_sym, const Target *t) {
    print_target(out, t);
    Cost c = cost_begin(t, m);
    ir_dump_hooked(m, out, only_fn_sym, 0, &(DumpHooks){&c, hook_inst, hook_fn});
    cost_end(&c);
}

void cost_show(const Module *m, FILE *out, int fn, const Target *t) {
    print_target(out, t);
    Cost c = cost_begin(t, m);
    print_fn(out, &c, fn);
    cost_end(&c);
}
