/* The replication check of spmd fn results (JAX's check_rep): a result whose
 * type splits no dim over axis A is declared the same on every device along
 * A, and this pass proves it.  A value varies along A when it depends on a
 * parameter split over A, on axis_index(A), or on a collective that leaves it
 * varying; psum and all_gather over A make it invariant again.  A loop's
 * result varies along what its iterations leave it varying along
 * (fn_variation, compiler/ir). */
#include "sema.h"

/* The value that made v differ along axis a: v, where it starts to
 * differ (variation_rule; a loop, whose body did), or its first operand's
 * that differs along a. */
static int origin_of(const Fn *fn, const uint32_t *varies, const int *origin, int v, int a) {
    uint32_t keep, adds = variation_rule(fn, v, &keep);
    const Inst *in = &fn->insts[v];
    if (adds >> a & 1)
        return v;
    for (int i = 0; i < in->nargs; i++) {
        int u = ir_arg(fn, in, i);
        if (varies[u] >> a & 1)
            return origin[u * MAX_AXES + a];
    }
    return v;
}

static const char *origin_text(Sema *s, const Fn *fn, int v, int axis) {
    const Inst *in = &fn->insts[v];
    const char *ax = sym(s, s->m->axis_sym[axis]);
    switch ((Op)in->op) {
    case OP_PARAMETER:
        return arena_printf(s->arena, "parameter '%s', which is split over %s", sym(s, in->sym), ax);
    case OP_AXIS_INDEX:
        return arena_printf(s->arena, "axis_index at %d:%d", in->loc.line, in->loc.col);
    default:
        return arena_printf(s->arena, "the %s at %d:%d, whose result differs along %s", op_info[in->op].name,
                            in->loc.line, in->loc.col, ax);
    }
}

void check_replication(Sema *s, Fn *fn) {
    uint32_t *varies = arena_alloc(s->arena, sizeof(uint32_t) * (size_t)fn->ninsts);
    int *origin = arena_alloc(s->arena, sizeof(int) * (size_t)fn->ninsts * MAX_AXES);
    fn_variation(s->m, fn, NULL, varies);
    for (int v = 0; v < fn->ninsts; v++)
        for (int a = 0; a < MAX_AXES; a++)
            if (varies[v] >> a & 1)
                origin[v * MAX_AXES + a] = origin_of(fn, varies, origin, v, a);
    const Inst *ret = &fn->insts[fn->ninsts - 1];
    for (int i = 0; i < fn->nresults; i++) {
        int v = ir_arg(fn, ret, i);
        for (int a = 0; a < s->m->naxes; a++) {
            if (fn->results[i].sh.dim[a] >= 0 || !(varies[v] >> a & 1))
                continue;
            const char *ax = sym(s, s->m->axis_sym[a]);
            sema_error(s, ret->loc, "result %d of '%s' is declared replicated along %s, but it varies along %s: "
                       "it depends on %s; reduce it with psum or all_gather over %s, or split a result dim over %s",
                       i + 1, sym(s, fn->sym), ax, ax, origin_text(s, fn, origin[v * MAX_AXES + a], a), ax, ax);
        }
    }
}
