#include "frontend.h"

#include "../autoshard/autoshard.h"
#include "../grad/grad.h"
#include "../partition/partition.h"
#include "../propagate/propagate.h"
#include "../schedule/schedule.h"

#include "../base/suggest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* For the first --mesh name that is not an axis of the program: the
 * nearest axis. */
static const char *suggest_axis(const Compilation *c, const AstTop *mesh, const MeshFlag *flag, char *buf,
                                size_t cap) {
    int n = mesh ? mesh->bindings.n : 0;
    for (int k = 0; k < flag->n; k++) {
        Suggest sg = suggest_begin(flag->name[k]);
        int known = 0;
        for (int i = 0; i < n; i++) {
            const char *axis = sym_name(&c->syms, ((AstBinding *)mesh->bindings.items[i])->sym);
            int named = 0;              /* an axis the flag names already is not the one meant */
            for (int j = 0; j < flag->n; j++)
                named |= strcmp(axis, flag->name[j]) == 0;
            known |= strcmp(axis, flag->name[k]) == 0;
            if (!named)
                suggest_add(&sg, axis, -1);
        }
        if (!known)
            return suggest_text(&sg, buf, cap);
    }
    buf[0] = '\0';
    return buf;
}

/* Match `--mesh` to the program's mesh line: same axes, same order. */
static int match_mesh(Compilation *c, const MeshFlag *flag, MeshOverride *ov) {
    const AstTop *mesh = NULL;
    for (int i = 0; i < c->ast.tops.n && !mesh; i++)
        if (((AstTop *)c->ast.tops.items[i])->kind == TOP_MESH)
            mesh = c->ast.tops.items[i];
    FILE *out = c->diag.out;
    int n = mesh ? mesh->bindings.n : 0, same = n == flag->n;
    for (int i = 0; same && i < n; i++)
        same = strcmp(sym_name(&c->syms, ((AstBinding *)mesh->bindings.items[i])->sym), flag->name[i]) == 0;
    if (!same) {
        if (out) {
            fprintf(out, "shardc: error: --mesh names axes ");
            for (int i = 0; i < flag->n; i++)
                fprintf(out, "%s%s", i ? "," : "", flag->name[i]);
            fprintf(out, " but the program's mesh has %s", n ? "" : "none");
            for (int i = 0; i < n; i++)
                fprintf(out, "%s%s", i ? "," : "", sym_name(&c->syms, ((AstBinding *)mesh->bindings.items[i])->sym));
            char hint[160];
            fprintf(out, "%s\n", suggest_axis(c, mesh, flag, hint, sizeof hint));
        }
        return -1;
    }
    ov->n = n;
    memcpy(ov->size, flag->size, sizeof ov->size);
    return 0;
}

/* Match `--const` names to the program's constants. */
static int match_consts(Compilation *c, const MeshFlag *flag, MeshOverride *ov) {
    for (int k = 0; k < flag->nconsts; k++) {
        int found = -1;
        for (int i = 0; i < c->ast.tops.n && found < 0; i++) {
            const AstTop *top = c->ast.tops.items[i];
            for (int j = 0; top->kind == TOP_CONST && j < top->bindings.n; j++) {
                const AstBinding *b = top->bindings.items[j];
                if (strcmp(sym_name(&c->syms, b->sym), flag->const_name[k]) == 0)
                    found = b->sym;
            }
        }
        if (found < 0) {
            Suggest sg = suggest_begin(flag->const_name[k]);
            char hint[160];
            for (int i = 0; i < c->ast.tops.n; i++) {
                const AstTop *top = c->ast.tops.items[i];
                for (int j = 0; top->kind == TOP_CONST && j < top->bindings.n; j++)
                    suggest_add(&sg, sym_name(&c->syms, ((AstBinding *)top->bindings.items[j])->sym), -1);
            }
            if (c->diag.out)
                fprintf(c->diag.out, "shardc: error: --const names '%s', which the program does not define with const%s\n",
                        flag->const_name[k], suggest_text(&sg, hint, sizeof hint));
            return -1;
        }
        ov->const_sym[ov->nconsts] = found;
        ov->const_value[ov->nconsts] = flag->const_value[k];
        ov->const_int[ov->nconsts] = flag->const_int[k];
        ov->const_is_int[ov->nconsts++] = flag->const_is_int[k];
    }
    return 0;
}

static int verified(Compilation *c, const char *after, FILE *diag_out) {
    char msg[VERIFY_MSG_SIZE];
    const char *err = ir_verify(&c->module, msg);
    if (!err)
        return FRONTEND_OK;
    if (diag_out)
        fprintf(diag_out, "shardc: internal error: the IR after %s is invalid: %s\n", after, err);
    return FRONTEND_INTERNAL_ERROR;
}

/* Calls to checkpoint beside those the source marks, (fn, inst) in the
 * module after sema; malloc'd. */
typedef struct {
    KeptCall *at;
    int n, cap;
} Marks;

static void (*progress_fn)(const char *stage, void *ctx);
static void *progress_ctx;

void frontend_set_progress(void (*fn)(const char *stage, void *ctx), void *ctx) {
    progress_fn = fn;
    progress_ctx = ctx;
}

int frontend_progress(const char *stage) {
    if (progress_fn)
        progress_fn(stage, progress_ctx);
    return progress_fn != NULL;
}

/* Only the compile that reports (not choose_remat's silent rounds). */
static void progress(const FILE *diag_out, const char *stage) {
    if (progress_fn && diag_out)
        progress_fn(stage, progress_ctx);
}

static int compile(Compilation *c, const char *path, const char *text, size_t len, FILE *diag_out,
                   const MeshFlag *mesh, Stage stage, const Marks *marks, KeptCalls *kept) {
    c->syms.arena = &c->arena;
    c->diag = (Diag){path, text, len, diag_out, 0, NULL};
    if (parse_program(&c->arena, &c->syms, &c->diag, &c->ast) != 0)
        return FRONTEND_USER_ERROR;
    if (mesh && mesh->plan)
        autoshard_write_plan(&c->ast, &c->arena, &c->syms, mesh->plan);
    progress(diag_out, "parsed");
    MeshOverride ov = {0};
    if (mesh && ((mesh->n && match_mesh(c, mesh, &ov) != 0) || match_consts(c, mesh, &ov) != 0))
        return FRONTEND_USAGE_ERROR;
    module_init(&c->module, &c->arena, &c->syms);
    c->module.device_memory = mesh ? mesh->device_memory : 0;
    c->module.reshard_candidates = mesh && mesh->reshard_candidates;
    if (sema_program(&c->module, &c->diag, &c->ast, &ov) != 0)
        return FRONTEND_USER_ERROR;
    for (int i = 0; marks && i < marks->n; i++)
        c->module.fns[marks->at[i].fn].insts[marks->at[i].inst].flags |= INST_REMAT;
    if (grad_module(&c->module, &c->diag, kept) != 0)
        return FRONTEND_USER_ERROR;
    int rc = verified(c, "sema", diag_out);
    const AutoPlanText *plan = NULL;
    if (rc == FRONTEND_OK)
        rc = autoshard_stage(c, path, text, len, diag_out, mesh, stage, &plan);
    if (rc == FRONTEND_OK && plan) {
        /* The chosen plan compiles as the program its printed signature
         * gives: written into the syntax, checked again from the start. */
        MeshFlag planned = *mesh;
        planned.plan = plan;
        planned.auto_all = 0;
        Arena replaced = c->arena;   /* kept: the caller's text may live there (a planned compile plans no more) */
        memset(c, 0, sizeof *c);
        c->replaced = replaced;
        if (kept)
            *kept = (KeptCalls){0};      /* they were in the freed arena */
        return compile(c, path, text, len, diag_out, &planned, stage, marks, kept);
    }
    if (rc != FRONTEND_OK || stage == STAGE_PARSED)
        return rc;
    progress(diag_out, "checked");
    propagate_module(&c->module);
    rc = verified(c, "sharding propagation", diag_out);
    if (rc == FRONTEND_OK && stage == STAGE_SHARDED)
        partition_note_choices(&c->module);  /* the sharded program says what partitioning will choose */
    if (rc != FRONTEND_OK || stage == STAGE_SHARDED)
        return rc;
    progress(diag_out, "propagated");
    partition_module(&c->module, &c->diag);
    rc = verified(c, "partitioning", diag_out);
    if (rc != FRONTEND_OK || stage == STAGE_PARTITIONED)
        return rc;
    progress(diag_out, "partitioned");
    schedule_module(&c->module);
    rc = verified(c, "scheduling", diag_out);
    if (rc == FRONTEND_OK)
        progress(diag_out, "scheduled");
    return rc;
}

/* ---- rematerialization under --device-memory (docs/grad.md) ---- */

/* The largest Fn.peak_nested of a scheduled fn that runs a gradient (a
 * derived fn, or one that calls one), into *which; -1 when none does. */
static int64_t gradient_peak(const Module *m, int *which) {
    int *order = malloc(sizeof(int) * (size_t)(m->nfns + 1));
    uint8_t *runs = calloc((size_t)m->nfns + 1, 1);
    int64_t peak = -1;
    module_callees_first(m, order);
    for (int i = 0; i < m->nfns; i++) {
        const Fn *fn = &m->fns[order[i]];
        runs[order[i]] = fn->grad_of != 0;
        for (int v = 0; v < fn->ninsts; v++)
            if (op_calls(fn->insts[v].op))
                runs[order[i]] |= runs[ir_attr(fn, &fn->insts[v], 0)];
        if (runs[order[i]] && fn->scheduled && fn->peak_nested > peak) {
            peak = fn->peak_nested;
            *which = order[i];
        }
    }
    free(order);
    free(runs);
    return peak;
}

/* Order of the calls to checkpoint next: largest residuals first, equal
 * ones in program order (a loop's first iterations first). */
static int kept_order(const void *pa, const void *pb) {
    const KeptCall *a = pa, *b = pb;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    return a->fn != b->fn ? (a->fn < b->fn ? -1 : 1) : (a->inst > b->inst) - (a->inst < b->inst);
}

/* Append to the marks up to `grow` calls of `kept` not yet marked that
 * keep residuals, in kept_order. */
static void add_marks(Marks *marks, const KeptCalls *kept, int grow) {
    KeptCall *free_calls = malloc(sizeof(KeptCall) * (size_t)(kept->n + 1));
    int n = 0;
    for (int i = 0; i < kept->n; i++) {
        const KeptCall *k = &kept->at[i];
        int marked = k->bytes <= 0;
        for (int j = 0; j < marks->n && !marked; j++)
            marked = marks->at[j].fn == k->fn && marks->at[j].inst == k->inst;
        if (!marked)
            free_calls[n++] = *k;
    }
    qsort(free_calls, (size_t)n, sizeof *free_calls, kept_order);
    for (int i = 0; i < n && i < grow; i++) {
        if (marks->n == marks->cap) {
            marks->cap = marks->cap ? 2 * marks->cap : 8;
            marks->at = realloc(marks->at, sizeof(KeptCall) * (size_t)marks->cap);
        }
        marks->at[marks->n++] = free_calls[i];
    }
    free(free_calls);
}

typedef struct {
    int n;                       /* the first n marks */
    int64_t peak;                /* gradient_peak with them; -1: none */
    char fn_name[256];           /* the fn that has it */
} RematTry;

/* Compile silently to the schedule with the first `n` marks into *try;
 * then, when grow > 0, append to the marks up to `grow` of the calls that
 * still keep residuals. */
static void try_marks(const char *path, const char *text, size_t len, const MeshFlag *mesh, Marks *marks,
                      int n, int grow, RematTry *try) {
    Compilation t = {0};
    KeptCalls kept = {0};
    Marks first = {marks->at, n, n};
    int which = -1;
    try->n = n;
    try->peak = compile(&t, path, text, len, NULL, mesh, STAGE_SCHEDULED, &first, grow ? &kept : NULL) == FRONTEND_OK
        ? gradient_peak(&t.module, &which) : -1;
    if (try->peak >= 0)
        snprintf(try->fn_name, sizeof try->fn_name, "%s", sym_name(&t.syms, t.module.fns[which].sym));
    if (grow && try->peak >= 0)
        add_marks(marks, &kept, grow);
    compilation_free(&t);
}

typedef struct {
    int64_t before, after;       /* the gradient's peak without and with the marks; -1: no gradient */
    char fn_name[256];           /* the fn that has it, with its calls */
} RematOutcome;

/* Checkpoint calls, largest residuals first, until the peak of every fn
 * that runs a gradient fits mesh->device_memory or no call keeps residuals;
 * keep the fewest marks that fit, or else the fewest that gave the least
 * peak (a callee run again takes its own workspace, which can cost more
 * than the residuals saved).  Each try compiles anew, since a checkpoint
 * changes the residuals of the calls around it; the marks grow 1, 2, 4, ...
 * at a time, each batch chosen from the try before it, and then halve back
 * between the try before the chosen one and it, so that a model with n
 * calls compiles O(log n) times, not n. */
static void choose_remat(const char *path, const char *text, size_t len, const MeshFlag *mesh, Marks *marks,
                         RematOutcome *out) {
    RematTry cur, first = {.peak = -1}, least = {.peak = -1}, fit = {.n = -1};
    int prev = 0, fit_lo = 0, least_lo = 0;
    for (int grow = 1; fit.n < 0; grow *= 2) {
        int n = marks->n;
        try_marks(path, text, len, mesh, marks, n, grow, &cur);
        if (n == 0)
            first = cur;
        if (cur.peak < 0)
            break;
        if (least.peak < 0 || cur.peak < least.peak) {
            least = cur;
            least_lo = prev;
        }
        if (cur.peak <= mesh->device_memory) {
            fit = cur;
            fit_lo = prev;
        } else if (marks->n == n) {
            break;                         /* no call left to checkpoint */
        }
        prev = n;
    }
    RematTry *chosen = fit.n >= 0 ? &fit : &least;
    int64_t target = fit.n >= 0 ? mesh->device_memory : least.peak;
    for (int lo = fit.n >= 0 ? fit_lo : least_lo; chosen->peak >= 0 && chosen->n - lo > 1;) {
        try_marks(path, text, len, mesh, marks, lo + (chosen->n - lo) / 2, 0, &cur);
        if (cur.peak >= 0 && cur.peak <= target)
            *chosen = cur;
        else
            lo = cur.n;
    }
    marks->n = chosen->peak >= 0 ? chosen->n : 0;
    out->before = first.peak;
    out->after = chosen->peak;
    snprintf(out->fn_name, sizeof out->fn_name, "%s", chosen->fn_name);
}

/* Say what choose_remat chose: a note per call in the source (an unrolled
 * loop's iterations are one), then the peak before and after. */
static void note_remat(Compilation *c, const MeshFlag *mesh, const Marks *marks, const RematOutcome *r) {
    Module *m = &c->module;
    for (int i = 0; i < marks->n; i++) {
        int times = 0, first = 1;
        for (int j = 0; j < marks->n; j++)
            if (marks->at[j].loc.line == marks->at[i].loc.line && marks->at[j].loc.col == marks->at[i].loc.col) {
                times++;
                first &= j >= i;
            }
        if (!first)
            continue;
        const char *callee = sym_name(m->syms, m->fns[marks->at[i].callee].sym);
        diag_report(&c->diag, marks->at[i].loc, "note",
                    "checkpointed to fit --device-memory %lld: the backward pass runs '%s' again rather than keep "
                    "its residuals, %lld bytes in global shapes%s", (long long)mesh->device_memory, callee,
                    (long long)marks->at[i].bytes, times > 1 ? arena_printf(&c->arena, " (%d calls here)", times) : "");
    }
    if (r->after > mesh->device_memory)
        diag_report(&c->diag, (Loc){0}, "note",
                    "the peak bytes per device of %s with the fns it calls are %lld, over --device-memory %lld%s",
                    r->fn_name, (long long)r->after, (long long)mesh->device_memory,
                    marks->n ? arena_printf(&c->arena, " with %d call%s checkpointed, the least that checkpointing "
                                            "calls reached", marks->n, marks->n > 1 ? "s" : "")
                             : ": checkpointing calls does not lower it");
    else if (marks->n)
        diag_report(&c->diag, (Loc){0}, "note",
                    "with %d call%s checkpointed, the peak bytes per device of %s with the fns it calls are %lld "
                    "(%lld without), within --device-memory %lld", marks->n, marks->n > 1 ? "s" : "", r->fn_name,
                    (long long)r->after,
                    (long long)r->before, (long long)mesh->device_memory);
}

int frontend_compile(Compilation *c, const char *path, const char *text, size_t len,
                     FILE *diag_out, const MeshFlag *mesh, Stage stage) {
    if (!mesh || !mesh->device_memory)
        return compile(c, path, text, len, diag_out, mesh, stage, NULL, NULL);
    Marks marks = {0};
    RematOutcome r;
    choose_remat(path, text, len, mesh, &marks, &r);
    int rc = compile(c, path, text, len, diag_out, mesh, stage, &marks, NULL);
    if (rc == FRONTEND_OK && r.after >= 0)
        note_remat(c, mesh, &marks, &r);
    free(marks.at);
    return rc;
}

void compilation_free(Compilation *c) {
    arena_free(&c->arena);
    arena_free(&c->replaced);
}

int frontend_checked(Compilation *c, const char *path, const char *text, size_t len, const MeshFlag *mesh) {
    return compile(c, path, text, len, NULL, mesh, STAGE_PARSED, NULL, NULL);
}
