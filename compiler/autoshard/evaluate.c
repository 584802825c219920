/* A plan's predicted cost: the source checked afresh with the plan written
 * into its syntax (write_plan.c), then propagated, partitioned and
 * scheduled as frontend.c does, and costed on the target
 * (docs/autoshard.md). */
#include "autoshard.h"

#include "../partition/partition.h"
#include "../propagate/propagate.h"
#include "../schedule/schedule.h"

#include <stdlib.h>
#include <string.h>

/* The bytes of the entry fn's parameters on one device: the schedule's
 * peak leaves them out, but they are what the plan keeps resident. */
static int64_t param_bytes(const Module *m, const Fn *fn) {
    int64_t n = 0;
    for (int i = 0; i < fn->nparams; i++) {
        Shape local = shape_local(m, &fn->params[i].type, &fn->params[i].sh);
        n += shape_elems(&local) * dtype_size(local.dtype);
    }
    return n;
}

/* Keep only the entry fn and the fns it reaches (calls, loop bodies, and
 * the fns a derived, specialized or loop fn names), renumbered in their
 * order: a plan's cost is the entry fn's, and propagating, partitioning and
 * scheduling the rest of the program (the GPT sample's generation fns when
 * the search is on its train step) would only take time.  Returns the
 * entry's new index. */
static int prune(Module *m, int entry) {
    int *map = calloc((size_t)m->nfns + 1, sizeof(int)), *stack = malloc(sizeof(int) * ((size_t)m->nfns + 1));
    int n = 0;
    map[entry] = 1;                          /* 1 + reached, then the new index + 1 */
    stack[n++] = entry;
    while (n) {
        const Fn *fn = &m->fns[stack[--n]];
        int refs[4] = {fn->grad_of, fn->vjp_of, fn->spec_of, fn->loop_of};
        for (int i = 0; i < 4; i++)
            if (refs[i] && !map[refs[i] - 1]) {
                map[refs[i] - 1] = 1;
                stack[n++] = refs[i] - 1;
            }
        for (int v = 0; v < fn->ninsts; v++)
            if (op_calls(fn->insts[v].op) && !map[inst_callee(fn, &fn->insts[v])]) {
                map[inst_callee(fn, &fn->insts[v])] = 1;
                stack[n++] = inst_callee(fn, &fn->insts[v]);
            }
    }
    int kept = 0;
    for (int f = 0; f < m->nfns; f++)
        if (map[f]) {
            m->fns[kept] = m->fns[f];
            map[f] = ++kept;
        }
    for (int f = 0; f < kept; f++) {
        Fn *fn = &m->fns[f];
        int *refs[4] = {&fn->grad_of, &fn->vjp_of, &fn->spec_of, &fn->loop_of};
        for (int i = 0; i < 4; i++)
            *refs[i] = *refs[i] ? map[*refs[i] - 1] : 0;
        for (int v = 0; v < fn->ninsts; v++)
            if (op_calls(fn->insts[v].op))
                fn->ints[fn->insts[v].attrs] = map[inst_callee(fn, &fn->insts[v])] - 1;
    }
    m->nfns = kept;
    int at = map[entry] - 1;
    free(map);
    free(stack);
    return at;
}

static AutoScore score(AutoEval *e, const int *choice) {
    const AutoProblem *p = e->p;
    AutoScore s = {0};
    Module *m;
    Diag *diag;
    if (!e->text) {
        e->text = arena_alloc(e->a, sizeof *e->text);
        autoshard_plan_text(e, choice, e->a, e->text);
    } else
        autoshard_plan_choose(e, choice, e->text);
    void *h = e->src.checked(e->src.ctx, e->text, &m, &diag);
    if (!h)
        return s;
    int entry = prune(m, p->fn);
    propagate_module(m);
    partition_module(m, diag);
    if (!diag->errors) {
        schedule_module(m);
        Cost c = cost_begin(p->t, m);
        const FnCost *fc = cost_fn(&c, entry);
        const Fn *fn = &m->fns[entry];
        s = (AutoScore){1, fc->time, fn->peak_nested + param_bytes(m, fn), fc->sent, 0};
        cost_end(&c);
        for (int k = 0; k < p->nparams; k++)
            s.splits += autoshard_splits(&p->params[k].cand[choice[k]], fn->params[p->params[k].param].type.rank);
    }
    e->src.release(h);
    return s;
}

const AutoPlan *autoshard_evaluate(AutoEval *e, const int *choice) {
    const AutoProblem *p = e->p;
    size_t size = sizeof(int) * (size_t)(p->nparams + 1);
    int *c = malloc(size);
    for (int k = 0; k < p->nparams; k++)          /* a tied parameter takes its tie's candidate */
        c[k] = p->params[k].tie >= 0 ? choice[p->params[k].tie] : choice[k];
    for (int i = 0; i < e->nplans; i++)
        if (memcmp(e->plans[i]->choice, c, size - sizeof(int)) == 0) {
            free(c);
            return e->plans[i];
        }
    int *kept = memcpy(arena_alloc(e->a, size), c, size);   /* a new plan: kept with the search */
    free(c);
    c = kept;
    AutoScore s = score(e, c);
    if (e->nplans == e->cap) {
        int cap = e->cap ? 2 * e->cap : 64;
        e->plans = arena_realloc(e->a, e->plans, sizeof(AutoPlan *) * (size_t)e->cap,
                                 sizeof(AutoPlan *) * (size_t)cap);
        e->cap = cap;
    }
    AutoPlan *plan = arena_alloc(e->a, sizeof *plan);
    *plan = (AutoPlan){c, s};
    e->plans[e->nplans++] = plan;
    if (e->progress)
        e->progress(e->progress_ctx, e->nplans, s.time);
    return plan;
}
