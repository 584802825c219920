/* session.c: the global API (shardc_session.h).  A session is sk_main's
 * run kept alive: the world, made at the first call, every local device's
 * workspace, shared by the functions called, and per function a Run (its
 * device blocks), made at its first call.  A call copies the global
 * parameters into the blocks, runs the devices and assembles the results,
 * with driver.c's and driver_io.c's code. */
#include "driver.h"
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_CARRY = 256 };

/* A function's Run, found by its sk_program (the generated C's static
 * table, one per function). */
typedef struct Bound {
    Run r;
    struct Bound *next;
} Bound;

struct sk_session {
    sc_options opt;
    int from_env;                 /* the options are the environment's, read at the first call */
    sc_world *w;
    sk_world_create create;       /* the backend w was made with */
    const sc_mesh *mesh;          /* w's mesh: the first function's */
    sk_workspace **workspace;     /* [device]: the local devices' */
    int ndev, failed;             /* failed: a run failed, and w with it */
    Bound *bound;
    char err[1024];
    /* sk_session_carry: (parameter, result) pairs for the next call, and
     * the Run of the last call that succeeded (whose result blocks hold
     * what it returned). */
    int carry[MAX_CARRY][2], ncarry;
    Run *last;
};

static int fail(sk_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(sk_session *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return SC_ERR;
}

sk_session *sk_session_new(const sc_options *opt) {
    sk_session *s = calloc(1, sizeof *s);
    if (s && opt)
        s->opt = *opt;
    if (s)
        s->from_env = !opt;
    return s;
}

const char *sk_session_error(const sk_session *s) { return s ? s->err : ""; }

void sk_session_free(sk_session *s) {
    if (!s)
        return;
    for (Bound *b = s->bound, *next; b; b = next) {
        next = b->next;
        sk_run_free(&b->r);
        free(b);
    }
    for (int d = 0; s->workspace && d < s->ndev; d++)
        sk_workspace_free(s->workspace[d]);
    free(s->workspace);
    if (s->w)
        sc_world_destroy(s->w);
    free(s);
}

static int same_mesh(const sc_mesh *a, const sc_mesh *b) {
    int same = a->naxes == b->naxes;
    for (int k = 0; same && k < a->naxes; k++)
        same = a->sizes[k] == b->sizes[k];
    return same;
}

/* The world of p's mesh and the local devices' workspaces. */
static int make_world(sk_session *s, const sk_program *p, sk_world_create create) {
    char err[512] = "";
    sc_options opt = s->opt;
    if (s->from_env && sc_options_from_env(&opt, err, sizeof err))
        return fail(s, "%s", err);
    if (!(s->w = create(&p->mesh, &opt, err, sizeof err)))
        return fail(s, "cannot make the world of '%s''s mesh: %s", p->fn, err[0] ? err : "see process 0");
    s->create = create;
    s->mesh = &p->mesh;
    s->ndev = sc_device_count(s->w);
    if (!(s->workspace = calloc((size_t)s->ndev, sizeof *s->workspace)))
        return fail(s, "out of memory");
    for (int d = 0; d < s->ndev; d++)
        if (sc_world_is_local(s->w, d) && !(s->workspace[d] = sk_workspace_new()))
            return fail(s, "out of memory");
    return 0;
}

/* p's Run, made at its first call: block tables, result blocks (every
 * device's on process 0, which assembles them), the session's workspaces.
 * Every process makes it at the same call, and they agree that all did
 * before any runs.  NULL with s->err set. */
static Run *bind(sk_session *s, const sk_program *p) {
    for (Bound *b = s->bound; b; b = b->next)
        if (b->r.p == p)
            return &b->r;
    Bound *b = calloc(1, sizeof *b);
    int ok = b != NULL;
    if (b) {
        b->r = (Run){.p = p, .w = s->w, .ndev = s->ndev, .process = sc_world_process(s->w),
                     .workspace = s->workspace, .borrowed_workspace = 1};
        b->r.root = b->r.process == 0;
        b->next = s->bound;
        s->bound = b;
        ok = sk_run_alloc(&b->r) == 0 && sk_prepare_outputs(&b->r) == 0;
        if (!ok)
            fail(s, "%s", b->r.err);
    } else
        fail(s, "out of memory");
    if (!sc_world_agree(s->w, ok, NULL) && ok)
        fail(s, "calling '%s': another process failed to prepare it", p->fn);
    return s->err[0] ? NULL : &b->r;
}

int sk_session_carry(sk_session *s, int param, int result) {
    if (!s || s->ncarry >= MAX_CARRY)
        return SC_ERR;
    s->carry[s->ncarry][0] = param;
    s->carry[s->ncarry][1] = result;
    s->ncarry++;
    return 0;
}

/* The carries asked for, applied to r when its previous call was the
 * session's last (its result blocks hold what that call returned): each
 * local device's result block becomes the parameter's, which then needs no
 * copy (skip[param] = 1), and the old parameter block takes the next
 * result, as --steps does between steps.  A carry that does not fit is
 * left out: the parameter is copied from its global array as usual. */
static void apply_carries(sk_session *s, Run *r, char *skip) {
    const sk_program *p = r->p;
    int used[MAX_CARRY], nused = 0;          /* the results carried: each once */
    for (int k = 0; k < s->ncarry && r == s->last; k++) {
        int i = s->carry[k][0], j = s->carry[k][1], again = 0;
        for (int e = 0; e < nused; e++)
            again |= used[e] == j;
        if (i < 0 || i >= p->nparams || j < 0 || j >= p->nresults || skip[i] || again ||
            !sk_same_blocks(p, &p->results[j], &p->params[i]))
            continue;
        for (int d = 0; d < r->ndev; d++)
            if (sc_world_is_local(r->w, d) && !r->params[d][i])
                return;                  /* never copied in: nothing to swap */
        for (int d = 0; d < r->ndev; d++)
            if (sc_world_is_local(r->w, d)) {
                void *old = r->params[d][i];
                r->params[d][i] = r->results[d][j];
                r->results[d][j] = old;
            }
        skip[i] = 1;
        used[nused++] = j;
    }
}

/* One call on a session (not NULL). */
static int call(sk_session *s, const sk_program *p, sk_world_create create, const void *const *params,
                void *const *results) {
    s->err[0] = 0;
    if (s->failed)
        return fail(s, "calling '%s': an earlier call of this session failed (its world is stopped): free the session "
                       "and make a new one", p->fn);
    char err[512];
    if (!create && !(create = s->create) && !(create = sk_backend_choose(err, sizeof err)))
        return fail(s, "calling '%s': %s", p->fn, err);
    if (!s->w && make_world(s, p, create)) {
        s->failed = 1;           /* a half-made world is not retried */
        return SC_ERR;
    }
    if (s->create != create)
        return fail(s, "calling '%s': the session's world is of another backend (threads or MPI): the C of all "
                       "functions called on a session is compiled alike", p->fn);
    if (!same_mesh(s->mesh, &p->mesh))
        return fail(s, "calling '%s': its mesh is not the mesh of the session's world (made for '%s')", p->fn,
                    s->bound ? s->bound->r.p->fn : "?");
    Run *r = bind(s, p);
    if (!r) {
        s->failed = 1;           /* its Run stays half made */
        return SC_ERR;
    }
    r->err[0] = 0;
    const void **in = calloc((size_t)p->nparams + 1, sizeof *in);
    char *skip = calloc((size_t)p->nparams + 1, 1);
    if (!in || !skip) {
        free(in);
        free(skip);
        s->ncarry = 0;
        return fail(s, "out of memory");
    }
    apply_carries(s, r, skip);
    s->ncarry = 0;
    for (int i = 0; i < p->nparams; i++)
        in[i] = skip[i] ? NULL : params[i];     /* NULL: already in the blocks */
    s->last = NULL;
    int rc = sk_params_from(r, in) || sk_run_devices(r) || sk_results_to(r, results);
    free(in);
    free(skip);
    if (rc) {
        s->failed = sc_world_failed(s->w);
        return fail(s, "%s", r->err);
    }
    s->last = r;
    return 0;
}

int sk_session_call(sk_session *s, const sk_program *p, const void *const *params, void *const *results) {
    return sk_session_call_on(s, p, NULL, params, results);
}

int sk_session_call_on(sk_session *s, const sk_program *p, sk_world_create create, const void *const *params,
                       void *const *results) {
    if (s)
        return call(s, p, create, params, results);
    sk_session *once = sk_session_new(NULL);
    int rc = once ? call(once, p, create, params, results) : SC_ERR;
    if (rc)
        fprintf(stderr, "error: %s\n", once ? once->err : "out of memory");
    sk_session_free(once);
    return rc;
}
