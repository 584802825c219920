/* A plan as the program the user would paste: its shardings written into
 * the syntax of a fresh compile, before sema, on the entry fn's parameters
 * and tied results and on the fields of the records they take.  A record's
 * declaration is every fn's (the model fn a train step differentiates takes
 * the same `p: Gpt`), so setting the shardings on the entry fn's lowered
 * parameters alone would cost a program the printed signature does not
 * give: one whose callees reshard every field to the written record. */
#include "autoshard.h"

#include <stdlib.h>
#include <string.h>

/* The names are copied into `a`: a plan outlives the compile it was chosen
 * in (--device-memory's rounds compile the text again with it). */
static const char *copy(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

void autoshard_plan_text(const AutoEval *e, const int *choice, Arena *a, AutoPlanText *pt) {
    const AutoProblem *p = e->p;
    const Module *m = p->m;
    const Fn *fn = &m->fns[p->fn];
    pt->entry = copy(a, sym_name(m->syms, fn->sym));
    pt->n = p->nparams;
    pt->param = arena_alloc(a, sizeof(char *) * (size_t)(p->nparams + 1));
    pt->sh = arena_alloc(a, sizeof(Sharding) * (size_t)(p->nparams + 1));
    for (int k = 0; k < p->nparams; k++)
        pt->param[k] = copy(a, autoshard_param_name(m, fn, p->params[k].param));
    pt->nresults = e->nresults;
    pt->result = arena_alloc(a, sizeof(Sharding *) * (size_t)(e->nresults + 1));
    pt->result_auto = arena_alloc(a, sizeof(unsigned) * (size_t)(e->nresults + 1));
    for (int r = 0; r < e->nresults; r++) {
        int k = e->result_tie[r];
        pt->result[r] = k >= 0 ? &pt->sh[k] : NULL;
        pt->result_auto[r] = auto_dims(fn, fn->nparams + r);
    }
    pt->naxes = m->naxes;
    for (int x = 0; x < m->naxes; x++)
        pt->axis[x] = copy(a, sym_name(m->syms, m->axis_sym[x]));
    autoshard_plan_choose(e, choice, pt);
}

void autoshard_plan_choose(const AutoEval *e, const int *choice, AutoPlanText *pt) {
    for (int k = 0; k < e->p->nparams; k++) {
        const AutoParam *ap = &e->p->params[k];
        pt->sh[k] = ap->cand[choice[ap->tie >= 0 ? ap->tie : k]];
    }
}

/* The dims of `t` as sh splits them (each searched dim gets its axes or
 * none; a dim not searched has its written axes in sh too). */
static void write_type(Arena *a, Symtab *syms, const AutoPlanText *pt, AstType *t, const Sharding *sh) {
    for (int d = 0; d < t->ndims; d++) {
        AstAxes *ax = &t->dims[d].axes;
        int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
        Loc at = ax->loc;
        *ax = (AstAxes){n ? AXES_LIST : AXES_NONE, n, NULL, NULL, at};
        if (!n)
            continue;
        ax->syms = arena_alloc(a, sizeof(int) * (size_t)n);
        ax->locs = arena_alloc(a, sizeof(Loc) * (size_t)n);
        for (int i = 0; i < n; i++) {
            ax->syms[i] = sym_intern(syms, pt->axis[axes[i]], strlen(pt->axis[axes[i]]));
            ax->locs[i] = at;
        }
    }
}

/* A result left to propagation: its `@auto` dims (all of them under
 * --auto, whatever is written) read as `@?`. */
static void open_auto_dims(AstType *t, unsigned autod) {
    for (int d = 0; d < t->ndims; d++)
        if (t->dims[d].axes.kind == AXES_AUTO || (autod >> d & 1))
            t->dims[d].axes = (AstAxes){AXES_OPEN, 0, NULL, NULL, t->dims[d].axes.loc};
}

AstTop *autoshard_record(const AstProgram *ast, int sym) {
    for (int i = 0; i < ast->tops.n; i++) {
        AstTop *t = ast->tops.items[i];
        if (t->kind == TOP_RECORD && t->sym == sym)
            return t;
    }
    return NULL;
}

static int planned(const AutoPlanText *pt, const char *name) {
    for (int k = 0; k < pt->n; k++)
        if (strcmp(pt->param[k], name) == 0)
            return k;
    return -1;
}

/* The leaves of record `rec` reached as `prefix.field...`. */
static void write_record(AstProgram *ast, Arena *a, Symtab *syms, const AutoPlanText *pt, AstTop *rec,
                         const char *prefix) {
    char path[512];
    for (int i = 0; rec && i < rec->fields.n; i++) {
        AstParam *f = rec->fields.items[i];
        snprintf(path, sizeof path, "%s.%s", prefix, sym_name(syms, f->sym));
        if (f->type->record) {
            write_record(ast, a, syms, pt, autoshard_record(ast, f->type->record - 1), path);
            continue;
        }
        int k = planned(pt, path);
        if (k >= 0)
            write_type(a, syms, pt, f->type, &pt->sh[k]);
    }
}

int autoshard_record_leaves(const AstProgram *ast, const AstTop *rec) {
    int n = 0;
    for (int i = 0; rec && i < rec->fields.n; i++) {
        const AstParam *f = rec->fields.items[i];
        n += f->type->record ? autoshard_record_leaves(ast, autoshard_record(ast, f->type->record - 1)) : 1;
    }
    return n;
}

void autoshard_write_plan(AstProgram *ast, Arena *a, Symtab *syms, const AutoPlanText *pt) {
    for (int i = 0; i < ast->tops.n; i++) {
        AstTop *t = ast->tops.items[i];
        if (t->kind != TOP_FN || strcmp(sym_name(syms, t->fn->sym), pt->entry) != 0)
            continue;
        AstFn *fn = t->fn;
        for (int j = 0; j < fn->params.n; j++) {
            AstParam *q = fn->params.items[j];
            const char *name = sym_name(syms, q->sym);
            int k = q->type->record ? -1 : planned(pt, name);
            if (q->type->record)
                write_record(ast, a, syms, pt, autoshard_record(ast, q->type->record - 1), name);
            else if (k >= 0)
                write_type(a, syms, pt, q->type, &pt->sh[k]);
        }
        for (int r = 0, lowered = 0; r < fn->results.n; r++) {
            AstType *rt = fn->results.items[r];
            if (rt->record) {
                lowered += autoshard_record_leaves(ast, autoshard_record(ast, rt->record - 1));
                continue;
            }
            if (lowered < pt->nresults && pt->result[lowered])
                write_type(a, syms, pt, rt, pt->result[lowered]);
            else
                open_auto_dims(rt, lowered < pt->nresults ? pt->result_auto[lowered] : 0);
            lowered++;
        }
    }
}
