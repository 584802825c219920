/* The search: the named plans (data parallel, megatron, fsdp, as written)
 * and the integer program's plan (ilp.c) are evaluated; the best that fits
 * the memory cap is improved by coordinate descent.  A tiny problem is
 * enumerated instead.  Every plan's cost is the real pipeline's prediction
 * (evaluate.c), so the search is only as good as the cost model, and never
 * worse than the plans it starts from. */
#include "autoshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const auto_named[AUTO_NAMED] = {"data parallel", "megatron", "fsdp", "as written"};

enum { ENUMERATE_MAX = 256, MAX_SWEEPS = 4 };
#define TIME_TOLERANCE 0.02

int autoshard_better(const AutoScore *a, const AutoScore *b) {
    if (!b->ok)
        return a->ok;
    if (!a->ok || a->time != b->time)
        return a->ok && a->time < b->time;
    if (a->sent != b->sent)
        return a->sent < b->sent;
    return a->splits < b->splits;
}

static int fits(const AutoEval *e, const AutoPlan *pl) {
    return pl && pl->score.ok && (!e->p->device_memory || pl->score.memory <= e->p->device_memory);
}

/* pl is a step forward from best: it fits and is better, or fits where best
 * does not, or neither fits and pl needs less memory (toward fitting). */
static int improves(const AutoEval *e, const AutoPlan *pl, const AutoPlan *best) {
    if (!best)
        return pl && pl->score.ok;
    if (fits(e, pl))
        return !fits(e, best) || autoshard_better(&pl->score, &best->score);
    return !fits(e, best) && pl->score.ok && pl->score.memory < best->score.memory;
}

/* The candidate of parameter k that puts `axes` (mesh order) on dim d and
 * nothing else on its searched dims; -1 when it does not divide. */
static int find_cand(const AutoParam *ap, const uint32_t axes, int d) {
    Sharding want = ap->cand[0];
    int pos = 0;
    for (int a = 0; a < MAX_AXES; a++)
        if (axes >> a & 1) {
            if (want.dim[a] != SH_REPLICATED)
                return -1;
            want.dim[a] = (int8_t)d;
            want.pos[a] = (uint8_t)pos++;
        }
    for (int c = 0; c < ap->ncand; c++)
        if (sharding_eq(&ap->cand[c], &want))
            return c;
    return -1;
}

/* Dim 0 over as many of `axes` as divide it: all, else dropping the last. */
static int batch_cand(const AutoParam *ap, uint32_t axes) {
    for (; axes; axes &= ~(1u << (31 - __builtin_clz(axes)))) {
        int c = find_cand(ap, axes, 0);
        if (c >= 0)
            return c;
    }
    return 0;
}

/* The largest dim split over every axis of `axes`, or 0 (unsplit). */
static int fsdp_cand(const Sig *s, unsigned autod, const AutoParam *ap, uint32_t axes) {
    int best = 0;
    int64_t size = 0;
    for (int d = 0; d < s->type.rank; d++) {
        int c = (autod >> d & 1) ? find_cand(ap, axes, d) : -1;
        if (c >= 0 && s->type.dims[d] > size) {
            best = c;
            size = s->type.dims[d];
        }
    }
    return best;
}

/* Candidates i and j of a parameter differ in where one mesh axis goes
 * (a dim, or none): the descent's moves.  Moving one axis at a time keeps a
 * sweep linear in the axes and dims (2 x rank candidates on a 2-D mesh
 * against (rank + 1)^2 for every candidate), and reaches any plan in steps
 * that each improve it. */
static int one_axis_apart(const Module *m, const Sharding *a, const Sharding *b) {
    int moved = 0;
    for (int x = 0; x < m->naxes; x++)
        moved += a->dim[x] != b->dim[x] || (a->dim[x] >= 0 && a->pos[x] != b->pos[x]);
    return moved == 1;
}

/* Coordinate descent from `start` over the candidates allowed[k] (NULL: all): sweep the
 * parameters in order, each trying the candidates one axis apart from its
 * own with the others fixed, until a sweep changes nothing. */
static const AutoPlan *descend(AutoEval *e, const AutoPlan *start, uint8_t *const *allowed) {
    const AutoProblem *p = e->p;
    int *c = arena_alloc(e->a, sizeof(int) * (size_t)(p->nparams + 1));
    memcpy(c, start->choice, sizeof(int) * (size_t)p->nparams);
    const AutoPlan *best = start;
    for (int sweep = 0, changed = 1; changed && sweep < MAX_SWEEPS; sweep++) {
        changed = 0;
        for (int k = 0; k < p->nparams; k++) {
            if (p->params[k].tie >= 0)
                continue;
            int keep = c[k];
            for (int j = 0; j < p->params[k].ncand; j++) {
                if (j == keep || (allowed && !allowed[k][j]) ||
                    !one_axis_apart(p->m, &p->params[k].cand[keep], &p->params[k].cand[j]))
                    continue;
                c[k] = j;
                const AutoPlan *pl = autoshard_evaluate(e, c);
                if (improves(e, pl, best)) {
                    best = pl;
                    keep = j;
                    changed = 1;
                }
            }
            c[k] = keep;
        }
    }
    return best;
}

/* Every plan of a tiny problem: the best that fits, or NULL. */
static const AutoPlan *enumerate(AutoEval *e) {
    const AutoProblem *p = e->p;
    int *c = arena_alloc(e->a, sizeof(int) * (size_t)(p->nparams + 1));
    const AutoPlan *best = NULL;
    for (;;) {
        const AutoPlan *pl = autoshard_evaluate(e, c);
        if (fits(e, pl) && (!best || autoshard_better(&pl->score, &best->score)))
            best = pl;
        int k = p->nparams - 1;          /* the next choice, the last parameter fastest */
        for (; k >= 0; k--) {
            if (p->params[k].tie >= 0)
                continue;
            if (++c[k] < p->params[k].ncand)
                break;
            c[k] = 0;
        }
        if (k < 0)
            return best;
    }
}

/* The named plans (docs/autoshard.md, "Named plans"). */
static void named_plans(AutoEval *e, AutoResult *r) {
    const AutoProblem *p = e->p;
    const Module *m = p->m;
    const Fn *fn = &m->fns[p->fn];
    uint8_t *data = arena_alloc(e->a, (size_t)p->nparams + 1);
    autoshard_data_params(p, data);
    uint32_t all = (1u << m->naxes) - 1, first = m->naxes > 1 ? 1u : all, last = 1u << (m->naxes - 1);
    int n = p->nparams;
    int *dp = arena_alloc(e->a, sizeof(int) * (size_t)(n + 1)), *fsdp = arena_alloc(e->a, sizeof(int) * (size_t)(n + 1));
    int *mega = arena_alloc(e->a, sizeof(int) * (size_t)(n + 1)), *written = arena_alloc(e->a, sizeof(int) * (size_t)(n + 1));
    uint8_t **allowed = arena_alloc(e->a, sizeof(uint8_t *) * (size_t)(n + 1));
    int every_dim_auto = 1;
    for (int k = 0; k < n; k++) {
        const AutoParam *ap = &p->params[k];
        const Sig *s = &fn->params[ap->param];
        unsigned autod = auto_dims(fn, ap->param);
        every_dim_auto &= autod == (1u << s->type.rank) - 1;
        allowed[k] = arena_alloc(e->a, (size_t)ap->ncand + 1);
        if (data[k]) {
            dp[k] = fsdp[k] = (autod & 1) ? batch_cand(ap, all) : 0;
            mega[k] = (autod & 1) ? batch_cand(ap, first) : 0;
            allowed[k][mega[k]] = 1;
        } else {
            dp[k] = mega[k] = 0;
            fsdp[k] = fsdp_cand(s, autod, ap, all);
            allowed[k][0] = 1;
            for (int d = 0; d < s->type.rank; d++) {   /* a weight: unsplit, or one dim over the last axis */
                int c = (autod >> d & 1) ? find_cand(ap, last, d) : -1;
                if (c >= 0)
                    allowed[k][c] = 1;
            }
        }
        written[k] = 0;
    }
    every_dim_auto &= fn->nparams == n;
    r->named[0] = autoshard_evaluate(e, dp);
    r->named[2] = autoshard_evaluate(e, fsdp);
    r->named[3] = every_dim_auto ? NULL : autoshard_evaluate(e, written);
    const AutoPlan *m0 = autoshard_evaluate(e, mega);
    r->named[1] = m->naxes > 1 ? descend(e, m0, allowed) : m0;
}

/* Of the plans that fit and are predicted within TIME_TOLERANCE of the
 * fastest, the one that sends the fewest bytes (then the faster).  The
 * model's error is wider than that (docs/performance.md): plans it cannot
 * tell apart measured up to 17% apart on this machine, the one moving more
 * bytes the slower, since here the cores that copy are those that
 * compute. */
static const AutoPlan *least_sent(const AutoEval *e, const AutoPlan *fastest) {
    const AutoPlan *pick = fastest;
    for (int i = 0; i < e->nplans; i++) {
        const AutoPlan *pl = e->plans[i];
        if (!fits(e, pl) || pl->score.time > fastest->score.time * (1 + TIME_TOLERANCE))
            continue;
        if (pl->score.sent < pick->score.sent ||
            (pl->score.sent == pick->score.sent && autoshard_better(&pl->score, &pick->score)))
            pick = pl;
    }
    return pick;
}

/* The integer program's plan (ilp.c), evaluated; NULL when it has none.
 * Its one-line reason for having none goes into the report, not to the
 * terminal: the search goes on without it. */
static const AutoPlan *ilp_plan(AutoEval *e, AutoResult *r) {
    char *why = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&why, &len);
    int rc = err ? ilp_solve(e->p, e->a, &r->ilp, err) : -1;
    if (err)
        fclose(err);
    r->ilp_ran = 1;
    if (why && len) {
        why[strcspn(why, "\n")] = '\0';
        snprintf(r->ilp_why, sizeof r->ilp_why, "%s", why);
    }
    free(why);
    return rc == 0 ? (r->ilp_plan = autoshard_evaluate(e, r->ilp.choice)) : NULL;
}

int autoshard_search(AutoEval *e, AutoResult *r) {
    const AutoProblem *p = e->p;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(r, 0, sizeof *r);
    r->candidate_plans = 1;
    for (int k = 0; k < p->nparams; k++)
        if (p->params[k].tie < 0)
            r->candidate_plans *= p->params[k].ncand;
    named_plans(e, r);
    const AutoPlan *best = NULL;
    for (int i = 0; i < AUTO_NAMED; i++)
        if (r->named[i] && improves(e, r->named[i], best))
            best = r->named[i];
    if (r->candidate_plans <= ENUMERATE_MAX) {
        r->enumerated = 1;
        const AutoPlan *pl = enumerate(e);
        if (pl && improves(e, pl, best))
            best = pl;
    } else {
        const AutoPlan *pl = ilp_plan(e, r);
        if (improves(e, pl, best))
            best = pl;
        if (best)
            best = descend(e, best, NULL);
    }
    best = fits(e, best) ? best : NULL;
    r->found = best ? least_sent(e, best) : NULL;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return best ? 0 : -1;
}
