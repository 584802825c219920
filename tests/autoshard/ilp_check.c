/* The sharding search's integer program (compiler/autoshard/ilp.c) against
 * the plans experts choose, on a 2x4 mesh: data parallel for a
 * large-batch MLP with small weights, Megatron splits for a small batch and
 * large weights, split weights under a memory cap below the replicated
 * ones, a loop's costs weighted by its trips, the GPT train step's heads
 * and hidden dims split, and an infeasible cap.  Each program is compiled
 * to the checked stage; every parameter's candidates are every assignment
 * of the mesh axes to its dims (or none) that divides them.  Run from the
 * source root (make check).  Output is TAP-like. */
#include "../../compiler/autoshard/problem.h"
#include "../../compiler/driver/frontend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_no, failed;

static void ok(int cond, const char *what) {
    printf("%sok %d - %s\n", cond ? "" : "not ", ++test_no, what);
    failed += !cond;
}

/* Every sharding of `type` that assigns each mesh axis to a dim or none,
 * extents divisible; axes on one dim major first in axis order. */
static int candidates(const Module *m, const Shape *type, Sharding *out, int cap) {
    int n = 0, digit[MAX_AXES] = {0};
    for (;;) {
        Sharding sh = sharding_replicated();
        int64_t prod[MAX_RANK];
        for (int d = 0; d < MAX_RANK; d++)
            prod[d] = 1;
        int okay = 1;
        for (int a = 0; a < m->naxes; a++) {
            int d = digit[a] - 1;
            sh.dim[a] = (int8_t)(d >= 0 ? d : SH_REPLICATED);
            if (d >= 0) {
                sh.pos[a] = 0;
                for (int b = 0; b < a; b++)
                    sh.pos[a] += sh.dim[b] == d;
                prod[d] *= m->axis_size[a];
            }
        }
        for (int d = 0; d < type->rank; d++)
            okay &= type->dims[d] % prod[d] == 0;
        if (okay && n < cap)
            out[n++] = sh;
        int a = 0;
        while (a < m->naxes && ++digit[a] > type->rank)
            digit[a++] = 0;
        if (a == m->naxes)
            return n;
    }
}

typedef struct {
    Compilation c;
    Target t;
    AutoProblem p;
    AutoParam ap[256];
    Arena arena;
    IlpResult r;
    int rc;
    char err[1024];
} Case;

static int param_index(const Module *m, const Fn *fn, const char *name) {
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (in->op == OP_PARAMETER && in->sym >= 0 && strcmp(sym_name(m->syms, in->sym), name) == 0)
            return (int)ir_attr(fn, in, 0);
    }
    return -1;
}

/* Compile `text` (or the file `path`) to the checked stage, make every
 * parameter whose name starts with one of `auto_prefixes` searched (a
 * parameter named "v.X" tied to "p.X" when `tie_v`), and solve. */
static const char *mesh_flag;     /* --report: "X=16,Y=16" */

static int run_case(Case *k, const char *path, const char *text, const char *consts, const char *target,
                    const char *entry, const char *const *auto_prefixes, int tie_v, int64_t cap) {
    memset(k, 0, sizeof *k);
    char *owned = NULL;
    if (!text) {
        FILE *f = fopen(path, "rb");
        if (!f)
            return -1;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        owned = calloc((size_t)len + 1, 1);
        if (fread(owned, 1, (size_t)len, f) != (size_t)len)
            len = 0;
        fclose(f);
        text = owned;
    }
    MeshFlag mf = {0};
    for (const char *s = mesh_flag; s && *s;) {
        long long v;
        int used;
        if (sscanf(s, "%63[^=]=%lld%n", mf.name[mf.n], &v, &used) != 2)
            break;
        mf.size[mf.n++] = v;
        s += used + (s[used] == ',');
    }
    for (const char *s = consts; s && *s;) {
        char name[64];
        long long v;
        int used;
        if (sscanf(s, "%63[^=]=%lld%n", name, &v, &used) != 2)
            break;
        snprintf(mf.const_name[mf.nconsts], sizeof mf.const_name[0], "%s", name);
        mf.const_value[mf.nconsts] = (double)v;
        mf.const_int[mf.nconsts] = v;
        mf.const_is_int[mf.nconsts++] = 1;
        s += used + (s[used] == ',');
    }
    int rc = frontend_compile(&k->c, path, text, strlen(text), stderr, &mf, STAGE_PARSED);
    if (rc != FRONTEND_OK || target_load(&k->t, target, stderr) != 0)
        return -1;
    const Module *m = &k->c.module;
    int f = -1;
    for (int i = 0; i < m->nfns; i++)
        if (strcmp(sym_name(m->syms, m->fns[i].sym), entry) == 0)
            f = i;
    if (f < 0)
        return -1;
    const Fn *fn = &m->fns[f];
    int n = 0;
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        if (in->op != OP_PARAMETER || in->sym < 0)
            continue;
        const char *name = sym_name(m->syms, in->sym);
        int searched = 0;
        for (int i = 0; auto_prefixes[i]; i++)
            searched |= strncmp(name, auto_prefixes[i], strlen(auto_prefixes[i])) == 0;
        if (!searched)
            continue;
        AutoParam *ap = &k->ap[n];
        ap->param = (int)ir_attr(fn, in, 0);
        Sharding *cand = arena_alloc(&k->arena, sizeof(Sharding) * 512);
        ap->ncand = candidates(m, &fn->params[ap->param].type, cand, 512);
        ap->cand = cand;
        ap->tie = -1;
        if (tie_v && strncmp(name, "v.", 2) == 0) {
            char pname[256];
            snprintf(pname, sizeof pname, "p.%s", name + 2);
            int pi = param_index(m, fn, pname);
            for (int j = 0; j < n; j++)
                if (k->ap[j].param == pi)
                    ap->tie = j;
        }
        n++;
    }
    k->p = (AutoProblem){m, f, &k->t, cap, n, k->ap};
    FILE *err = fmemopen(k->err, sizeof k->err - 1, "w");
    k->rc = ilp_solve(&k->p, &k->arena, &k->r, err);
    fclose(err);
    free(owned);   /* the module keeps no pointer into the text past sema's diagnostics */
    return 0;
}

static void done(Case *k) {
    arena_free(&k->arena);
    compilation_free(&k->c);
}

/* The chosen sharding of parameter `name`, as "dim of axis 0, dim of axis
 * 1" ("-" for none): "0,0" is dim 0 split over both axes. */
static const char *chosen(const Case *k, const char *name, char *buf) {
    const Module *m = &k->c.module;
    int pi = param_index(m, &m->fns[k->p.fn], name);
    strcpy(buf, "?");
    for (int i = 0; i < k->p.nparams && k->r.choice; i++)
        if (k->ap[i].param == pi) {
            const Sharding *sh = &k->ap[i].cand[k->r.choice[i]];
            char *o = buf;
            for (int a = 0; a < m->naxes; a++)
                o += sprintf(o, "%s%s", a ? "," : "", sh->dim[a] >= 0 ? (char[]){(char)('0' + sh->dim[a]), 0} : "-");
        }
    return buf;
}

static void report(const Case *k, const char *what) {
    printf("# %s: status %d, %d vars, %d rows, %.3f s, objective %.4g s\n", what, k->r.status, k->r.nvars,
           k->r.nrows, k->r.seconds, k->r.objective);
}

static const char *const mlp_src =
    "mesh X = 2, Y = 4\n"
    "const B = 8, D = 64, F = 256\n"
    "fn mlp(x: f32[B, D], w_in: f32[D, F], w_out: f32[F, D]) -> f32[B, D] {\n"
    "    h[b, f] = x[b, d] * w_in[d, f]\n"
    "    a = gelu(h)\n"
    "    y[b, e] = a[b, f] * w_out[f, e]\n"
    "    return y\n"
    "}\n";

static const char *const loop_src =
    "mesh X = 2, Y = 4\n"
    "const B = 4096, D = 128, T = 1\n"
    "fn step(x: f32[B, D], w1: f32[D, D], w2: f32[D, D]) -> f32[B, D] {\n"
    "    for i in 0..T {\n"
    "        h[b, e] = x[b, d] * w1[d, e]\n"
    "        x[b, e] = tanh(h[b, f]) * w2[f, e]\n"
    "    }\n"
    "    return x\n"
    "}\n";

static const char *const all_params[] = {"x", "w_in", "w_out", NULL};
static const char *const loop_params[] = {"x", "w1", "w2", NULL};

static void mlp_cases(const char *target, const char *small_batch) {
    char a[32], b[32], c[32], what[1400];
    Case *k = calloc(1, sizeof *k);
    /* A large batch, small weights: data parallel, the batch over both axes. */
    int rc = run_case(k, "mlp.tdsl", mlp_src, "B=65536,D=64,F=256", target, "mlp", all_params, 0, 0);
    snprintf(what, sizeof what, "%s: large-batch MLP is data parallel (x %s, w_in %s, w_out %s)", target,
             chosen(k, "x", a), chosen(k, "w_in", b), chosen(k, "w_out", c));
    ok(rc == 0 && k->rc == 0 && k->r.status == ILP_OPTIMAL && !strcmp(a, "0,0") && !strcmp(b, "-,-") &&
       !strcmp(c, "-,-"), what);
    report(k, what);
    done(k);

    /* A small batch, large weights: Megatron-like, w_in split on F alone
     * and w_out on F by at least one axis (no activation gathered before
     * the first dot; the second's partial sums all-reduced).  On a 2x4 mesh
     * the cost model may keep an axis on w_out's D instead of F where a
     * ring all-reduce's 2(n-1) steps of latency cost more than gathering
     * the hidden activation over that axis alone, so w_out's other axis is
     * free.  The batch is set per target to where its weights dominate. */
    rc = run_case(k, "mlp.tdsl", mlp_src, small_batch, target, "mlp", all_params, 0, 0);
    chosen(k, "w_in", b);
    chosen(k, "w_out", c);
    int megatron = strlen(b) == 3 && strlen(c) == 3 && strcmp(b, "-,-") != 0 && strchr(c, '0') != NULL;
    for (int ax = 0; megatron && ax < 2; ax++)
        megatron = b[2 * ax] == '-' || b[2 * ax] == '1';
    snprintf(what, sizeof what, "%s: small-batch MLP is Megatron (x %s, w_in %s, w_out %s)", target,
             chosen(k, "x", a), b, c);
    ok(rc == 0 && k->rc == 0 && k->r.status == ILP_OPTIMAL && megatron, what);
    report(k, what);
    done(k);

    /* The large-batch MLP again under a cap below its replicated weights
     * (2 x 64 x 256 x 4 = 131072 bytes) plus x's block: the weights split. */
    int64_t cap = 65536 * 64 * 4 / 8 + 100000;
    rc = run_case(k, "mlp.tdsl", mlp_src, "B=65536,D=64,F=256", target, "mlp", all_params, 0, cap);
    chosen(k, "w_in", b);
    chosen(k, "w_out", c);
    snprintf(what, sizeof what, "%s: under a %lld-byte cap the weights split (x %s, w_in %s, w_out %s)", target,
             (long long)cap, chosen(k, "x", a), b, c);
    ok(rc == 0 && k->rc == 0 && k->r.status == ILP_OPTIMAL && (strcmp(b, "-,-") || strcmp(c, "-,-")), what);
    report(k, what);
    done(k);

    /* A cap below even the fully split parameters: infeasible, saying why. */
    rc = run_case(k, "mlp.tdsl", mlp_src, "B=65536,D=64,F=256", target, "mlp", all_params, 0, 1000);
    snprintf(what, sizeof what, "%s: an infeasible cap fails with a reason (%s)", target, k->err);
    char *nl = strchr(what, '\n');
    if (nl)
        *nl = '\0';
    ok(rc == 0 && k->rc == -1 && k->r.status == ILP_INFEASIBLE && strstr(k->err, "no plan fits 1000 bytes") &&
       strstr(k->err, "'x'"), what);
    done(k);
    free(k);
}

/* A loop's body costs its trip count times: T = 64 predicts 64 times the
 * time of T = 1 (the loop is all there is), and the same plan. */
static void loop_cases(const char *target) {
    char a[32], b[32], what[256];
    Case *k = calloc(1, sizeof *k);
    int rc = run_case(k, "loop.tdsl", loop_src, "T=1", target, "step", loop_params, 0, 0);
    double one = k->r.objective;
    chosen(k, "x", a);
    int ok1 = rc == 0 && k->rc == 0;
    done(k);
    rc = run_case(k, "loop.tdsl", loop_src, "T=64", target, "step", loop_params, 0, 0);
    double many = k->r.objective;
    chosen(k, "x", b);
    snprintf(what, sizeof what, "%s: a loop of 64 trips costs 64 of one (%.4g s, %.4g s; x %s, %s)", target, one,
             many, a, b);
    ok(ok1 && rc == 0 && k->rc == 0 && one > 0 && many > 63.9 * one && many < 64.1 * one && !strcmp(a, "0,0") &&
       !strcmp(a, b), what);
    report(k, what);
    done(k);
    free(k);
}

/* The GPT train step with weights that dominate: the heads and the MLP's
 * hidden dim split (Megatron), v tied to p. */
static void gpt_case(const char *target) {
    static const char *const prefixes[] = {"p.", "v.", NULL};
    char q[32], win[32], wout[32], what[256];
    Case *k = calloc(1, sizeof *k);
    int rc = run_case(k, "samples/gpt.tdsl", NULL, "B=8,S=128,D=2048,H=16,K=128,F=8192,V=4096,L=2", target,
                      "train_step", prefixes, 1, 0);
    chosen(k, "p.layers.wq", q);       /* [L, D, H, K] */
    chosen(k, "p.layers.w_in", win);   /* [L, D, F] */
    chosen(k, "p.layers.w_out", wout); /* [L, F, D] */
    char vq[32], vwin[32];
    chosen(k, "v.layers.wq", vq);      /* tied to p's: the same candidate */
    chosen(k, "v.layers.w_in", vwin);
    int heads = strchr(q, '2') != NULL, hidden = strchr(win, '2') && strchr(wout, '1');
    snprintf(what, sizeof what, "%s: GPT train_step splits heads and hidden (wq %s, w_in %s, w_out %s; v's wq %s)",
             target, q, win, wout, vq);
    ok(rc == 0 && k->rc == 0 && heads && hidden && !strcmp(q, vq) && !strcmp(win, vwin) && k->r.seconds < 30, what);
    report(k, what);
    done(k);
    free(k);
}

/* --report: the sizes and times of the GPT train step's program, on 2x4
 * and, at GPT-2 XL's sizes, on 16x16 (docs/autoshard.md). */
static void report_gpt(void) {
    static const char *const prefixes[] = {"p.", "v.", NULL};
    static const struct {
        const char *mesh, *consts;
    } runs[] = {
        {NULL, "B=8,S=128,D=2048,H=16,K=128,F=8192,V=4096,L=2"},
        {"X=16,Y=16", "B=256,S=1024,D=1600,H=25,K=64,F=6400,V=50304,L=48"},
    };
    const char *targets[] = {"targets/tpu-v5e.target", "targets/h100x8.target"};
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 2; t++) {
            char q[32], win[32], wout[32], wte[32], what[512];
            Case *k = calloc(1, sizeof *k);
            mesh_flag = runs[i].mesh;
            int rc = run_case(k, "samples/gpt.tdsl", NULL, runs[i].consts, targets[t], "train_step", prefixes, 1, 0);
            snprintf(what, sizeof what, "%s mesh %s --const %s: wq %s, w_in %s, w_out %s, wte %s", targets[t],
                     runs[i].mesh ? runs[i].mesh : "X=2,Y=4", runs[i].consts, chosen(k, "p.layers.wq", q),
                     chosen(k, "p.layers.w_in", win), chosen(k, "p.layers.w_out", wout), chosen(k, "p.wte", wte));
            ok(rc == 0 && k->rc == 0, what);
            report(k, what);
            done(k);
            free(k);
        }
    mesh_flag = NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--report")) {
        report_gpt();
        printf("# done: %d tests\n", test_no);
        return failed != 0;
    }
    const char *targets[] = {"tests/lit/cost/Inputs/test.target", "targets/tpu-v5e.target", "targets/h100x8.target"};
    const char *small_batch[] = {"B=8,D=1024,F=65536", "B=32,D=1024,F=65536", "B=32,D=1024,F=65536"};
    for (int i = 0; i < 3; i++)
        mlp_cases(targets[i], small_batch[i]);
    loop_cases(targets[0]);
    gpt_case(targets[1]);
    printf("# done: %d tests\n", test_no);
    return failed != 0;
}
