/* The IR verifier: run after every pass in debug and test builds.  A
 * failure is a compiler bug, so messages name instructions, not source. */
#include "ir.h"

#include <stdio.h>

typedef struct {
    const Module *m;
    char *buf;
    Arena *scratch;              /* freed when the verifier returns */
} Verifier;

static const char *fail(const Verifier *vf, const Fn *fn, int v, const char *what) {
    const Module *m = vf->m;
    snprintf(vf->buf, VERIFY_MSG_SIZE, "%s: instruction %d (%s): %s", sym_name(m->syms, fn->sym), v,
             op_info[fn->insts[v].op].name, what);
    return vf->buf;
}

static const char *check_sharding(const Module *m, const Shape *s, const Sharding *sh) {
    if (!sh->known)
        return NULL;
    for (int a = 0; a < MAX_AXES; a++) {
        int d = sh->dim[a];
        if (a >= m->naxes ? d != SH_REPLICATED : (d < SH_PARTIAL || d >= s->rank))
            return "sharding names a dim or axis that does not exist";
        for (int b = 0; b < a; b++)
            if (d >= 0 && sh->dim[b] == d && sh->pos[b] == sh->pos[a])
                return "two axes split one dim at the same position";
    }
    return s->rank <= 8 && (sh->open >> s->rank) == 0 ? NULL : "open dims out of range";
}

/* Dims made only of PASS and REDUCTION factors must have the product of
 * their factor sizes as extent. */
static const char *check_rule(const Fn *fn, const Inst *in) {
    Rule r;
    if (!op_rule(fn, in, &r))
        return NULL;
    for (int t = 0; t < r.ntensors; t++) {
        const Shape *s = t < in->nargs ? &fn->insts[ir_arg(fn, in, t)].type : &in->type;
        if (r.rank[t] != s->rank)
            return "factor rule rank differs from the shape";
        for (int d = 0; d < s->rank; d++) {
            int64_t prod = 1;
            int exact = 1;
            for (int k = 0; k < r.ndf[t][d]; k++) {
                int f = r.f[t][d][k];
                exact &= r.kind[f] != FACTOR_REPLICATE;
                prod *= r.size[f];
            }
            if (exact && prod != s->dims[d])
                return "factor sizes do not multiply to the dim extent";
        }
    }
    return NULL;
}

/* Sema emits dots in HLO's result order: batch, then lhs free, then rhs free
 * dims, each in operand order.  Printing and later passes rely on it. */
static const char *check_dot_order(const Fn *fn, const Inst *in) {
    const Shape *a = &fn->insts[ir_arg(fn, in, 0)].type, *b = &fn->insts[ir_arg(fn, in, 1)].type;
    int64_t want[MAX_RANK];
    int n = 0, ra = a->rank, rb = b->rank;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < (pass == 2 ? rb : ra); i++) {
            int64_t l = ir_attr(fn, in, pass == 2 ? ra + i : i);
            int in_a = pass != 2, in_b = 0, in_res = 0;
            for (int j = 0; j < rb; j++)
                in_b |= ir_attr(fn, in, ra + j) == l;
            for (int j = 0; j < in->type.rank; j++)
                in_res |= ir_attr(fn, in, ra + rb + j) == l;
            if (pass == 2)
                for (int j = 0; j < ra; j++)
                    in_a |= ir_attr(fn, in, j) == l;
            int want_here = pass == 0 ? in_b && in_res : pass == 1 ? !in_b && in_res : !in_a && in_res;
            if (want_here && n < MAX_RANK)
                want[n++] = l;
        }
    if (n != in->type.rank)
        return "dot result has a label no operand pairs with";
    for (int i = 0; i < n; i++)
        if (want[i] != ir_attr(fn, in, ra + rb + i))
            return "dot result dims are not in batch, lhs, rhs order";
    return NULL;
}

/* Every started collective is waited for exactly once. */
static const char *check_dones(const Verifier *vf, const Fn *fn) {
    int *dones = arena_alloc(vf->scratch, sizeof(int) * ((size_t)fn->ninsts + 1));
    for (int v = 0; v < fn->ninsts; v++)
        if (fn->insts[v].op == OP_DONE)
            dones[ir_arg(fn, &fn->insts[v], 0)]++;
    const char *err = NULL;
    for (int v = 0; v < fn->ninsts && !err; v++)
        if ((fn->insts[v].flags & INST_ASYNC) && dones[v] != 1)
            err = fail(vf, fn, v, "a started collective is not waited for exactly once");
    return err;
}

/* The schedule is one the runtime accepts: a collective starts only once
 * every one started COLLECTIVE_WINDOW or more before it is done, counting
 * those that calls start (and finish) in between. */
static const char *check_window(const Verifier *vf, const Fn *fn) {
    size_t n = (size_t)fn->ninsts + 1;
    int *nth = arena_alloc(vf->scratch, sizeof(int) * n);          /* a start -> its place among the starts */
    int64_t *seq = arena_alloc(vf->scratch, sizeof(int64_t) * n);  /* the k-th start's count of starts before it */
    uint8_t *open = arena_alloc(vf->scratch, n);                    /* the k-th start is not done yet */
    int64_t nstarted = 0;
    int nasync = 0, oldest = 0;              /* starts before the oldest are all done */
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (in->op == OP_DONE) {
            open[nth[ir_arg(fn, in, 0)]] = 0;
            continue;
        }
        int more = op_calls(in->op) ? call_collectives(vf->m, fn, in) : op_is_collective(in->op);
        while (oldest < nasync && !open[oldest])
            oldest++;
        if (more && oldest < nasync && nstarted + more - seq[oldest] > COLLECTIVE_WINDOW)
            return fail(vf, fn, v, "starts a collective while one started COLLECTIVE_WINDOW before is not done");
        if (in->flags & INST_ASYNC) {
            nth[v] = nasync;
            seq[nasync] = nstarted;
            open[nasync++] = 1;
        }
        nstarted += more;
    }
    return NULL;
}

static const char *verify_fn(const Verifier *vf, const Fn *fn) {
    const Module *m = vf->m;
    for (int i = 0; i < fn->nparams; i++)
        if (check_sharding(m, &fn->params[i].type, &fn->params[i].sh))
            return "bad parameter sharding";
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (in->op >= OP_COUNT)
            return fail(vf, fn, v, "unknown op");
        for (int i = 0; i < in->nargs; i++) {
            int32_t a = ir_arg(fn, in, i);
            if (a < 0 || a >= v)
                return fail(vf, fn, v, "operand is not defined before its use");
            if (fn->insts[a].type.dtype == DT_TUPLE && in->op != OP_GET_TUPLE_ELEMENT)
                return fail(vf, fn, v, "tuple used by something other than get-tuple-element");
            if ((fn->insts[a].flags & INST_ASYNC) && in->op != OP_DONE)
                return fail(vf, fn, v, "a started collective is used before its done");
        }
        Shape s;
        const char *err = op_infer(m, fn, in, &s);
        if (!err && !shape_eq(&s, &in->type))
            err = "recorded shape differs from the inferred one";
        if (!err)
            err = check_sharding(m, &in->type, &in->sh);
        if (!err)
            err = check_rule(fn, in);
        if (!err && in->op == OP_DOT)
            err = check_dot_order(fn, in);
        if (!err && (in->op == OP_RETURN) != (v == fn->ninsts - 1))
            err = "a function ends with its one return";
        if (err)
            return fail(vf, fn, v, err);
    }
    if (!fn->ninsts)
        return "function has no instructions";
    const char *err = check_dones(vf, fn);
    return err || !fn->scheduled ? err : check_window(vf, fn);
}

const char *ir_verify(const Module *m, char buf[VERIFY_MSG_SIZE]) {
    Arena scratch = {0};
    Verifier vf = {m, buf, &scratch};
    const char *err = NULL;
    for (int f = 0; f < m->nfns && !err; f++)
        err = verify_fn(&vf, &m->fns[f]);
    arena_free(&scratch);
    return err;
}
