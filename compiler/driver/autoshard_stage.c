/* The sharding search as a stage of the front end (docs/autoshard.md, "The
 * search"): between grad and propagation, the entry fn's `@auto` dims get
 * the plan the search chooses.  Each plan it weighs is compiled from a
 * fresh checked module (frontend_checked), so the stage needs the source
 * text, not only the module. */
#include "frontend.h"

#include "../autoshard/autoshard.h"

#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

static int fn_named(const Module *m, const char *name) {
    for (int f = 0; f < m->nfns; f++)
        if (strcmp(sym_name(m->syms, m->fns[f].sym), name) == 0)
            return f;
    return -1;
}

static int has_auto(const Fn *fn) {
    int any = 0;
    for (int i = 0; i < fn->nparams + fn->nresults; i++)
        any |= auto_dims(fn, i) != 0;
    return any;
}

typedef struct {
    const char *path, *text;
    size_t len;
    MeshFlag flag;
} Source;

static void *checked(void *ctx, const AutoPlanText *plan, Module **m, Diag **diag) {
    Source *s = ctx;
    Compilation *c = calloc(1, sizeof *c);
    MeshFlag flag = s->flag;
    flag.plan = plan;
    flag.auto_all = 0;
    if (frontend_checked(c, s->path, s->text, s->len, &flag) != FRONTEND_OK) {
        compilation_free(c);
        free(c);
        return NULL;
    }
    *m = &c->module;
    *diag = &c->diag;
    return c;
}

static void release(void *h) {
    compilation_free(h);
    free(h);
}

/* The search's progress: on the status line of build, run and autoshard
 * (every 10 plans; with -v a line every 50), else with -v as plain lines. */
typedef struct {
    FILE *err;
    int verbose;
} Progress;

static void progress(void *ctx, int evaluated, double best) {
    (void)best;
    const Progress *p = ctx;
    if (evaluated % (p->verbose ? 50 : 10))
        return;
    char line[96];
    snprintf(line, sizeof line, "sharding search: %d plans evaluated", evaluated);
    if (!frontend_progress(line) && p->verbose)
        fprintf(p->err, "shardc: %s\n", line);
}

/* The plan chosen for this compile's text, kept for the compiles that
 * follow it in one process (--device-memory's rematerialization rounds
 * compile the same text again): the search runs once. */
static struct {
    const char *text;
    const MeshFlag *mesh;
    int found;                   /* 0: no plan fits (said once) */
    Arena arena;                 /* holds pt */
    AutoPlanText pt;
} chosen;

int autoshard_stage(Compilation *c, const char *path, const char *text, size_t len, FILE *diag_out,
                    const MeshFlag *mesh, Stage stage, const AutoPlanText **plan) {
    Module *m = &c->module;
    int entry = mesh && mesh->entry ? fn_named(m, mesh->entry) : -1;
    if (entry >= 0 && mesh->auto_all)
        autoshard_mark_all(m, entry);
    for (int f = 0; f < m->nfns; f++) {
        const Fn *fn = &m->fns[f];
        if (f == entry || !fn->auto_loc.line || fn->grad_of || fn->vjp_of)
            continue;
        if (entry < 0 && !(mesh && mesh->entry) && stage <= STAGE_SHARDED)
            continue;        /* check, or a dump of every fn up to the sharded stage: `@auto` reads as `@?` */
        const char *name = sym_name(m->syms, fn->sym);
        if (entry >= 0)
            diag_report(&c->diag, fn->auto_loc, "error", "'@auto' is only for the entry fn the search compiles "
                        "(--fn %s), and '%s' is not it", mesh->entry, name);
        else
            diag_report(&c->diag, fn->auto_loc, "error", "'@auto' in '%s' needs --fn %s: the sharding search "
                        "chooses the shardings of the fn it compiles", name, name);
        return FRONTEND_USER_ERROR;
    }
    if (entry >= 0 && mesh->auto_report && !mesh->plan && !has_auto(&m->fns[entry])) {
        fprintf(diag_out ? diag_out : stderr, "shardc: error: '%s' has no @auto dims to search: mark dims @auto, "
                "or pass --auto to search them all\n", mesh->entry);
        return FRONTEND_USAGE_ERROR;
    }
    if (entry < 0 || !has_auto(&m->fns[entry]) || stage == STAGE_PARSED)
        return FRONTEND_OK;
    if (chosen.text == text && chosen.mesh == mesh) {
        *plan = chosen.found ? &chosen.pt : NULL;
        return chosen.found ? FRONTEND_OK : FRONTEND_USER_ERROR;
    }
    Target t;
    FILE *err = diag_out ? diag_out : stderr;
    if (target_load(&t, mesh->target, err) != 0)
        return FRONTEND_USAGE_ERROR;
    Arena a = {0};
    AutoProblem p;
    int *result_tie;
    autoshard_problem(m, entry, &t, mesh->device_memory, &a, &p, &result_tie);
    Source src = {path, text, len, *mesh};
    src.flag.auto_report = NULL;
    AutoEval e = {&p, {&src, checked, release}, result_tie, m->fns[entry].nresults, &a, NULL, 0, 0, &c->ast, NULL, NULL, NULL};
    int rc = FRONTEND_OK;
    Progress pr = {err, mesh->auto_verbose};
    if (diag_out) {
        e.progress = progress;
        e.progress_ctx = &pr;
    }
#ifdef __GLIBC__
    /* Each plan compiles into fresh arenas: keep the memory they free in
     * the heap (no mmap of large blocks, no trimming), which spares the
     * search a page fault per page of every compile (a third of its time
     * on the GPT step). */
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    AutoResult r;
    arena_free(&chosen.arena);
    chosen.found = 0;
    chosen.text = text;
    chosen.mesh = mesh;
    if (autoshard_search(&e, &r) != 0) {
        autoshard_infeasible(err, &e);
        rc = FRONTEND_USER_ERROR;
    } else {
        if (mesh->auto_report)
            autoshard_report(mesh->auto_report, &e, &r, mesh->auto_top);
        if (mesh->auto_verbose) {
            fprintf(err, "shardc: the sharding search chose (%d plans evaluated in %.2f s):\n", e.nplans, r.seconds);
            autoshard_print_signature(err, &e, r.found->choice);
        }
        autoshard_plan_text(&e, r.found->choice, &chosen.arena, &chosen.pt);
        chosen.found = 1;
        *plan = &chosen.pt;
    }
    arena_free(&a);
    return rc;
}
