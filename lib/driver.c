/* The main() of generated programs (shardc_main.h): .npy inputs, of which
 * each process reads the blocks of its own devices, the devices run on the
 * threads or the MPI backend, and results written either whole by process 0
 * (the copies of replicated results checked against each other) or as each
 * process's own part. */
#include "shardc_main.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A box of an array: the elements [start[d], start[d] + count[d]). */
typedef struct {
    int64_t start[SC_MAX_RANK], count[SC_MAX_RANK];
} Box;

typedef struct {
    const sk_program *p;
    sc_world *w;
    int ndev, root, process, repeat, local_devices, local_outputs, io_stats;
    const char **file, *out;         /* per parameter: --in or --local-in FILE; the output directory */
    uint8_t *local_in;               /* per parameter: 1 for --local-in */
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

/* Device dev's block in the global array: where it starts (at most the
 * dim) and how much of it is real data; 0 when it is all padding. */
static int block_of(const sc_mesh *m, const sk_arg_desc *a, int dev, Box *b) {
    int real = 1;
    for (int d = 0; d < a->global.rank; d++) {
        int64_t block = 0;
        for (int k = 0; k < m->naxes; k++)          /* the axes splitting d, major first */
            for (int ax = 0; ax < m->naxes; ax++)
                if (a->dim[ax] == d && a->pos[ax] == k)
                    block = block * m->sizes[ax] + coord(m, dev, ax);
        int64_t start = block * a->local[d], left = a->global.dims[d] - start;
        b->start[d] = left < 0 ? a->global.dims[d] : start;
        b->count[d] = left < 0 ? 0 : left < a->local[d] ? left : a->local[d];
        real &= b->count[d] > 0;
    }
    return real;
}

/* Which block of an array a device holds: devices with the same key hold
 * copies of one block (they differ only on axes that do not split it). */
static int64_t block_key(const sc_mesh *m, const sk_arg_desc *a, int dev) {
    int64_t key = 0;
    for (int ax = 0; ax < m->naxes; ax++)
        if (a->dim[ax] >= 0)
            key = key * m->sizes[ax] + coord(m, dev, ax);
    return key;
}

static int64_t block_keys(const sc_mesh *m, const sk_arg_desc *a) {
    int64_t n = 1;
    for (int ax = 0; ax < m->naxes; ax++)
        if (a->dim[ax] >= 0)
            n *= m->sizes[ax];
    return n;
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

/* Per block key, the first of this process's devices that holds the
 * block, or -1: it reads (or writes) the block for the process, and the
 * others copy (or are checked against) it.  NULL when out of memory. */
static int *local_holders(const Run *r, const sk_arg_desc *a) {
    int64_t n = block_keys(&r->p->mesh, a);
    int *first = malloc((size_t)n * sizeof *first);
    for (int64_t k = 0; first && k < n; k++)
        first[k] = -1;
    for (int d = r->ndev - 1; first && d >= 0; d--)
        if (sc_world_is_local(r->w, d))
            first[block_key(&r->p->mesh, a, d)] = d;
    return first;
}

static int64_t box_elems(int rank, const int64_t *count) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= count[d];
    return n;
}

/* This process's part of an array, as jax.make_array_from_process_local_data
 * takes it: the bounding box of the blocks of its devices that hold data
 * (of all of its devices when none does, an empty box).  Returns 1 when
 * those blocks fill the box, 0 when the part is not a box. */
static int local_part(const Run *r, const sk_arg_desc *a, const int *holder, Box *part) {
    const sc_mesh *m = &r->p->mesh;
    int rank = a->global.rank, any = 0;
    int64_t hi[SC_MAX_RANK] = {0}, filled = 0;
    Box b;
    for (int d = 0; d < r->ndev && !any; d++)
        any = sc_world_is_local(r->w, d) && block_of(m, a, d, &b);
    for (int k = 0; k < rank; k++)
        part->start[k] = a->global.dims[k];
    for (int d = 0; d < r->ndev; d++) {
        if (!sc_world_is_local(r->w, d) || (!block_of(m, a, d, &b) && any))
            continue;
        for (int k = 0; k < rank; k++) {
            part->start[k] = b.start[k] < part->start[k] ? b.start[k] : part->start[k];
            hi[k] = b.start[k] + b.count[k] > hi[k] ? b.start[k] + b.count[k] : hi[k];
        }
        if (holder[block_key(m, a, d)] == d && any)    /* blocks are disjoint, copies counted once */
            filled += box_elems(rank, b.count);
    }
    for (int k = 0; k < rank; k++)
        part->count[k] = hi[k] > part->start[k] ? hi[k] - part->start[k] : 0;
    return filled == box_elems(rank, part->count);
}

/* Visit the elements of a block's box (count[d] from the block's start):
 * the linear index in an outer array of dims `outer`, where the box starts
 * at `at`, and the linear index in the block. */
typedef void (*visit_fn)(void *ctx, int64_t g, int64_t l);

static void each_in_box(const sk_arg_desc *a, const int64_t *outer, const int64_t *at, const int64_t *count,
                        visit_fn f, void *ctx) {
    int rank = a->global.rank;
    int64_t idx[SC_MAX_RANK] = {0}, n = box_elems(rank, count);
    for (int64_t e = 0; e < n; e++) {
        int64_t g = 0, l = 0;
        for (int d = 0; d < rank; d++) {
            g = g * outer[d] + at[d] + idx[d];
            l = l * a->local[d] + idx[d];
        }
        f(ctx, g, l);
        for (int d = rank - 1; d >= 0 && ++idx[d] == count[d]; d--)
            idx[d] = 0;
    }
}

typedef struct {
    int dtype;
    double *outer;                    /* the global array, a process's part or a box read from a file */
    void *block;
    const void *other;                /* replica check: the reference copy's block */
    int64_t bad;                      /* first differing local index, or -1 */
} Copy;

static void to_block(void *ctx, int64_t g, int64_t l) {
    Copy *c = ctx;
    store(c->block, l, c->dtype, c->outer[g]);
}

static void from_block(void *ctx, int64_t g, int64_t l) {
    Copy *c = ctx;
    c->outer[g] = load(c->block, l, c->dtype);
}

static void compare_blocks(void *ctx, int64_t g, int64_t l) {
    Copy *c = ctx;
    double x = load(c->block, l, c->dtype), y = load(c->other, l, c->dtype);
    (void)g;
    if (c->bad < 0 && x != y && (x == x || y == y))
        c->bad = l;
}

static int64_t local_bytes(const sk_arg_desc *a) {
    return box_elems(a->global.rank, a->local) * (int64_t)sk_dtype_size((sk_dtype)a->global.dtype);
}

static void type_text(const sk_arg_desc *a, char *buf, size_t n) {
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "i32", "bool"};
    int w = snprintf(buf, n, "%s[", names[a->global.dtype]);
    for (int d = 0; d < a->global.rank && w < (int)n - 24; d++)
        w += snprintf(buf + w, n - (size_t)w, "%s%lld", d ? ", " : "", (long long)a->global.dims[d]);
    snprintf(buf + w, n - (size_t)w, "]");
}

/* NumPy's index of a box: "x[4:8, 0:6]". */
static void box_text(const char *name, int rank, const Box *b, char *buf, size_t n) {
    int w = snprintf(buf, n, "%s[", name);
    for (int d = 0; d < rank && w < (int)n - 48; d++)
        w += snprintf(buf + w, n - (size_t)w, "%s%lld:%lld", d ? ", " : "", (long long)b->start[d],
                      (long long)(b->start[d] + b->count[d]));
    snprintf(buf + w, n - (size_t)w, "]");
}

/* ---- the command line ---- */

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s (--in NAME=FILE.npy | --local-in NAME=FILE.npy) ... --out DIR\n"
            "           [--outputs gather|local] [--local-devices L] [--repeat N]\n"
            "  --local-in: FILE holds this process's part of NAME; %%p in FILE is the process index\n",
            prog);
}

static int find_param(const sk_program *p, const char *v, int len) {
    for (int k = 0; k < p->nparams; k++)
        if ((int)strlen(p->params[k].name) == len && memcmp(p->params[k].name, v, (size_t)len) == 0)
            return k;
    return -1;
}

/* --in / --local-in NAME=FILE.  0, or 1 for an error (in r->err). */
static int parse_input(Run *r, const char *opt, const char *v) {
    const char *eq = strchr(v, '=');
    int len = eq ? (int)(eq - v) : (int)strlen(v), which = eq ? find_param(r->p, v, len) : -1;
    if (which < 0) {
        fail(r, "%s '%s': '%s' has no parameter named '%.*s'", opt, v, r->p->fn, len, v);
        return 1;
    }
    if (r->file[which]) {
        fail(r, "parameter '%s' has two input files (--in or --local-in)", r->p->params[which].name);
        return 1;
    }
    r->file[which] = eq + 1;
    r->local_in[which] = strcmp(opt, "--local-in") == 0;
    return 0;
}

/* A whole number from lo to hi, else -1. */
static long number(const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    return *v && !*end && !errno && n >= lo && n <= hi ? n : -1;
}

/* Before the world exists (--local-devices decides how it is made), so
 * nothing is printed here.  0, 1 for an error (in r->err) or 2 for a usage
 * error. */
static int parse_args(Run *r, int argc, char **argv) {
    static const char *const opts[] = {"--in", "--local-in", "--out", "--outputs", "--repeat", "--local-devices"};
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        size_t o = 0;
        while (o < sizeof opts / sizeof *opts && strcmp(opt, opts[o]))
            o++;
        if (i + 1 == argc || o == sizeof opts / sizeof *opts)
            return 2;
        const char *v = argv[++i];
        if (o <= 1 && parse_input(r, opt, v))
            return 1;
        if (o == 2)
            r->out = v;
        if (o == 3 && strcmp(v, "gather") && strcmp(v, "local"))
            return 2;
        if (o == 3)
            r->local_outputs = strcmp(v, "local") == 0;
        if (o == 4 && (r->repeat = (int)number(v, 1, 1000000)) < 0)
            return 2;
        if (o == 5 && (r->local_devices = (int)number(v, 1, 1 << 16)) < 0)
            return 2;
    }
    return r->out ? 0 : 2;
}

/* One process on its own runs every device: on the threads backend always,
 * on MPI when mpirun starts one process.  (With more processes, the MPI
 * runtime checks the layout.) */
static int check_local_devices(Run *r) {
    if (!r->local_devices || sc_world_process_count(r->w) > 1 || r->local_devices == r->ndev)
        return 0;
    fail(r, "--local-devices %d: this run is one process, which runs all %d devices of the mesh (the threads "
            "backend always does); --local-devices is for MPI runs of P processes with P x L = %d",
         r->local_devices, r->ndev, r->ndev);
    return 1;
}

/* A --local-in file name with %p replaced by the process index (%% is %). */
static int expand_path(const char *pattern, int process, char *buf, size_t n) {
    size_t w = 0;
    for (const char *s = pattern; *s; s++) {
        int k = s[0] == '%' && s[1] == 'p' ? snprintf(buf + w, n - w, "%d", process)
                : s[0] == '%' && s[1] == '%' ? snprintf(buf + w, n - w, "%%") : snprintf(buf + w, n - w, "%c", *s);
        s += s[0] == '%' && (s[1] == 'p' || s[1] == '%');
        if (k < 0 || (size_t)k >= n - w)
            return -1;
        w += (size_t)k;
    }
    buf[w] = '\0';
    return 0;
}

/* ---- inputs ---- */

/* Block b of device d from `src`, an array of doubles holding the box
 * `from` of the global array. */
static void fill_block(Run *r, int i, int d, const Box *b, const double *src, const Box *from) {
    const sk_arg_desc *a = &r->p->params[i];
    int64_t at[SC_MAX_RANK];
    for (int k = 0; k < a->global.rank; k++)
        at[k] = b->start[k] - from->start[k];
    Copy c = {a->global.dtype, (double *)src, r->params[d][i], NULL, -1};
    each_in_box(a, from->count, at, b->count, to_block, &c);
}

/* A box of the global array from f, whose array starts at `origin` of the
 * global one: a malloc'd array of doubles, or NULL (r->err says why). */
static double *read_box(Run *r, int i, sk_npy_file *f, const Box *origin, const Box *box) {
    const sk_arg_desc *a = &r->p->params[i];
    char err[512];
    int64_t start[SC_MAX_RANK];
    for (int k = 0; k < a->global.rank; k++)
        start[k] = box->start[k] - origin->start[k];
    double *data = malloc((size_t)box_elems(a->global.rank, box->count) * sizeof(double) + 1);
    if (data && sk_npy_read_box(f, start, box->count, data, err, sizeof err) == 0)
        return data;
    fail(r, "--%s %s: %s", r->local_in[i] ? "local-in" : "in", a->name, data ? err : "out of memory");
    free(data);
    return NULL;
}

/* Fill this process's blocks of parameter i from f.  When the process's
 * part is a box (`part` not NULL), it is read at once, so that neighbouring
 * blocks cost one read; otherwise each block is read on its own.  Either
 * way, a block is read once per process, by its holder, and copied to the
 * process's other devices that hold it. */
static int read_blocks(Run *r, int i, sk_npy_file *f, const Box *origin, const Box *part, const int *holder) {
    const sk_arg_desc *a = &r->p->params[i];
    double *whole = part ? read_box(r, i, f, origin, part) : NULL;
    int rc = part && !whole;
    for (int d = 0; d < r->ndev && !rc; d++) {
        Box b;
        if (!sc_world_is_local(r->w, d))
            continue;
        if (!(r->params[d][i] = calloc((size_t)local_bytes(a) + 1, 1))) {
            fail(r, "out of memory");
            rc = 1;
            break;
        }
        int e = holder[block_key(&r->p->mesh, a, d)];
        if (e != d)
            memcpy(r->params[d][i], r->params[e][i], (size_t)local_bytes(a));
        else if (block_of(&r->p->mesh, a, d, &b) && whole)
            fill_block(r, i, d, &b, whole, part);
        else if (block_of(&r->p->mesh, a, d, &b)) {
            double *data = read_box(r, i, f, origin, &b);
            if (data)
                fill_block(r, i, d, &b, data, &b);
            free(data);
            rc = !data;
        }
    }
    free(whole);
    return rc;
}

/* The file of parameter i: its name (%p expanded for --local-in only: an
 * --in file is the same for every process), its dtype and its shape (the
 * global one, or this process's part). */
static sk_npy_file *open_param(Run *r, int i, const Box *part, char *path, size_t n) {
    const sk_arg_desc *a = &r->p->params[i];
    const char *opt = r->local_in[i] ? "--local-in" : "--in";
    char err[512], have[160], need[160], type[128], where[256];
    sk_npy_shape want = a->global, got;
    if (r->local_in[i])
        memcpy(want.dims, part->count, sizeof want.dims);
    if (r->local_in[i] ? expand_path(r->file[i], r->process, path, n) != 0
                       : snprintf(path, n, "%s", r->file[i]) >= (int)n) {
        fail(r, "%s %s: the file name '%s' is too long", opt, a->name, r->file[i]);
        return NULL;
    }
    sk_npy_file *f = sk_npy_open(path, a->global.dtype, &got, err, sizeof err);
    if (!f) {
        fail(r, "%s %s: %s", opt, a->name, err);
        return NULL;
    }
    if (got.rank == want.rank && memcmp(got.dims, want.dims, sizeof(int64_t) * (size_t)got.rank) == 0)
        return f;
    sk_npy_shape_text(&got, have, sizeof have);
    sk_npy_shape_text(&want, need, sizeof need);
    type_text(a, type, sizeof type);
    box_text(a->name, a->global.rank, part, where, sizeof where);
    if (r->local_in[i])
        fail(r, "--local-in %s: '%s' has shape %s, but %s is needed: process %d's part of %s (%s) is %s", a->name, path,
             have, need, r->process, a->name, type, where);
    else
        fail(r, "--in %s: '%s' has shape %s, but %s is needed", a->name, path, have, need);
    sk_npy_close(f);
    return NULL;
}

/* Read parameter i's blocks for this process's devices; with stats, say
 * how many bytes of the file that took. */
static int read_param(Run *r, int i) {
    const sk_arg_desc *a = &r->p->params[i];
    char path[4096], where[256];
    Box part, origin = {{0}, {0}};
    int *holder = local_holders(r, a), rc = 1;
    if (!holder) {
        fail(r, "out of memory");
        return 1;
    }
    int is_box = local_part(r, a, holder, &part);
    box_text(a->name, a->global.rank, &part, where, sizeof where);
    if (r->local_in[i] && !is_box)
        fail(r, "--local-in %s: process %d's part of %s is not a box for this sharding and layout (the blocks of its "
                "devices do not fill %s): use --in", a->name, r->process, a->name, where);
    sk_npy_file *f = r->local_in[i] && !is_box ? NULL : open_param(r, i, &part, path, sizeof path);
    if (f && r->local_in[i])
        origin = part;
    if (f)
        rc = read_blocks(r, i, f, &origin, is_box ? &part : NULL, holder);
    if (f && r->io_stats)
        fprintf(stderr, "io: process %d: %s %s: read %lld of %lld bytes of '%s'\n", r->process,
                r->local_in[i] ? "--local-in" : "--in", a->name, (long long)sk_npy_bytes_read(f),
                (long long)sk_npy_file_bytes(f), path);
    sk_npy_close(f);
    free(holder);
    return rc;
}

static int read_inputs(Run *r) {
    const sk_program *p = r->p;
    char type[128];
    for (int i = 0; i < p->nparams; i++) {
        type_text(&p->params[i], type, sizeof type);
        if (!r->file[i]) {
            fail(r, "no --in for parameter '%s' of '%s', which needs a .npy file of %s", p->params[i].name, p->fn,
                 type);
            return 1;
        }
        if (read_param(r, i))
            return 1;
    }
    return 0;
}

/* ---- running ---- */

/* Result blocks: this process's devices', and, when process 0 gathers the
 * results, every device's there, which collect fills. */
static int alloc_results(Run *r) {
    int all = r->root && !r->local_outputs;
    for (int i = 0; i < r->p->nresults; i++)
        for (int d = 0; d < r->ndev; d++)
            if ((all || sc_world_is_local(r->w, d)) &&
                !(r->results[d][i] = calloc((size_t)local_bytes(&r->p->results[i]) + 1, 1))) {
                fail(r, "out of memory");
                return 1;
            }
    return 0;
}

/* With --outputs local, each result's part must be a box, found before
 * anything runs. */
static int check_output_parts(Run *r) {
    for (int i = 0; r->local_outputs && i < r->p->nresults; i++) {
        const sk_arg_desc *a = &r->p->results[i];
        int *holder = local_holders(r, a);
        Box part;
        if (!holder) {
            fail(r, "out of memory");
            return 1;
        }
        int is_box = local_part(r, a, holder, &part);
        free(holder);
        if (!is_box) {
            char where[256];
            box_text(a->name, a->global.rank, &part, where, sizeof where);
            fail(r, "--outputs local: process %d's part of %s of '%s' is not a box for this sharding and layout "
                    "(the blocks of its devices do not fill %s): use --outputs gather",
                 r->process, a->name, r->p->fn, where);
            return 1;
        }
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

/* ---- outputs ---- */

/* Every copy of result i that this check sees equals its reference copy:
 * on process 0 gathering, every device's against the owner's; with
 * --outputs local, this process's devices' against the process's holder. */
static int check_result_replicas(Run *r, int i) {
    const sk_program *p = r->p;
    const sk_arg_desc *a = &p->results[i];
    int *holder = r->local_outputs ? local_holders(r, a) : NULL;
    if (r->local_outputs && !holder) {
        fail(r, "out of memory");
        return 1;
    }
    int rc = 0;
    for (int d = 0; d < r->ndev && !rc; d++) {
        int o = holder ? holder[block_key(&p->mesh, a, d)] : owner_of(&p->mesh, a, d);
        Box b;
        if ((holder && !sc_world_is_local(r->w, d)) || o == d || !block_of(&p->mesh, a, d, &b))
            continue;
        Copy c = {a->global.dtype, NULL, r->results[d][i], r->results[o][i], -1};
        each_in_box(a, a->global.dims, b.start, b.count, compare_blocks, &c);
        if ((rc = c.bad >= 0))
            fail(r, "result%d of '%s' is replicated, but its copies on devices %d and %d differ at element %lld "
                    "of the block (%.9g and %.9g): a bug in shardc or the runtime",
                 i, p->fn, o, d, (long long)c.bad, load(r->results[o][i], c.bad, a->global.dtype),
                 load(r->results[d][i], c.bad, a->global.dtype));
    }
    free(holder);
    return rc;
}

static int check_replicas(Run *r) {
    for (int i = 0; i < r->p->nresults; i++)
        if (check_result_replicas(r, i))
            return 1;
    return 0;
}

static int make_out_dir(Run *r) {
    if (mkdir(r->out, 0777) != 0 && errno != EEXIST) {
        fail(r, "cannot create '%s': %s", r->out, strerror(errno));
        return 1;
    }
    return 0;
}

/* Result i's box `part` of the global array (the whole of it, or this
 * process's part), from the blocks of the devices that `use` picks, written
 * to `path`. */
static int write_part(Run *r, int i, const Box *part, const int *use, const char *path) {
    const sk_arg_desc *a = &r->p->results[i];
    sk_npy_shape shape = a->global;
    char err[512];
    memcpy(shape.dims, part->count, sizeof shape.dims);
    double *g = calloc((size_t)box_elems(a->global.rank, part->count) + 1, sizeof(double));
    if (!g) {
        fail(r, "out of memory");
        return 1;
    }
    for (int d = 0; d < r->ndev; d++) {
        Box b;
        int64_t at[SC_MAX_RANK];
        if (!use[d] || !block_of(&r->p->mesh, a, d, &b))
            continue;
        for (int k = 0; k < a->global.rank; k++)
            at[k] = b.start[k] - part->start[k];
        Copy c = {a->global.dtype, g, r->results[d][i], NULL, -1};
        each_in_box(a, part->count, at, b.count, from_block, &c);
    }
    int rc = sk_npy_write(path, &shape, g, err, sizeof err);
    if (rc)
        fail(r, "%s", err);
    free(g);
    return rc != 0;
}

/* On process 0: each result assembled from its owners' blocks. */
static int write_results(Run *r) {
    const sk_program *p = r->p;
    int *use = malloc((size_t)r->ndev * sizeof *use), rc = !use || make_out_dir(r);
    if (!use)
        fail(r, "out of memory");
    for (int i = 0; i < p->nresults && !rc; i++) {
        const sk_arg_desc *a = &p->results[i];
        Box whole = {{0}, {0}};
        char path[4096];
        memcpy(whole.count, a->global.dims, sizeof whole.count);
        for (int d = 0; d < r->ndev; d++)
            use[d] = owner_of(&p->mesh, a, d) == d;
        snprintf(path, sizeof path, "%s/result%d.npy", r->out, i);
        rc = write_part(r, i, &whole, use, path);
    }
    free(use);
    return rc;
}

/* On every process: its part of each result, from its holders' blocks. */
static int write_local_results(Run *r) {
    const sk_program *p = r->p;
    int *use = malloc((size_t)r->ndev * sizeof *use), rc = !use || make_out_dir(r);
    if (!use)
        fail(r, "out of memory");
    for (int i = 0; i < p->nresults && !rc; i++) {
        const sk_arg_desc *a = &p->results[i];
        int *holder = local_holders(r, a);
        Box part;
        char path[4096];
        if (!holder) {
            fail(r, "out of memory");
            rc = 1;
            break;
        }
        local_part(r, a, holder, &part);             /* a box: check_output_parts said so */
        for (int d = 0; d < r->ndev; d++)
            use[d] = sc_world_is_local(r->w, d) && holder[block_key(&p->mesh, a, d)] == d;
        free(holder);
        snprintf(path, sizeof path, "%s/result%d.process%d.npy", r->out, i, r->process);
        rc = write_part(r, i, &part, use, path);
    }
    free(use);
    return rc;
}

/* Process 0 receives every device's blocks of each result. */
static int gather_results(Run *r) {
    for (int i = 0; i < r->p->nresults; i++) {
        void **blocks = malloc((size_t)r->ndev * sizeof *blocks);
        for (int d = 0; blocks && d < r->ndev; d++)
            blocks[d] = r->results[d][i];
        int rc = !blocks || sc_world_collect(r->w, blocks, (size_t)local_bytes(&r->p->results[i])) != 0;
        free(blocks);
        if (rc) {
            fail(r, "gathering result%d on process 0 failed", i);
            return 1;
        }
    }
    return 0;
}

/* --outputs gather: process 0 checks and writes everything.  --outputs
 * local: every process checks its copies, they agree that all are right,
 * and each writes its parts. */
static int write_outputs(Run *r) {
    if (!r->local_outputs) {
        if (gather_results(r))
            return 1;
        return r->root ? check_replicas(r) || write_results(r) : 0;
    }
    int rc = check_replicas(r);
    if (!sc_world_agree(r->w, rc == 0, NULL))
        return 1;
    return write_local_results(r);
}

/* ---- main ---- */

static int alloc_tables(Run *r) {
    int np = r->p->nparams, nr = r->p->nresults;
    r->params = calloc((size_t)r->ndev, sizeof(void **));
    r->results = calloc((size_t)r->ndev, sizeof(void **));
    int rc = !r->params || !r->results;
    for (int d = 0; d < r->ndev && !rc; d++) {
        r->params[d] = calloc((size_t)np + 1, sizeof(void *));
        r->results[d] = calloc((size_t)nr + 1, sizeof(void *));
        rc = !r->params[d] || !r->results[d];
    }
    if (rc)
        fail(r, "out of memory");
    return rc;
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
    free(r->params);
    free(r->results);
    free(r->file);
    free(r->local_in);
}

/* Prints r->err where it is needed: on process 0, or on another process
 * whose failure process 0 does not share. */
static int report(Run *r, int rc, int root_ok) {
    if (r->err[0] && r->root)
        fprintf(stderr, "error: %s\n", r->err);
    else if (r->err[0] && root_ok)
        fprintf(stderr, "error: process %d: %s\n", r->process, r->err);
    return rc;
}

static int io_stats_wanted(void) {
    const char *v = getenv("SHARDC_IO_STATS");
    return v && *v && strcmp(v, "0") != 0;
}

int sk_main_on(int argc, char **argv, const sk_program *p, sk_world_create create) {
    Run r = {.p = p, .io_stats = io_stats_wanted()};
    char err[512] = "", count[16];
    r.file = calloc((size_t)p->nparams + 1, sizeof(char *));
    r.local_in = calloc((size_t)p->nparams + 1, 1);
    int rc = !r.file || !r.local_in, root_ok = 1;
    if (rc)
        fail(&r, "out of memory");
    rc = rc ? rc : parse_args(&r, argc, argv);
    snprintf(count, sizeof count, "%d", r.local_devices);
    if (rc == 0 && r.local_devices && setenv("SHARDC_LOCAL_DEVICES", count, 1) != 0) {
        fail(&r, "cannot set SHARDC_LOCAL_DEVICES: %s", strerror(errno));
        rc = 1;
    }
    if (!(r.w = create(&p->mesh, err, sizeof err))) {
        if (err[0])
            fprintf(stderr, "error: %s\n", err);
        free_run(&r);
        return 1;
    }
    r.process = sc_world_process(r.w);
    r.root = r.process == 0;
    r.ndev = sc_device_count(r.w);
    if (rc == 2 && r.root)
        usage(argc > 0 ? argv[0] : "prog");
    rc = rc ? rc : check_local_devices(&r);
    rc = rc ? rc : alloc_tables(&r);
    rc = rc ? rc : read_inputs(&r);
    rc = rc ? rc : alloc_results(&r);
    rc = rc ? rc : check_output_parts(&r);
    /* Every process checks its inputs and layout: they agree before any runs
     * (a process that failed says why; the others stop with status 1). */
    if (sc_world_agree(r.w, rc == 0, &root_ok))
        rc = run_devices(&r);
    else if (!rc)
        rc = 1;
    rc = rc ? rc : write_outputs(&r);
    rc = report(&r, rc, root_ok);
    free_run(&r);
    sc_world_destroy(r.w);     /* after a failed run, on MPI: aborts every process */
    return rc;
}
