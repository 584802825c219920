/* The main() of generated programs (shardc_main.h): .npy inputs split into
 * each device's block, the devices run on the threads or the MPI backend,
 * the copies of replicated results checked against each other, results
 * assembled from the blocks and written as .npy files by process 0. */
#include "shardc_main.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const sk_program *p;
    sc_world *w;
    int ndev, root, repeat;
    const char **file, *out;         /* per parameter; the output directory */
    double **global;                 /* per parameter, then per result */
    void ***params, ***results;      /* [device][i]: local devices (results: all on process 0) */
    char err[1024];
} Run;

static void fail(Run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(Run *r, const char *fmt, ...) {
    if (r->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

static int body(sc_device *dev, void *arg) {
    Run *r = arg;
    int d = sc_device_id(dev);
    return r->p->entry(dev, (const void *const *)r->params[d], r->results[d]);
}

static double load(const void *x, int64_t i, int dt) {
    switch (dt) {
    case SK_F32: return ((const float *)x)[i];
    case SK_F64: return ((const double *)x)[i];
    case SK_BF16: return sc_bf16_to_float(((const uint16_t *)x)[i]);
    case SK_F16: return sc_f16_to_float(((const uint16_t *)x)[i]);
    case SK_I32: return ((const int32_t *)x)[i];
    default: return ((const uint8_t *)x)[i];
    }
}

static void store(void *x, int64_t i, int dt, double v) {
    switch (dt) {
    case SK_F32: ((float *)x)[i] = (float)v; break;
    case SK_F64: ((double *)x)[i] = v; break;
    case SK_BF16: ((uint16_t *)x)[i] = sc_bf16_from_float((float)v); break;
    case SK_F16: ((uint16_t *)x)[i] = sc_f16_from_float((float)v); break;
    case SK_I32: ((int32_t *)x)[i] = (int32_t)v; break;
    default: ((uint8_t *)x)[i] = v != 0; break;
    }
}

static int coord(const sc_mesh *m, int dev, int a) {
    int stride = 1;
    for (int b = m->naxes - 1; b > a; b--)
        stride *= m->sizes[b];
    return dev / stride % m->sizes[a];
}

/* Where device dev's block starts in the global array, and how much of it
 * is real data; 0 when it is all padding. */
static int block_box(const sc_mesh *m, const sk_arg_desc *a, int dev, int64_t *start, int64_t *box) {
    int real = 1;
    for (int d = 0; d < a->global.rank; d++) {
        int64_t block = 0;
        for (int k = 0; k < m->naxes; k++)          /* the axes splitting d, major first */
            for (int ax = 0; ax < m->naxes; ax++)
                if (a->dim[ax] == d && a->pos[ax] == k)
                    block = block * m->sizes[ax] + coord(m, dev, ax);
        start[d] = block * a->local[d];
        int64_t left = a->global.dims[d] - start[d];
        box[d] = left < 0 ? 0 : left < a->local[d] ? left : a->local[d];
        real &= box[d] > 0;
    }
    return real;
}

/* The device holding the copy of a result that `dev` holds a replica of:
 * the one at coordinate 0 of the axes that do not split it. */
static int owner_of(const sc_mesh *m, const sk_arg_desc *a, int dev) {
    int owner = dev, stride = 1;
    for (int ax = m->naxes - 1; ax >= 0; ax--) {
        if (a->dim[ax] < 0)
            owner -= coord(m, dev, ax) * stride;
        stride *= m->sizes[ax];
    }
    return owner;
}

/* Visit the elements of a box: global and local (block) linear indices. */
typedef void (*visit_fn)(void *ctx, int64_t g, int64_t l);

static void each_in_box(const sk_arg_desc *a, const int64_t *start, const int64_t *box, visit_fn f, void *ctx) {
    int rank = a->global.rank;
    int64_t idx[SC_MAX_RANK] = {0}, n = 1;
    for (int d = 0; d < rank; d++)
        n *= box[d];
    for (int64_t e = 0; e < n; e++) {
        int64_t g = 0, l = 0;
        for (int d = 0; d < rank; d++) {
            g = g * a->global.dims[d] + start[d] + idx[d];
            l = l * a->local[d] + idx[d];
        }
        f(ctx, g, l);
        for (int d = rank - 1; d >= 0 && ++idx[d] == box[d]; d--)
            idx[d] = 0;
    }
}

typedef struct {
    int dtype;
    double *global;
    void *block;
    const void *other;                /* replica check: the owner's block */
    int64_t bad;                      /* first differing local index, or -1 */
} Copy;

static void to_block(void *ctx, int64_t g, int64_t l) {
    Copy *c = ctx;
    store(c->block, l, c->dtype, c->global[g]);
}

static void from_block(void *ctx, int64_t g, int64_t l) {
    Copy *c = ctx;
    c->global[g] = load(c->block, l, c->dtype);
}

static void compare_blocks(void *ctx, int64_t g, int64_t l) {
    Copy *c = ctx;
    double x = load(c->block, l, c->dtype), y = load(c->other, l, c->dtype);
    (void)g;
    if (c->bad < 0 && x != y && (x == x || y == y))
        c->bad = l;
}

static int64_t local_elems(const sk_arg_desc *a) {
    int64_t n = 1;
    for (int d = 0; d < a->global.rank; d++)
        n *= a->local[d];
    return n;
}

static int64_t local_bytes(const sk_arg_desc *a) {
    return local_elems(a) * (int64_t)sk_dtype_size((sk_dtype)a->global.dtype);
}

static int64_t global_elems(const sk_arg_desc *a) {
    int64_t n = 1;
    for (int d = 0; d < a->global.rank; d++)
        n *= a->global.dims[d];
    return n;
}

static void type_text(const sk_arg_desc *a, char *buf, size_t n) {
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "i32", "bool"};
    int w = snprintf(buf, n, "%s[", names[a->global.dtype]);
    for (int d = 0; d < a->global.rank && w < (int)n - 24; d++)
        w += snprintf(buf + w, n - (size_t)w, "%s%lld", d ? ", " : "", (long long)a->global.dims[d]);
    snprintf(buf + w, n - (size_t)w, "]");
}

/* ---- the steps ---- */

static int usage(const Run *r, const char *prog) {
    if (r->root)
        fprintf(stderr, "usage: %s --in NAME=FILE.npy ... --out DIR [--repeat N]\n", prog);
    return 2;
}

/* 0, 1 for an error (in r->err) or 2 for a usage error. */
static int parse_args(Run *r, int argc, char **argv) {
    const sk_program *p = r->p;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (i + 1 == argc || (strcmp(opt, "--in") && strcmp(opt, "--out") && strcmp(opt, "--repeat")))
            return usage(r, argv[0]);
        const char *v = argv[++i];
        if (strcmp(opt, "--out") == 0) {
            r->out = v;
            continue;
        }
        if (strcmp(opt, "--repeat") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1000000)
                return usage(r, argv[0]);
            r->repeat = (int)n;
            continue;
        }
        const char *eq = strchr(v, '=');
        int which = -1, len = eq ? (int)(eq - v) : (int)strlen(v);
        for (int k = 0; eq && k < p->nparams; k++)
            if ((int)strlen(p->params[k].name) == len && memcmp(p->params[k].name, v, (size_t)len) == 0)
                which = k;
        if (which < 0) {
            fail(r, "--in '%s': '%s' has no parameter named '%.*s'", v, p->fn, len, v);
            return 1;
        }
        if (r->file[which]) {
            fail(r, "--in gives parameter '%s' twice", p->params[which].name);
            return 1;
        }
        r->file[which] = eq + 1;
    }
    return r->out ? 0 : usage(r, argv[0]);
}

/* Read every parameter and split it into the blocks of this process's devices. */
static int read_inputs(Run *r) {
    const sk_program *p = r->p;
    char err[512], type[128];
    for (int i = 0; i < p->nparams; i++) {
        const sk_arg_desc *a = &p->params[i];
        sk_npy_shape got;
        type_text(a, type, sizeof type);
        if (!r->file[i]) {
            fail(r, "no --in for parameter '%s' of '%s', which needs a .npy file of %s", a->name, p->fn, type);
            return 1;
        }
        if (sk_npy_read(r->file[i], &a->global, &got, &r->global[i], err, sizeof err)) {
            fail(r, "--in %s: %s", a->name, err);
            return 1;
        }
        for (int d = 0; d < r->ndev; d++) {
            if (!sc_world_is_local(r->w, d))
                continue;
            int64_t start[SC_MAX_RANK], box[SC_MAX_RANK];
            Copy c = {a->global.dtype, r->global[i], calloc((size_t)local_bytes(a) + 1, 1), NULL, -1};
            if (!(r->params[d][i] = c.block)) {
                fail(r, "out of memory");
                return 1;
            }
            if (block_box(&p->mesh, a, d, start, box))
                each_in_box(a, start, box, to_block, &c);
        }
    }
    return 0;
}

/* Result blocks: this process's devices', and on process 0 every device's,
 * which collect fills. */
static int alloc_results(Run *r) {
    for (int i = 0; i < r->p->nresults; i++)
        for (int d = 0; d < r->ndev; d++)
            if ((r->root || sc_world_is_local(r->w, d)) &&
                !(r->results[d][i] = calloc((size_t)local_bytes(&r->p->results[i]) + 1, 1))) {
                fail(r, "out of memory");
                return 1;
            }
    return 0;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Devices that each run GEMMs on every core would oversubscribe them: the
 * machine's cores are shared among the devices running on it (this
 * process's, times the processes mpirun started on this node), unless
 * OPENBLAS_NUM_THREADS or OMP_NUM_THREADS says otherwise. */
static void share_cores(const Run *r) {
    if (getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS"))
        return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *node = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long processes = node && atol(node) > 0 ? atol(node) : 1, devices = 0;
    for (int d = 0; d < r->ndev; d++)
        devices += sc_world_is_local(r->w, d);
    long share = cores / (devices * processes);
    sk_blas_threads(share > 1 ? (int)share : 1);
}

/* Run the devices (r->repeat times, timed, when asked). */
static int run_devices(Run *r) {
    int n = r->repeat ? r->repeat : 1;
    double *t = calloc((size_t)n, sizeof *t);
    share_cores(r);
    if (!t) {
        fail(r, "out of memory");
        return 1;
    }
    for (int k = 0; k < n; k++) {
        if (n > 1)
            sc_world_agree(r->w, 1, NULL);  /* start every process's run together */
        double t0 = seconds();
        if (sc_run(r->w, body, r) != 0) {
            fail(r, "running '%s': %s", r->p->fn, sc_world_error(r->w));
            free(t);
            return 1;
        }
        t[k] = seconds() - t0;
    }
    if (r->repeat && r->root) {
        qsort(t, (size_t)n, sizeof *t, by_value);
        fprintf(stderr, "time: best %.6f s, median %.6f s over %d run%s\n", t[0], t[n / 2], n, n == 1 ? "" : "s");
    }
    free(t);
    return 0;
}

/* On process 0: every replica of a result equals its owner's copy. */
static int check_replicas(Run *r) {
    const sk_program *p = r->p;
    for (int i = 0; i < p->nresults; i++) {
        const sk_arg_desc *a = &p->results[i];
        for (int d = 0; d < r->ndev; d++) {
            int o = owner_of(&p->mesh, a, d);
            int64_t start[SC_MAX_RANK], box[SC_MAX_RANK];
            if (o == d || !block_box(&p->mesh, a, d, start, box))
                continue;
            Copy c = {a->global.dtype, NULL, r->results[d][i], r->results[o][i], -1};
            each_in_box(a, start, box, compare_blocks, &c);
            if (c.bad >= 0) {
                fail(r, "result%d of '%s' is replicated, but its copies on devices %d and %d differ at element %lld "
                        "of the block (%.9g and %.9g): a bug in shardc or the runtime",
                     i, p->fn, o, d, (long long)c.bad, load(r->results[o][i], c.bad, a->global.dtype),
                     load(r->results[d][i], c.bad, a->global.dtype));
                return 1;
            }
        }
    }
    return 0;
}

/* On process 0: assemble each result from its owners' blocks and write it. */
static int write_results(Run *r) {
    const sk_program *p = r->p;
    char err[512];
    if (mkdir(r->out, 0777) != 0 && errno != EEXIST) {
        fail(r, "cannot create '%s': %s", r->out, strerror(errno));
        return 1;
    }
    for (int i = 0; i < p->nresults; i++) {
        const sk_arg_desc *a = &p->results[i];
        double *g = r->global[p->nparams + i] = calloc((size_t)global_elems(a) + 1, sizeof(double));
        if (!g) {
            fail(r, "out of memory");
            return 1;
        }
        for (int d = 0; d < r->ndev; d++) {
            int64_t start[SC_MAX_RANK], box[SC_MAX_RANK];
            Copy c = {a->global.dtype, g, r->results[d][i], NULL, -1};
            if (owner_of(&p->mesh, a, d) == d && block_box(&p->mesh, a, d, start, box))
                each_in_box(a, start, box, from_block, &c);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/result%d.npy", r->out, i);
        if (sk_npy_write(path, &a->global, g, err, sizeof err)) {
            fail(r, "%s", err);
            return 1;
        }
    }
    return 0;
}

static void free_run(Run *r) {
    const sk_program *p = r->p;
    for (int d = 0; d < r->ndev; d++) {
        for (int i = 0; r->params && r->params[d] && i < p->nparams; i++)
            free(r->params[d][i]);
        for (int i = 0; r->results && r->results[d] && i < p->nresults; i++)
            free(r->results[d][i]);
        if (r->params)
            free(r->params[d]);
        if (r->results)
            free(r->results[d]);
    }
    for (int i = 0; r->global && i < p->nparams + p->nresults; i++)
        free(r->global[i]);
    free(r->global);
    free(r->params);
    free(r->results);
    free(r->file);
}

/* Prints r->err where it is needed: on process 0, or on another process
 * whose failure process 0 does not share. */
static int report(Run *r, int rc, int root_ok) {
    if (r->err[0] && r->root)
        fprintf(stderr, "error: %s\n", r->err);
    else if (r->err[0] && root_ok)
        fprintf(stderr, "error: process %d: %s\n", sc_world_process(r->w), r->err);
    return rc;
}

int sk_main_on(int argc, char **argv, const sk_program *p, sk_world_create create) {
    Run r = {.p = p};
    char err[512] = "";
    if (!(r.w = create(&p->mesh, err, sizeof err))) {
        if (err[0])
            fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    r.root = sc_world_process(r.w) == 0;
    r.ndev = sc_device_count(r.w);
    int np = p->nparams, nr = p->nresults, root_ok = 1;
    r.file = calloc((size_t)np + 1, sizeof(char *));
    r.global = calloc((size_t)(np + nr) + 1, sizeof(double *));
    r.params = calloc((size_t)r.ndev, sizeof(void **));
    r.results = calloc((size_t)r.ndev, sizeof(void **));
    int rc = !r.file || !r.global || !r.params || !r.results;
    for (int d = 0; d < r.ndev && !rc; d++) {
        r.params[d] = calloc((size_t)np + 1, sizeof(void *));
        r.results[d] = calloc((size_t)nr + 1, sizeof(void *));
        rc = !r.params[d] || !r.results[d];
    }
    if (rc)
        fail(&r, "out of memory");
    rc = rc ? rc : parse_args(&r, argc, argv);
    rc = rc ? rc : read_inputs(&r);
    rc = rc ? rc : alloc_results(&r);
    /* Every process reads the same files: they agree before any runs (a
     * process that failed says why; the others stop with status 1). */
    if (sc_world_agree(r.w, rc == 0, &root_ok))
        rc = run_devices(&r);
    else if (!rc)
        rc = 1;
    for (int i = 0; i < nr && !rc; i++) {
        void **blocks = malloc((size_t)r.ndev * sizeof *blocks);
        for (int d = 0; blocks && d < r.ndev; d++)
            blocks[d] = r.results[d][i];
        if (!blocks || sc_world_collect(r.w, blocks, (size_t)local_bytes(&p->results[i])) != 0) {
            fail(&r, "gathering result%d on process 0 failed", i);
            rc = 1;
        }
        free(blocks);
    }
    if (!rc && r.root)
        rc = check_replicas(&r) || write_results(&r);
    rc = report(&r, rc, root_ok);
    free_run(&r);
    sc_world_destroy(r.w);     /* after a failed run, on MPI: aborts every process */
    return rc;
}
