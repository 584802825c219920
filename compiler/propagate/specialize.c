/* Sharding-generic functions (docs/language.md, "Sharding-generic functions").
 *
 * A fn whose parameter or result types leave dims open (`@?`) takes its
 * shardings from each call.  Its caller is propagated with such calls
 * inlined, so the callee's values see the caller's shardings both ways,
 * exactly as if the body were written in place (what GSPMD does with the
 * nested calls of a jax.jit function).  Then every inlined body is given
 * back as a call of a specialization: a copy of the callee that carries the
 * shardings its body got there.  Call sites whose bodies got the same
 * shardings share one specialization, so a layer called L times in a loop
 * is one function called L times.
 *
 * The inlined copy ("the flat function") is scratch: the caller keeps its
 * calls, now of specializations, and takes its own shardings from it.  Work
 * is linear in the size of the flat function. */
#include "propagate.h"

#include <string.h>

/* One inlined call: callee instruction v became flat value at[v]. */
typedef struct {
    int callee;
    int parent;                  /* the region of the caller, or -1: the function itself */
    int call;                    /* the call instruction in the parent's body */
    int32_t *at;                 /* callee value -> flat value (-1: the return, or a tuple) */
    int *child;                  /* callee instruction -> region of the call it inlined, or -1 */
    int32_t *param, *result;     /* parameter / result i -> flat value */
    int *param_inst;             /* parameter i -> its instruction in the callee */
    int cls;                     /* regions with equal signatures share a class: one specialization */
} Region;

typedef struct {
    Module *m;
    Arena *scratch;
    Fn flat;
    int32_t *top;                /* the function's own values -> flat values */
    int *top_child;              /* the function's instructions -> region of the call inlined, or -1 */
    Region *regions;
    int nregions, regions_cap;
    /* per flat value: the region whose body emitted it (-1: the function)
     * and the instruction of that body it stands for */
    int *owner_region, *owner_inst;
    int owners_cap;
} Flat;

int fn_is_generic(const Fn *fn) {
    for (int i = 0; i < fn->nparams; i++)
        if (fn->params[i].sh.open)
            return 1;
    for (int i = 0; i < fn->nresults; i++)
        if (fn->results[i].sh.open)
            return 1;
    return 0;
}

/* Calls that are inlined: of a generic fn on the caller's own devices (a
 * call of a pipeline stage from the whole mesh keeps its boundary). */
static int inlined_call(const Module *m, const Fn *caller, const Inst *in) {
    if (!op_calls(in->op) || caller->spmd)
        return 0;
    const Fn *callee = &m->fns[ir_attr(caller, in, 0)];
    return !callee->spmd && callee->on == caller->on && fn_is_generic(callee);
}

int fn_calls_generic(const Module *m, const Fn *fn) {
    for (int v = 0; v < fn->ninsts; v++)
        if (inlined_call(m, fn, &fn->insts[v]))
            return 1;
    return 0;
}

static void own(Flat *f, int v, int region, int inst) {
    if (v >= f->owners_cap) {
        int cap = 2 * v + 256;
        f->owner_region = arena_realloc(f->scratch, f->owner_region, sizeof(int) * (size_t)f->owners_cap,
                                        sizeof(int) * (size_t)cap);
        f->owner_inst = arena_realloc(f->scratch, f->owner_inst, sizeof(int) * (size_t)f->owners_cap,
                                      sizeof(int) * (size_t)cap);
        f->owners_cap = cap;
    }
    f->owner_region[v] = region;
    f->owner_inst[v] = inst;
}

/* Copy instruction v of `src` into the flat function, operands renamed. */
static int copy_inst(Flat *f, const Fn *src, int v, const int32_t *at) {
    const Inst *in = &src->insts[v];
    int32_t *args = arena_alloc(f->scratch, sizeof(int32_t) * (size_t)(in->nargs + 1));
    for (int i = 0; i < in->nargs; i++)
        args[i] = at[ir_arg(src, in, i)];
    int w = ir_emit(f->m, &f->flat, in->op, args, in->nargs, ir_attrs(src, in), in->nattrs, &in->type, in->loc);
    Inst *out = &f->flat.insts[w];
    out->flags = in->flags;
    out->sym = in->sym;
    out->value = in->value;
    out->sh = in->sh;
    out->place = in->place;
    return w;
}

/* The flat value standing for a parameter or result of a generic fn: the
 * value itself where every dim is open, else a copy constrained to the
 * declared sharding (its open dims left to propagation). */
static int boundary_value(Flat *f, int value, const Sig *sig, const Inst *at_inst) {
    uint8_t all = (uint8_t)((1u << sig->type.rank) - 1);
    if (sig->type.rank > 0 && (sig->sh.open & all) == all)
        return value;
    int w = ir_emit(f->m, &f->flat, OP_COPY, (int32_t[]){value}, 1, NULL, 0, NULL, at_inst->loc);
    Inst *c = &f->flat.insts[w];
    c->flags = INST_CONSTRAINED;
    c->sh = sig->sh;
    c->place = at_inst->place;
    return w;
}

static void inline_body(Flat *f, const Fn *src, int region, const int32_t *args, int32_t *at, int *child);

/* A loop invariant enters the body through a copy of its own that
 * propagation shards as the body's uses want: where that differs from the
 * caller's value, the loop's call reshards it once, not every iteration. */
static int invariant_value(Flat *f, int value, const Inst *at_inst) {
    int w = ir_emit(f->m, &f->flat, OP_COPY, (int32_t[]){value}, 1, NULL, 0, NULL, at_inst->loc);
    f->flat.insts[w].place = at_inst->place;
    return w;
}

/* A loop's body is inlined once, as one iteration.  What it returns as a
 * carried value the next iteration takes as that parameter, so the two
 * should get one sharding: a scratch elementwise op over both (its result
 * unused) lets propagation carry a sharding between them either way. */
static void tie_carried(Flat *f, int r, int parent, int v, const Inst *loop) {
    const Fn *g = &f->m->fns[f->regions[r].callee];
    for (int j = 0; j < g->loop_carried; j++) {
        int32_t both[2] = {f->regions[r].param[1 + j], f->regions[r].result[j]};
        int64_t cmp = CMP_EQ;
        int w = ir_emit(f->m, &f->flat, OP_COMPARE, both, 2, &cmp, 1, NULL, loop->loc);
        f->flat.insts[w].place = loop->place;
        own(f, w, parent, v);
    }
}

static int inline_call(Flat *f, const Fn *caller, int v, int parent, const int32_t *caller_at) {
    const Inst *in = &caller->insts[v];
    int callee = (int)ir_attr(caller, in, 0);
    const Fn *g = &f->m->fns[callee];
    int r = f->nregions;
    Region *reg = VEC_PUSH(f->scratch, f->regions, f->nregions, f->regions_cap);
    *reg = (Region){callee, parent, v,
                    arena_alloc(f->scratch, sizeof(int32_t) * (size_t)(g->ninsts + 1)),
                    arena_alloc(f->scratch, sizeof(int) * (size_t)(g->ninsts + 1)),
                    arena_alloc(f->scratch, sizeof(int32_t) * (size_t)(g->nparams + 1)),
                    arena_alloc(f->scratch, sizeof(int32_t) * (size_t)(g->nresults + 1)),
                    arena_alloc(f->scratch, sizeof(int) * (size_t)(g->nparams + 1)), -1};
    int32_t *args = arena_alloc(f->scratch, sizeof(int32_t) * (size_t)(in->nargs + 1));
    for (int i = 0; i < in->nargs; i++)
        args[i] = caller_at[ir_arg(caller, in, i)];
    inline_body(f, g, r, args, reg->at, reg->child);    /* moves f->regions: reg is stale after */
    if (in->op == OP_LOOP)
        tie_carried(f, r, parent, v, in);
    return r;
}

/* Emit src's body into the flat function, as the function itself (region
 * -1) or as region `region`, whose parameters are `args`. */
static void inline_body(Flat *f, const Fn *src, int region, const int32_t *args, int32_t *at, int *child) {
    for (int v = 0; v < src->ninsts; v++) {
        const Inst *in = &src->insts[v];
        int w = -1, first = f->flat.ninsts;
        child[v] = -1;
        if (region >= 0 && in->op == OP_PARAMETER) {
            int i = (int)ir_attr(src, in, 0);
            w = f->regions[region].param[i] = src->loop_of && i > src->loop_carried && src->params[i].type.rank
                                                  ? invariant_value(f, args[i], in)
                                                  : boundary_value(f, args[i], &src->params[i], in);
            f->regions[region].param_inst[i] = v;
        } else if (region >= 0 && in->op == OP_RETURN) {
            for (int i = 0; i < in->nargs; i++) {
                int x = at[ir_arg(src, in, i)], y = boundary_value(f, x, &src->results[i], in);
                f->regions[region].result[i] = y;
                if (y != x)
                    own(f, y, region, ir_arg(src, in, i));
            }
            at[v] = -1;
            continue;
        } else if (inlined_call(f->m, src, in)) {
            int r = child[v] = inline_call(f, src, v, region, at);
            at[v] = f->m->fns[f->regions[r].callee].nresults == 1 ? f->regions[r].result[0] : -1;
            continue;
        } else if (in->op == OP_GET_TUPLE_ELEMENT && child[ir_arg(src, in, 0)] >= 0) {
            at[v] = f->regions[child[ir_arg(src, in, 0)]].result[ir_attr(src, in, 0)];
            continue;
        } else {
            w = copy_inst(f, src, v, at);
        }
        if (w >= first)
            own(f, w, region, v);    /* a new value, not an argument passed through */
        at[v] = w;
    }
}

/* ---- mapping the flat function back ---- */

/* Flat value u as seen from region r's body (-1: the function's): the
 * instruction of that body it is (an argument passed through is the
 * parameter), or the call whose body holds it; -1 when it lies outside (in
 * a caller). */
static int seen_from(const Flat *f, int r, int u) {
    if (u < 0)
        return -1;
    for (int i = 0; r >= 0 && i < f->m->fns[f->regions[r].callee].nparams; i++)
        if (f->regions[r].param[i] == u)
            return f->regions[r].param_inst[i];
    int reg = f->owner_region[u], inst = f->owner_inst[u];
    while (reg != r) {
        if (reg < 0)
            return -1;
        inst = f->regions[reg].call;
        reg = f->regions[reg].parent;
    }
    return inst;
}

/* Give `dst` the sharding of flat value u and its origin, renamed. */
static void take(const Flat *f, int r, Inst *dst, int u) {
    const Inst *src = &f->flat.insts[u];
    dst->sh = src->sh;
    dst->why = src->why;
    dst->why_from = seen_from(f, r, src->why_from);
    dst->why_from2 = seen_from(f, r, src->why_from2);
    dst->why_root = seen_from(f, r, src->why_root);
    if ((dst->why == WHY_FORWARD || dst->why == WHY_BACKWARD) && dst->why_from < 0)
        dst->why = WHY_CALLER, dst->why_from2 = -1;
    if (dst->why == WHY_PARAMETER && r >= 0)
        dst->why = WHY_CALLER;
}

/* ---- signatures: what a specialization carries ---- */

static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static const Sharding *flat_sh(const Flat *f, int u) { return &f->flat.insts[u].sh; }

static uint64_t signature_hash(const Flat *f, const Region *r) {
    const Fn *g = &f->m->fns[r->callee];
    uint64_t h = mix(14695981039346656037ull, &r->callee, sizeof r->callee);
    for (int v = 0; v < g->ninsts; v++) {
        if (r->child[v] >= 0)
            h = mix(h, &f->regions[r->child[v]].cls, sizeof(int));
        else if (r->at[v] >= 0)
            h = mix(h, flat_sh(f, r->at[v]), sizeof(Sharding));
    }
    for (int i = 0; i < g->nresults; i++)
        h = mix(h, flat_sh(f, r->result[i]), sizeof(Sharding));
    return h;
}

static int same_signature(const Flat *f, const Region *a, const Region *b) {
    if (a->callee != b->callee)
        return 0;
    const Fn *g = &f->m->fns[a->callee];
    for (int v = 0; v < g->ninsts; v++) {
        if (a->child[v] >= 0 ? f->regions[a->child[v]].cls != f->regions[b->child[v]].cls
                             : a->at[v] >= 0 && !sharding_eq(flat_sh(f, a->at[v]), flat_sh(f, b->at[v])))
            return 0;
    }
    for (int i = 0; i < g->nresults; i++)
        if (!sharding_eq(flat_sh(f, a->result[i]), flat_sh(f, b->result[i])))
            return 0;
    return 1;
}

/* Class every region by signature, callees first (a child is emitted
 * after its parent): cls is the first region of the class. */
static void classify(Flat *f) {
    int nslots = 16;
    while (nslots < 2 * f->nregions)
        nslots *= 2;
    int *slot = arena_alloc(f->scratch, sizeof(int) * (size_t)nslots);     /* region + 1, 0: empty */
    for (int r = f->nregions - 1; r >= 0; r--) {
        Region *reg = &f->regions[r];
        uint64_t i = signature_hash(f, reg) & (uint64_t)(nslots - 1);
        while (slot[i] && !same_signature(f, &f->regions[slot[i] - 1], reg))
            i = (i + 1) & (uint64_t)(nslots - 1);
        reg->cls = (int)i;           /* the slot for now: regions compare children by it */
        slot[i] = r + 1;
    }
    int *first = arena_alloc(f->scratch, sizeof(int) * (size_t)nslots);
    for (int r = 0; r < f->nregions; r++) {
        int s = f->regions[r].cls;
        if (!first[s])
            first[s] = r + 1;
    }
    for (int r = 0; r < f->nregions; r++)
        f->regions[r].cls = first[f->regions[r].cls] - 1;
}

/* ---- specializations ---- */

static Sig *sigs_from(const Flat *f, const Sig *decl, int n, const int32_t *values) {
    Sig *s = arena_alloc(f->m->arena, sizeof(Sig) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        s[i] = decl[i];
        s[i].sh = *flat_sh(f, values[i]);
    }
    return s;
}

/* The next name for a specialization of g: `g.N`, N from 1. */
static int spec_name(Module *m, int g) {
    int n = 1;
    for (int f = 0; f < m->nfns; f++)
        n += m->fns[f].spec_of == 1 + g;
    const char *name = arena_printf(m->arena, "%s.%d", sym_name(m->syms, m->fns[g].sym), n);
    return sym_intern(m->syms, name, strlen(name));
}

/* A copy of the generic fn with region r's shardings. */
static int make_spec(Flat *f, int r) {
    Module *m = f->m;
    const Region *reg = &f->regions[r];
    int index = module_clone_fn(m, reg->callee, spec_name(m, reg->callee));
    Fn *s = &m->fns[index];
    s->spec_of = 1 + reg->callee;
    s->params = sigs_from(f, s->params, s->nparams, reg->param);
    s->results = sigs_from(f, s->results, s->nresults, reg->result);
    for (int j = 0; j < s->loop_carried; j++)    /* where propagation left them apart, the body's return reshards */
        s->results[j].sh = s->params[1 + j].sh;
    for (int v = 0; v < s->ninsts; v++) {
        Inst *in = &s->insts[v];
        if (reg->at[v] >= 0)
            take(f, r, in, reg->at[v]);
        if (in->op == OP_PARAMETER) {
            in->why = WHY_CALLER;
            in->why_from = in->why_from2 = in->why_root = -1;
        }
    }
    return index;
}

/* Point the calls that were inlined at their specializations; their
 * results come back in the specializations' result shardings. */
static void retarget_calls(const Flat *f, Fn *fn, const int *child, const int *spec_fn) {
    for (int v = 0; v < fn->ninsts; v++) {
        Inst *in = &fn->insts[v];
        int call = in->op == OP_GET_TUPLE_ELEMENT ? ir_arg(fn, in, 0) : v;
        if ((!op_calls(in->op) && in->op != OP_GET_TUPLE_ELEMENT) || child[call] < 0)
            continue;
        int s = spec_fn[f->regions[child[call]].cls];
        if (op_calls(in->op))
            fn->ints[in->attrs] = s;
        if (in->type.dtype != DT_TUPLE)
            in->sh = f->m->fns[s].results[op_calls(in->op) ? 0 : ir_attr(fn, in, 0)].sh;
        in->why = WHY_CALL;
        in->why_from = in->why_from2 = -1;
        in->why_root = v;
    }
}

/* A specialization made for an earlier caller that class c matches. */
static int existing_spec(const Flat *f, int c, const int *spec_fn) {
    const Region *reg = &f->regions[c];
    for (int s = 0; s < f->m->nfns; s++) {
        const Fn *fn = &f->m->fns[s];
        int same = fn->spec_of == 1 + reg->callee;
        for (int v = 0; same && v < fn->ninsts; v++) {
            const Inst *in = &fn->insts[v];
            if (reg->child[v] >= 0)
                same = !op_calls(in->op) || fn->ints[in->attrs] == spec_fn[f->regions[reg->child[v]].cls];
            else if (reg->at[v] >= 0)
                same = sharding_eq(&in->sh, flat_sh(f, reg->at[v]));
        }
        for (int i = fn->loop_carried; same && i < fn->nresults; i++)   /* carried results: their parameters' */
            same = sharding_eq(&fn->results[i].sh, flat_sh(f, reg->result[i]));
        if (same)
            return s;
    }
    return -1;
}

/* The specialization of region r's class, made after its callees'. */
static int spec_for(Flat *f, int r, int *spec_fn) {
    int c = f->regions[r].cls;
    if (spec_fn[c] >= 0)
        return spec_fn[c];
    const Region *reg = &f->regions[c];
    int ninsts = f->m->fns[reg->callee].ninsts;
    for (int v = 0; v < ninsts; v++)
        if (reg->child[v] >= 0)
            spec_for(f, reg->child[v], spec_fn);
    int s = existing_spec(f, c, spec_fn);
    if (s < 0) {
        s = make_spec(f, c);
        retarget_calls(f, &f->m->fns[s], reg->child, spec_fn);
    }
    return spec_fn[c] = s;
}

void specialize_fn(Module *m, int fn_index, void (*propagate)(const Module *, Fn *)) {
    Arena scratch = {0}, *module_arena = m->arena;
    Fn *fn = &m->fns[fn_index];
    Flat f = {.m = m, .scratch = &scratch, .flat = fn_without_body(fn)};
    f.top = arena_alloc(&scratch, sizeof(int32_t) * (size_t)(fn->ninsts + 1));
    f.top_child = arena_alloc(&scratch, sizeof(int) * (size_t)(fn->ninsts + 1));
    m->arena = &scratch;                 /* the flat function is scratch */
    inline_body(&f, fn, -1, NULL, f.top, f.top_child);
    propagate(m, &f.flat);
    m->arena = module_arena;
    classify(&f);
    int *spec_fn = arena_alloc(&scratch, sizeof(int) * (size_t)(f.nregions + 1));
    for (int r = 0; r < f.nregions; r++)
        spec_fn[r] = -1;
    for (int r = 0; r < f.nregions; r++)
        spec_for(&f, r, spec_fn);
    fn = &m->fns[fn_index];
    for (int v = 0; v < fn->ninsts; v++)
        if (f.top[v] >= 0 && f.top_child[v] < 0)
            take(&f, -1, &fn->insts[v], f.top[v]);
    retarget_calls(&f, fn, f.top_child, spec_fn);
    arena_free(&scratch);
}
