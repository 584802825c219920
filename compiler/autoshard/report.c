/* What the search says: the `autoshard` command's report (the chosen
 * signature as TDSL to paste, the alternatives with their predicted costs
 * and a one-line explanation each), and the error when no plan fits. */
#include "autoshard.h"

#include <stdlib.h>
#include <string.h>

const char *autoshard_time(char *buf, size_t cap, double s) {
    static const struct { double scale; const char *unit; } u[] = {{1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}};
    size_t i = 0;
    while (i < 3 && s < u[i].scale)
        i++;
    snprintf(buf, cap, "%.4g%s", s / u[i].scale, u[i].unit);
    return buf;
}

const char *autoshard_bytes(char *buf, size_t cap, double b) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (i < 4 && b >= 1024) {
        b /= 1024;
        i++;
    }
    snprintf(buf, cap, i ? "%.4g %s" : "%.0f %s", b, unit[i]);
    return buf;
}

/* f32[1024@(X,Y), 2048@?] */
static void print_type(FILE *out, const Module *m, const Shape *t, const Sharding *sh) {
    fprintf(out, "%s[", dtype_name[t->dtype]);
    for (int d = 0; d < t->rank; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
        fprintf(out, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
        if (sh->open >> d & 1)
            fputs("@?", out);
        else if (n)
            fputs(n > 1 ? "@(" : "@", out);
        for (int i = 0; i < n && !(sh->open >> d & 1); i++)
            fprintf(out, "%s%s", i ? ", " : "", sym_name(m->syms, m->axis_sym[axes[i]]));
        if (n > 1 && !(sh->open >> d & 1))
            fputc(')', out);
    }
    fputc(']', out);
}

static const Sharding *param_sh(const AutoEval *e, const int *choice, int i) {
    const AutoProblem *p = e->p;
    for (int k = 0; k < p->nparams; k++)
        if (p->params[k].param == i)
            return &p->params[k].cand[choice[k]];
    return &p->m->fns[p->fn].params[i].sh;
}

static int ir_param_named(const Module *m, const Fn *fn, const char *name) {
    for (int i = 0; i < fn->nparams; i++)
        if (strcmp(autoshard_param_name(m, fn, i), name) == 0)
            return i;
    return -1;
}

/* `record NAME { field: TYPE, ... }` for rec and the records its fields
 * are, nested ones first, each once (printed[] by symbol); its leaves'
 * shardings from the parameters named prefix.field. */
static void print_record(FILE *out, const AutoEval *e, const int *choice, const AstTop *rec, const char *prefix,
                         uint8_t *printed) {
    const Module *m = e->p->m;
    const Fn *fn = &m->fns[e->p->fn];
    if (printed[rec->sym])
        return;
    printed[rec->sym] = 1;
    char path[512];
    for (int i = 0; i < rec->fields.n; i++) {
        const AstParam *f = rec->fields.items[i];
        snprintf(path, sizeof path, "%s.%s", prefix, sym_name(m->syms, f->sym));
        if (f->type->record)
            print_record(out, e, choice, autoshard_record(e->ast, f->type->record - 1), path, printed);
    }
    fprintf(out, "record %s { ", sym_name(m->syms, rec->sym));
    for (int i = 0; i < rec->fields.n; i++) {
        const AstParam *f = rec->fields.items[i];
        fprintf(out, "%s%s: ", i ? ", " : "", sym_name(m->syms, f->sym));
        snprintf(path, sizeof path, "%s.%s", prefix, sym_name(m->syms, f->sym));
        int k = f->type->record ? -1 : ir_param_named(m, fn, path);
        if (f->type->record)
            fputs(sym_name(m->syms, f->type->record - 1), out);
        else if (k >= 0)
            print_type(out, m, &fn->params[k].type, param_sh(e, choice, k));
    }
    fputs(" }\n", out);
}

static const AstFn *ast_fn(const AstProgram *ast, int sym) {
    for (int i = 0; ast && i < ast->tops.n; i++) {
        const AstTop *t = ast->tops.items[i];
        if (t->kind == TOP_FN && t->fn->sym == sym)
            return t->fn;
    }
    return NULL;
}

static void print_result(FILE *out, const AutoEval *e, const int *choice, int r) {
    const Fn *fn = &e->p->m->fns[e->p->fn];
    int k = e->result_tie[r];
    print_type(out, e->p->m, &fn->results[r].type, k >= 0 ? &e->p->params[k].cand[choice[k]] : &fn->results[r].sh);
}

void autoshard_print_signature(FILE *out, const AutoEval *e, const int *choice) {
    const AutoProblem *p = e->p;
    const Module *m = p->m;
    const Fn *fn = &m->fns[p->fn];
    const AstFn *af = ast_fn(e->ast, fn->sym);
    uint8_t *printed = calloc((size_t)m->syms->n + 1, 1);
    for (int i = 0; af && i < af->params.n; i++) {
        const AstParam *q = af->params.items[i];
        if (q->type->record)
            print_record(out, e, choice, autoshard_record(e->ast, q->type->record - 1), sym_name(m->syms, q->sym), printed);
    }
    free(printed);
    fprintf(out, "fn %s(", sym_name(m->syms, fn->sym));
    int nparams = af ? af->params.n : fn->nparams;
    for (int i = 0, k = 0; i < nparams; i++) {
        const AstParam *q = af ? af->params.items[i] : NULL;
        fprintf(out, "%s%s: ", i ? ", " : "", q ? sym_name(m->syms, q->sym) : autoshard_param_name(m, fn, k));
        if (q && q->type->record) {
            fputs(sym_name(m->syms, q->type->record - 1), out);
            k += autoshard_record_leaves(e->ast, autoshard_record(e->ast, q->type->record - 1));
        } else {
            print_type(out, m, &fn->params[k].type, param_sh(e, choice, k));
            k++;
        }
    }
    fputs(") -> ", out);
    int nresults = af ? af->results.n : fn->nresults;
    if (nresults != 1)
        fputc('(', out);
    for (int r = 0, k = 0; r < nresults; r++) {
        const AstType *t = af ? af->results.items[r] : NULL;
        fputs(r ? ", " : "", out);
        if (t && t->record) {
            fputs(sym_name(m->syms, t->record - 1), out);
            k += autoshard_record_leaves(e->ast, autoshard_record(e->ast, t->record - 1));
        } else
            print_result(out, e, choice, k++);
    }
    if (nresults != 1)
        fputc(')', out);
    fputc('\n', out);
}

/* "batch over X,Y; weights replicated; sends 4.2 MiB" */
static void explain(FILE *out, const AutoEval *e, const AutoPlan *pl, const uint8_t *data) {
    const AutoProblem *p = e->p;
    const Module *m = p->m;
    const Fn *fn = &m->fns[p->fn];
    uint32_t batch = 0;
    int nweights = 0, nsplit = 0, big = -1;
    int64_t big_bytes = -1;
    for (int k = 0; k < p->nparams; k++) {
        const Sharding *sh = &p->params[k].cand[pl->choice[k]];
        const Shape *t = &fn->params[p->params[k].param].type;
        if (data[k]) {
            for (int a = 0; a < m->naxes; a++)
                batch |= (uint32_t)(sh->dim[a] == 0) << a;
            continue;
        }
        nweights++;
        int split = autoshard_splits(sh, t->rank) > 0;
        nsplit += split;
        int64_t bytes = shape_elems(t) * dtype_size(t->dtype);
        if (split && bytes > big_bytes) {
            big = k;
            big_bytes = bytes;
        }
    }
    if (batch) {
        fputs("batch over ", out);
        for (int a = 0, n = 0; a < m->naxes; a++)
            if (batch >> a & 1)
                fprintf(out, "%s%s", n++ ? "," : "", sym_name(m->syms, m->axis_sym[a]));
    } else
        fputs("batch unsplit", out);
    if (!nweights)
        fputs("; no weights", out);
    else if (!nsplit)
        fputs("; weights replicated", out);
    else {
        int i = p->params[big].param;
        fprintf(out, "; %d of %d weights split (largest %s: ", nsplit, nweights, autoshard_param_name(m, fn, i));
        print_type(out, m, &fn->params[i].type, &p->params[big].cand[pl->choice[big]]);
        fputc(')', out);
    }
    char b[32];
    fprintf(out, "; sends %s", autoshard_bytes(b, sizeof b, pl->score.sent));
}

static void row(FILE *out, const AutoEval *e, const char *name, const AutoPlan *pl, const uint8_t *data) {
    char t[32], mem[32], sent[32];
    if (!pl->score.ok) {
        fprintf(out, "%-14s  (does not compile)\n", name);
        return;
    }
    fprintf(out, "%-14s  %-10s  %-10s  %-10s  ", name, autoshard_time(t, sizeof t, pl->score.time),
            autoshard_bytes(mem, sizeof mem, (double)pl->score.memory), autoshard_bytes(sent, sizeof sent, pl->score.sent));
    if (e->p->device_memory && pl->score.memory > e->p->device_memory)
        fputs("over memory; ", out);
    explain(out, e, pl, data);
    fputc('\n', out);
}

typedef struct {
    const char *name;
    const AutoPlan *pl;
    int order;                   /* equal plans keep the order of the contract's list */
} Row;

static int by_time(const void *a, const void *b) {
    const AutoScore *x = &((const Row *)a)->pl->score, *y = &((const Row *)b)->pl->score;
    if (x->ok != y->ok)
        return x->ok ? -1 : 1;
    int c = autoshard_better(x, y) ? -1 : autoshard_better(y, x) ? 1 : 0;
    return c ? c : ((const Row *)a)->order - ((const Row *)b)->order;
}

/* Two plans whose rows would print the same numbers. */
static int same_row(const AutoScore *a, const AutoScore *b) {
    char x[3][32], y[3][32];
    autoshard_time(x[0], sizeof x[0], a->time), autoshard_time(y[0], sizeof y[0], b->time);
    autoshard_bytes(x[1], sizeof x[1], (double)a->memory), autoshard_bytes(y[1], sizeof y[1], (double)b->memory);
    autoshard_bytes(x[2], sizeof x[2], a->sent), autoshard_bytes(y[2], sizeof y[2], b->sent);
    return !strcmp(x[0], y[0]) && !strcmp(x[1], y[1]) && !strcmp(x[2], y[2]);
}

void autoshard_report(FILE *out, const AutoEval *e, const AutoResult *r, int top) {
    const AutoProblem *p = e->p;
    char t[32], mem[32], sent[32];
    int ncand = 0;
    for (int k = 0; k < p->nparams; k++)
        ncand += p->params[k].tie < 0;
    fprintf(out, "# target %s (%s)\n", p->t->name, p->t->source);
    fprintf(out, "# search: %d parameters, %.6g candidate plans, ", ncand, r->candidate_plans);
    static const char *const ilp_status[] = {"optimal", "stopped at its time limit", "infeasible", "failed"};
    if (r->enumerated)
        fprintf(out, "enumerated %.6g plans", r->candidate_plans);
    else if (r->ilp_ran)
        fprintf(out, "integer program %d vars %d rows %s in %.2f s%s%s, then coordinate descent from the best plan",
                r->ilp.nvars, r->ilp.nrows, ilp_status[r->ilp.status], r->ilp.seconds,
                r->ilp_plan ? "" : ": ", r->ilp_plan ? "" : r->ilp_why);
    fprintf(out, ", %d plans evaluated in %.2f s\n", e->nplans, r->seconds);
    const AutoPlan *f = r->found;
    fprintf(out, "# chosen: %s %s %s\n", autoshard_time(t, sizeof t, f->score.time),
            autoshard_bytes(mem, sizeof mem, (double)f->score.memory), autoshard_bytes(sent, sizeof sent, f->score.sent));
    autoshard_print_signature(out, e, f->choice);
    uint8_t *data = calloc((size_t)p->nparams + 1, 1);
    autoshard_data_params(p, data);
    Row *rows = calloc((size_t)(AUTO_NAMED + 2 + (top > 0 ? top : 0)), sizeof(Row));
    int n = 0;
    rows[n] = (Row){"found", f, n};
    n++;
    for (int i = 0; i < AUTO_NAMED; i++)
        if (r->named[i]) {
            rows[n] = (Row){auto_named[i], r->named[i], n};
            n++;
        }
    if (r->ilp_plan) {
        rows[n] = (Row){"ilp", r->ilp_plan, n};
        n++;
    }
    /* Up to `top` other plans evaluated, best first, each with a cost no
     * row above has (plans that differ only in a tensor too small to
     * matter would fill the table with one line). */
    for (int j = 0; j < top; j++) {
        const AutoPlan *next = NULL;
        for (int i = 0; i < e->nplans; i++) {
            const AutoPlan *pl = e->plans[i];
            int seen = 0;
            for (int q = 0; q < n && !seen; q++)
                seen = rows[q].pl == pl || same_row(&rows[q].pl->score, &pl->score);
            if (!seen && pl->score.ok && (!next || autoshard_better(&pl->score, &next->score)))
                next = pl;
        }
        if (next) {
            rows[n] = (Row){"other", next, n};
            n++;
        }
    }
    qsort(rows, (size_t)n, sizeof *rows, by_time);
    fprintf(out, "%-14s  %-10s  %-10s  %-10s  %s\n", "# plan", "time", "memory", "sent", "explanation");
    for (int i = 0; i < n; i++)
        row(out, e, rows[i].name, rows[i].pl, data);
    if (p->m->naxes == 1)
        fputs("# megatron on a 1-D mesh is data parallel: the batch takes the only axis\n", out);
    free(rows);
    free(data);
}

void autoshard_infeasible(FILE *err, const AutoEval *e) {
    const AutoProblem *p = e->p;
    const Module *m = p->m;
    const Fn *fn = &m->fns[p->fn];
    const AutoPlan *least = NULL;
    for (int i = 0; i < e->nplans; i++)
        if (e->plans[i]->score.ok && (!least || e->plans[i]->score.memory < least->score.memory))
            least = e->plans[i];
    char cap[32], need[32];
    /* The cap is --device-memory, else the target's memory per device. */
    if (p->device_memory == p->t->mem_per_device)
        fprintf(err, "shardc: error: no plan fits target %s's mem_per_device %s", p->t->name,
                autoshard_bytes(cap, sizeof cap, (double)p->device_memory));
    else
        fprintf(err, "shardc: error: no plan fits --device-memory %s", autoshard_bytes(cap, sizeof cap,
                                                                                   (double)p->device_memory));
    if (!least) {
        fputs(": no plan compiles\n", err);
        return;
    }
    fprintf(err, ": the smallest needs %s per device (", autoshard_bytes(need, sizeof need, (double)least->score.memory));
    /* Its parameters, largest first (the first five). */
    uint8_t *shown = calloc((size_t)fn->nparams + 1, 1);
    for (int j = 0; j < 5 && j < fn->nparams; j++) {
        int best = -1;
        int64_t bytes = -1;
        for (int i = 0; i < fn->nparams; i++) {
            if (shown[i])
                continue;
            Shape local = shape_local(m, &fn->params[i].type, param_sh(e, least->choice, i));
            int64_t b = shape_elems(&local) * dtype_size(local.dtype);
            if (b > bytes) {
                best = i;
                bytes = b;
            }
        }
        shown[best] = 1;
        fprintf(err, "%s%s %s", j ? ", " : "", autoshard_param_name(m, fn, best), autoshard_bytes(need, sizeof need, (double)bytes));
    }
    fprintf(err, "%s, and the program's buffers)\n", fn->nparams > 5 ? ", ..." : "");
    free(shown);
}
