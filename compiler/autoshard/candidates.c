/* The search's problem: each searched parameter's candidate shardings and
 * the ties between parameters and results (docs/autoshard.md, "The
 * search"). */
#include "autoshard.h"

#include <string.h>

const char *autoshard_param_name(const Module *m, const Fn *fn, int i) {
    for (int v = 0; v < fn->ninsts; v++)
        if (fn->insts[v].op == OP_PARAMETER && ir_attr(fn, &fn->insts[v], 0) == i)
            return fn->insts[v].sym >= 0 ? sym_name(m->syms, fn->insts[v].sym) : "";
    return "";
}

int autoshard_splits(const Sharding *sh, int rank) {
    int n = 0;
    for (int d = 0; d < rank; d++) {
        int axes[MAX_AXES];
        n += sharding_dim_axes(sh, d, axes) > 0;
    }
    return n;
}

void autoshard_mark_all(Module *m, int f) {
    Fn *fn = &m->fns[f];
    fn->autod = arena_alloc(m->arena, (size_t)(fn->nparams + fn->nresults + 1));
    for (int i = 0; i < fn->nparams + fn->nresults; i++) {
        Sig *s = i < fn->nparams ? &fn->params[i] : &fn->results[i - fn->nparams];
        s->sh = sharding_replicated();
        fn->autod[i] = (uint8_t)((1u << s->type.rank) - 1);
        s->sh.open = fn->autod[i];
    }
}

/* Every assignment of the axes `base` leaves free to the dims in `autod`
 * (or to none), each axis to one dim, several on a dim in mesh order, the
 * product of a dim's axes dividing it.  The first is the one splitting
 * nothing.  Returns the count; *out from a. */
static int candidates(const Module *m, const Shape *type, Sharding base, uint8_t autod, Arena *a, Sharding **out) {
    int freeax[MAX_AXES], nfree = 0, dims[MAX_RANK], ndims = 0;
    for (int ax = 0; ax < m->naxes; ax++)
        if (base.dim[ax] == SH_REPLICATED)
            freeax[nfree++] = ax;
    for (int d = 0; d < type->rank; d++)
        if (autod >> d & 1)
            dims[ndims++] = d;
    base.open &= (uint8_t)~autod;
    int64_t total = 1;
    for (int i = 0; i < nfree; i++)
        total *= ndims + 1;
    Sharding *c = arena_alloc(a, sizeof(Sharding) * (size_t)total);
    int n = 0;
    for (int64_t code = 0; code < total; code++) {
        Sharding sh = base;
        int64_t parts[MAX_RANK], k = code;
        int npos[MAX_RANK] = {0};
        for (int d = 0; d < MAX_RANK; d++)
            parts[d] = 1;
        for (int i = nfree - 1; i >= 0; i--, k /= ndims + 1) {   /* the last axis varies fastest */
            int which = (int)(k % (ndims + 1));
            if (!which)
                continue;
            int d = dims[which - 1];
            sh.dim[freeax[i]] = (int8_t)d;
            parts[d] *= m->axis_size[freeax[i]];
        }
        for (int i = 0; i < nfree; i++)          /* mesh order on a dim */
            if (sh.dim[freeax[i]] >= 0)
                sh.pos[freeax[i]] = (uint8_t)npos[sh.dim[freeax[i]]]++;
        int fits = 1;
        for (int j = 0; j < ndims; j++)
            fits &= type->dims[dims[j]] % parts[dims[j]] == 0;
        if (fits)
            c[n++] = sh;
    }
    *out = c;
    return n;
}

/* The field path of a record leaf parameter ("p.layers.wq" -> "layers.wq"),
 * or NULL for a tensor parameter. */
static const char *field_path(const char *name) {
    const char *dot = strchr(name, '.');
    return dot ? dot + 1 : NULL;
}

int autoshard_problem(const Module *m, int f, const Target *t, int64_t device_memory, Arena *a, AutoProblem *p,
                      int **result_tie) {
    const Fn *fn = &m->fns[f];
    AutoParam *ap = arena_alloc(a, sizeof(AutoParam) * (size_t)(fn->nparams + 1));
    int n = 0;
    for (int i = 0; i < fn->nparams; i++) {
        const Sig *s = &fn->params[i];
        unsigned autod = auto_dims(fn, i);
        if (!autod)
            continue;
        ap[n] = (AutoParam){.param = i, .tie = -1};
        /* Parameters of one record type (train_step's p and its momentum
         * v) share a plan field by field: the same field path, type,
         * written sharding and auto dims. */
        const char *path = field_path(autoshard_param_name(m, fn, i));
        for (int k = 0; k < n && path && ap[n].tie < 0; k++) {
            const Sig *o = &fn->params[ap[k].param];
            const char *op = field_path(autoshard_param_name(m, fn, ap[k].param));
            if (op && strcmp(op, path) == 0 && auto_dims(fn, ap[k].param) == autod &&
                memcmp(&o->type, &s->type, sizeof s->type) == 0 && sharding_eq(&o->sh, &s->sh))
                ap[n].tie = ap[k].tie >= 0 ? ap[k].tie : k;
        }
        Sharding *c;
        ap[n].ncand = candidates(m, &s->type, s->sh, (uint8_t)autod, a, &c);
        ap[n].cand = c;
        n++;
    }
    /* A result named like a parameter (the pairing run --steps uses) with
     * the same type and auto dims takes that parameter's plan. */
    int *tie = arena_alloc(a, sizeof(int) * (size_t)(fn->nresults + 1));
    for (int r = 0; r < fn->nresults; r++) {
        const Sig *s = &fn->results[r];
        tie[r] = -1;
        const char *name = s->name ? sym_name(m->syms, s->name - 1) : NULL;
        for (int k = 0; k < n && name && tie[r] < 0; k++) {
            const Sig *o = &fn->params[ap[k].param];
            if (strcmp(autoshard_param_name(m, fn, ap[k].param), name) == 0 && auto_dims(fn, ap[k].param) == auto_dims(fn, fn->nparams + r) &&
                memcmp(&o->type, &s->type, sizeof s->type) == 0)
                tie[r] = k;
        }
        for (int e = 0; e < r && tie[r] >= 0; e++)    /* return w, w: the first carries */
            tie[r] = tie[e] == tie[r] ? -1 : tie[r];
    }
    *p = (AutoProblem){m, f, t, device_memory ? device_memory : t->mem_per_device, n, ap};
    *result_tie = tie;
    return n;
}

void autoshard_data_params(const AutoProblem *p, uint8_t *data) {
    const Fn *fn = &p->m->fns[p->fn];
    int ncarried = 0;
    uint8_t *carried = arena_alloc(p->m->arena, (size_t)fn->nparams + 1);
    for (int i = 0; i < fn->nparams; i++) {
        const char *name = autoshard_param_name(p->m, fn, i);
        for (int r = 0; r < fn->nresults && !carried[i]; r++)
            carried[i] = fn->results[r].name && strcmp(sym_name(p->m->syms, fn->results[r].name - 1), name) == 0;
        ncarried += carried[i];
    }
    /* With nothing carried: the integer parameters (tokens, routes) are
     * data, and so are the others whose dim 0 is an integer one's (the
     * activations those index: moe's a[S, D] beside route[S], not its
     * experts w[E, D, F]); with no integer parameter, the first. */
    int nint = 0;
    for (int i = 0; i < fn->nparams; i++)
        nint += !dtype_is_float(fn->params[i].type.dtype);
    for (int k = 0; k < p->nparams; k++) {
        int i = p->params[k].param;
        const Shape *t = &fn->params[i].type;
        if (ncarried || !dtype_is_float(t->dtype) || !nint) {
            data[k] = ncarried ? !carried[i] : !dtype_is_float(t->dtype) || i == 0;
            continue;
        }
        data[k] = 0;
        for (int j = 0; j < fn->nparams && t->rank; j++) {
            const Shape *u = &fn->params[j].type;
            data[k] |= !dtype_is_float(u->dtype) && u->rank && u->dims[0] == t->dims[0];
        }
    }
}
