/* driver_io.c: sk_main's arrays on disk and on the devices (driver.h).
 * Which block of an array each device holds, and which part of it this
 * process holds; the inputs read from --in / --local-in files, each block
 * once per process; the results gathered to process 0 or kept local, their
 * replicas checked, and written.  Apart from driver.c so that the run
 * itself reads without the index arithmetic. */
#include "driver.h"
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- blocks and parts ---- */

/* A box of an array: the elements [start[d], start[d] + count[d]). */
typedef struct {
    int64_t start[SC_MAX_RANK], count[SC_MAX_RANK];
} Box;

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
 * others copy (or are checked against) it.  NULL (r->err says so) when out
 * of memory. */
static int *local_holders(Run *r, const sk_arg_desc *a) {
    int64_t n = block_keys(&r->p->mesh, a);
    int *first = malloc((size_t)n * sizeof *first);
    if (!first)
        sk_run_fail(r, "out of memory");
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

/* The whole global array as a box. */
static Box whole_box(const sk_arg_desc *a) {
    Box b = {{0}, {0}};
    memcpy(b.count, a->global.dims, sizeof b.count);
    return b;
}

/* Visit the elements of a block's box `b` (its real data), inside `outer`,
 * an array of doubles holding that box of the global array, by runs along
 * the last dim, consecutive in both: f(ctx, g, l, n) for the n elements
 * from linear index g in `outer` and l in the block.  The index arithmetic
 * and the call once a run, not once an element: a GPT step's 12 M
 * parameters went through it at every start and every result. */
typedef void (*visit_fn)(void *ctx, int64_t g, int64_t l, int64_t n);

static void each_in_box(const sk_arg_desc *a, const Box *outer, const Box *b, visit_fn f, void *ctx) {
    int rank = a->global.rank;
    int64_t idx[SC_MAX_RANK] = {0}, n = box_elems(rank, b->count), run = rank ? b->count[rank - 1] : 1;
    for (int64_t e = 0; e < n; e += run) {
        int64_t g = 0, l = 0;
        for (int d = 0; d < rank; d++) {
            g = g * outer->count[d] + b->start[d] - outer->start[d] + idx[d];
            l = l * a->local[d] + idx[d];
        }
        f(ctx, g, l, run);
        for (int d = rank - 2; d >= 0 && ++idx[d] == b->count[d]; d--)
            idx[d] = 0;
    }
}

/* Blocks hold their dtype; files and parts travel as doubles, which hold
 * every value exactly but i64's beyond 2^53 (docs/cli.md: lib/host/npy.c refuses
 * to read those, and from_block to write one a double does not hold). */
static double load(const void *x, int64_t i, int dt) {
    switch (dt) {
    case SK_F32: return ((const float *)x)[i];
    case SK_F64: return ((const double *)x)[i];
    case SK_BF16: return sc_bf16_to_float(((const uint16_t *)x)[i]);
    case SK_F16: return sc_f16_to_float(((const uint16_t *)x)[i]);
    case SK_I32: return ((const int32_t *)x)[i];
    case SK_U32: return ((const uint32_t *)x)[i];
    case SK_I64: return (double)((const int64_t *)x)[i];
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
    case SK_U32: ((uint32_t *)x)[i] = (uint32_t)v; break;
    case SK_I64: ((int64_t *)x)[i] = sk_to_i64(v); break;
    case SK_U8: ((uint8_t *)x)[i] = (uint8_t)v; break;
    default: ((uint8_t *)x)[i] = v != 0; break;
    }
}

typedef struct {
    int dtype;
    double *outer;                    /* the global array, a process's part or a box read from a file */
    void *block;
    const void *other;                /* replica check: the reference copy's block */
    int64_t bad;                      /* first differing local index, or -1 */
} Copy;

/* A run of n elements (f32, the common dtype, without a switch per element). */
static void to_block(void *ctx, int64_t g, int64_t l, int64_t n) {
    Copy *c = ctx;
    if (c->dtype == SK_F32)
        for (int64_t i = 0; i < n; i++)
            ((float *)c->block)[l + i] = (float)c->outer[g + i];
    else
        for (int64_t i = 0; i < n; i++)
            store(c->block, l + i, c->dtype, c->outer[g + i]);
}

static void from_block(void *ctx, int64_t g, int64_t l, int64_t n) {
    Copy *c = ctx;
    if (c->dtype == SK_F32) {
        for (int64_t i = 0; i < n; i++)
            c->outer[g + i] = ((const float *)c->block)[l + i];
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        c->outer[g + i] = load(c->block, l + i, c->dtype);
        /* An i64 that the double does not hold (the writer's sk_to_i64 gives
         * INT64_MAX back from 2^63) would be written rounded: c->bad says so. */
        if (c->dtype == SK_I64 && c->bad < 0 && sk_to_i64(c->outer[g + i]) != ((const int64_t *)c->block)[l + i])
            c->bad = g + i;
    }
}

/* Equal bits are equal values (a NaN's too): only a run that differs is
 * compared value by value, where +0 equals -0 and a NaN any NaN. */
static void compare_blocks(void *ctx, int64_t g, int64_t l, int64_t n) {
    Copy *c = ctx;
    size_t size = sk_dtype_size((sk_dtype)c->dtype);
    (void)g;
    if (memcmp((const char *)c->block + (size_t)l * size, (const char *)c->other + (size_t)l * size,
               (size_t)n * size) == 0)
        return;
    for (int64_t i = l; i < l + n && c->bad < 0; i++) {
        double x = load(c->block, i, c->dtype), y = load(c->other, i, c->dtype);
        if (x != y && (x == x || y == y))
            c->bad = i;
    }
}

int64_t sk_local_bytes(const sk_arg_desc *a) {
    return box_elems(a->global.rank, a->local) * (int64_t)sk_dtype_size((sk_dtype)a->global.dtype);
}

static void type_text(const sk_arg_desc *a, char *buf, size_t n) {
    static const char *const names[] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [SK_##ID] = name,
#include "../../compiler/ir/dtypes.def"
#undef DTYPE
    };
    int w = snprintf(buf, n, "%s[", names[a->global.dtype]);
    for (int d = 0; d < a->global.rank && w < (int)n - 24; d++)
        w += snprintf(buf + w, n - (size_t)w, "%s%lld", d ? ", " : "", (long long)a->global.dims[d]);
    snprintf(buf + w, n - (size_t)w, "]");
}

void sk_arg_text(const sk_program *p, const sk_arg_desc *a, char *buf, size_t n) {
    static const char *const names[] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [SK_##ID] = name,
#include "../../compiler/ir/dtypes.def"
#undef DTYPE
    };
    const sc_mesh *m = &p->mesh;
    int w = snprintf(buf, n, "%s[", names[a->global.dtype]);
    for (int d = 0; d < a->global.rank && w < (int)n - 64; d++) {
        int axes = 0;
        w += snprintf(buf + w, n - (size_t)w, "%s%lld", d ? ", " : "", (long long)a->global.dims[d]);
        for (int ax = 0; ax < m->naxes; ax++)
            axes += a->dim[ax] == d;
        for (int k = 0; k < axes && w < (int)n - 64; k++)     /* the axes splitting d, major first */
            for (int ax = 0; ax < m->naxes; ax++)
                if (a->dim[ax] == d && a->pos[ax] == k)
                    w += snprintf(buf + w, n - (size_t)w, "%s%s%s", k ? "," : axes > 1 ? "@(" : "@",
                                  m->names[ax] ? m->names[ax] : "?", k == axes - 1 && axes > 1 ? ")" : "");
    }
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

/* The option that named parameter i's file. */
static const char *in_opt(const Run *r, int i) {
    return r->local_in[i] ? "--local-in" : "--in";
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
    Copy c = {a->global.dtype, (double *)src, r->params[d][i], NULL, -1};
    each_in_box(a, from, b, to_block, &c);
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
    sk_run_fail(r, "%s %s: %s", in_opt(r, i), a->name, data ? err : "out of memory");
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
        if (!(r->params[d][i] = sk_alloc_zeroed((size_t)sk_local_bytes(a) + 1))) {
            sk_run_fail(r, "out of memory");
            rc = 1;
            break;
        }
        int e = holder[block_key(&r->p->mesh, a, d)];
        if (e != d) {
            memcpy(r->params[d][i], r->params[e][i], (size_t)sk_local_bytes(a));
            continue;
        }
        if (!block_of(&r->p->mesh, a, d, &b))
            continue;                                   /* all padding: stays zero */
        if (whole)
            fill_block(r, i, d, &b, whole, part);
        else {
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
    const char *opt = in_opt(r, i);
    char err[512], have[160], need[160], type[128], where[256], file[4096];
    sk_npy_shape want = a->global, got;
    sk_npy_source src = {path, NULL, r->cast};
    if (r->local_in[i])
        memcpy(want.dims, part->count, sizeof want.dims);
    /* NAME=FILE.npz and NAME=FILE.npz:KEY name an array of an archive. */
    if ((r->local_in[i] ? expand_path(r->file[i], r->process, file, sizeof file) != 0
                        : snprintf(file, sizeof file, "%s", r->file[i]) >= (int)sizeof file) ||
        sk_npy_split_npz(file, a->name, path, n, &src.member) < 0) {
        sk_run_fail(r, "%s %s: the file name '%s' is too long", opt, a->name, r->file[i]);
        return NULL;
    }
    sk_npy_file *f = sk_npy_open_source(&src, a->global.dtype, &got, err, sizeof err);
    if (!f) {
        sk_run_fail(r, "%s %s: %s", opt, a->name, err);
        return NULL;
    }
    if (got.rank == want.rank && memcmp(got.dims, want.dims, sizeof(int64_t) * (size_t)got.rank) == 0)
        return f;
    sk_npy_shape_text(&got, have, sizeof have);
    sk_npy_shape_text(&want, need, sizeof need);
    type_text(a, type, sizeof type);
    box_text(a->name, a->global.rank, part, where, sizeof where);
    if (r->local_in[i])
        sk_run_fail(r, "--local-in %s: '%s' has shape %s, but %s is needed: process %d's part of %s (%s) is %s",
                    a->name, path, have, need, r->process, a->name, type, where);
    else
        sk_run_fail(r, "--in %s: '%s' has shape %s, but %s is needed", a->name, path, have, need);
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
    if (!holder)
        return 1;
    int is_box = local_part(r, a, holder, &part);
    box_text(a->name, a->global.rank, &part, where, sizeof where);
    if (r->local_in[i] && !is_box)
        sk_run_fail(r, "--local-in %s: process %d's part of %s is not a box for this sharding and layout (the blocks "
                       "of its devices do not fill %s): use --in", a->name, r->process, a->name, where);
    sk_npy_file *f = r->local_in[i] && !is_box ? NULL : open_param(r, i, &part, path, sizeof path);
    if (f && r->local_in[i])
        origin = part;
    if (f)
        rc = read_blocks(r, i, f, &origin, is_box ? &part : NULL, holder);
    if (f && !rc && !r->cast && r->root && sk_npy_file_converted(f)) {
        char type[128];
        type_text(a, type, sizeof type);
        fprintf(stderr, "warning: %s %s: '%s' holds %s data, read as %s (every value is exact); --cast says so and "
                        "silences this\n", in_opt(r, i), a->name, path, sk_npy_file_converted(f), type);
    }
    if (f && r->io_stats)
        fprintf(stderr, "io: process %d: %s %s: read %lld of %lld bytes of '%s'\n", r->process, in_opt(r, i),
                a->name, (long long)sk_npy_bytes_read(f), (long long)sk_npy_file_bytes(f), path);
    sk_npy_close(f);
    free(holder);
    return rc;
}

int sk_read_inputs(Run *r) {
    const sk_program *p = r->p;
    char type[128];
    for (int i = 0; i < p->nparams; i++) {
        type_text(&p->params[i], type, sizeof type);
        if (!r->file[i]) {
            sk_run_fail(r, "no --in for parameter '%s' of '%s', which needs a .npy file of %s", p->params[i].name,
                        p->fn, type);
            return 1;
        }
        if (read_param(r, i))
            return 1;
    }
    return 0;
}

/* ---- outputs ---- */

/* Result blocks: this process's devices', and, when process 0 gathers the
 * results, every device's there, which collect fills. */
static int alloc_results(Run *r) {
    int all = r->root && (!r->local_outputs || r->checkpoint);     /* a checkpoint gathers */
    for (int i = 0; i < r->p->nresults; i++)
        for (int d = 0; d < r->ndev; d++)
            if ((all || sc_world_is_local(r->w, d)) &&
                !(r->results[d][i] = sk_alloc_zeroed((size_t)sk_local_bytes(&r->p->results[i]) + 1))) {
                sk_run_fail(r, "out of memory");
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
        if (!holder)
            return 1;
        int is_box = local_part(r, a, holder, &part);
        free(holder);
        if (!is_box) {
            char where[256];
            box_text(a->name, a->global.rank, &part, where, sizeof where);
            sk_run_fail(r, "--outputs local: process %d's part of %s of '%s' is not a box for this sharding and layout "
                           "(the blocks of its devices do not fill %s): use --outputs gather",
                        r->process, a->name, r->p->fn, where);
            return 1;
        }
    }
    return 0;
}

int sk_prepare_outputs(Run *r) {
    return alloc_results(r) || check_output_parts(r);
}

/* Every copy of result i that this check sees equals its reference copy:
 * on process 0 gathering, every device's against the owner's; with
 * --outputs local, this process's devices' against the process's holder. */
static int check_result_replicas(Run *r, int i) {
    const sk_program *p = r->p;
    const sk_arg_desc *a = &p->results[i];
    int *holder = r->local_outputs ? local_holders(r, a) : NULL;
    if (r->local_outputs && !holder)
        return 1;
    Box whole = whole_box(a);
    int rc = 0;
    for (int d = 0; d < r->ndev && !rc; d++) {
        int o = holder ? holder[block_key(&p->mesh, a, d)] : owner_of(&p->mesh, a, d);
        Box b;
        if ((holder && !sc_world_is_local(r->w, d)) || o == d || !block_of(&p->mesh, a, d, &b))
            continue;
        Copy c = {a->global.dtype, NULL, r->results[d][i], r->results[o][i], -1};
        each_in_box(a, &whole, &b, compare_blocks, &c);
        if ((rc = c.bad >= 0))
            sk_run_fail(r, "result%d of '%s' is replicated, but its copies on devices %d and %d differ at element %lld "
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
    if (!r->npz_out && mkdir(r->out, 0777) != 0 && errno != EEXIST) {
        sk_run_fail(r, "cannot create '%s': %s", r->out, strerror(errno));
        return 1;
    }
    return 0;
}

/* Result i's box `part` of the global array (the whole of it, or this
 * process's part), from the blocks of the devices that `use` picks, written
 * to `path`. */
static double *assemble_part(Run *r, int i, const Box *part, const int *use) {
    const sk_arg_desc *a = &r->p->results[i];
    double *g = calloc((size_t)box_elems(a->global.rank, part->count) + 1, sizeof(double));
    if (!g) {
        sk_run_fail(r, "out of memory");
        return NULL;
    }
    for (int d = 0; d < r->ndev; d++) {
        Box b;
        if (!use[d] || !block_of(&r->p->mesh, a, d, &b))
            continue;
        Copy c = {a->global.dtype, g, r->results[d][i], NULL, -1};
        each_in_box(a, part, &b, from_block, &c);
        if (c.bad >= 0) {
            sk_run_fail(r, "result %d: element %lld of the written part is an i64 beyond 2^53 that a double does "
                        "not hold; .npy output carries values as doubles (docs/cli.md)", i, (long long)c.bad);
            free(g);
            return NULL;
        }
    }
    return g;
}

/* The files of one write_results: each written whole to its temporary
 * name (PATH.tmpPID) first, and all renamed to their final names only once
 * every one is written, so that a result that fails leaves none of the
 * others in DIR under a final name (their temporary files are removed). */
typedef struct {
    int n;
    char **tmp, **path;
} Pending;

static int pending_add(Run *r, Pending *w, const char *path) {
    char tmp[4096 + 32];
    if (sk_temp_path(path, tmp, sizeof tmp)) {
        sk_run_fail(r, "cannot write '%s': the path is too long", path);
        return 1;
    }
    if (!(w->tmp[w->n] = strdup(tmp)) || !(w->path[w->n] = strdup(path))) {
        free(w->tmp[w->n]);
        sk_run_fail(r, "out of memory");
        return 1;
    }
    w->n++;
    return 0;
}

/* rc == 0: every file renamed into place; else every temporary removed.
 * A signal that came while they were written (write_results holds them)
 * removes them too; one that comes while they are renamed waits until all
 * are: either way, none or all of them take their final names. */
static int pending_finish(Run *r, Pending *w, int rc) {
    if (!rc && sk_signals_caught()) {
        sk_run_fail(r, "stopped by signal %d before the results were written", sk_signals_caught());
        rc = 1;
    }
    for (int k = 0; k < w->n; k++) {
        if (!rc && sk_commit(w->tmp[k], w->path[k]) != 0) {
            sk_run_fail(r, "cannot write '%s': %s", w->path[k], strerror(errno));
            rc = 1;
        }
        if (rc)
            remove(w->tmp[k]);
        free(w->tmp[k]);
        free(w->path[k]);
    }
    free(w->tmp);
    free(w->path);
    return rc;
}

static int write_part(Run *r, int i, const Box *part, const int *use, const char *path, Pending *w) {
    const sk_arg_desc *a = &r->p->results[i];
    sk_npy_shape shape = a->global;
    char err[512];
    memcpy(shape.dims, part->count, sizeof shape.dims);
    double *g = assemble_part(r, i, part, use);
    if (!g || pending_add(r, w, path)) {
        free(g);
        return 1;
    }
    int rc = sk_npy_write_temp(path, w->tmp[w->n - 1], &shape, g, err, sizeof err);
    if (rc)
        sk_run_fail(r, "%s", err);
    free(g);
    return rc != 0;
}

/* Which part of result i this process writes, from which devices' blocks,
 * to which file: with --outputs gather (on process 0), the whole array from
 * each block's owner; with --outputs local, the process's part (a box:
 * check_output_parts said so) from its holders.  0, or 1 when out of
 * memory. */
static int result_part(Run *r, int i, Box *part, int *use, char *path, size_t n) {
    const sk_arg_desc *a = &r->p->results[i];
    const sc_mesh *m = &r->p->mesh;
    if (!r->local_outputs) {
        *part = whole_box(a);
        for (int d = 0; d < r->ndev; d++)
            use[d] = owner_of(m, a, d) == d;
        snprintf(path, n, "%s/result%d.npy", r->out, i);
        return 0;
    }
    int *holder = local_holders(r, a);
    if (!holder)
        return 1;
    local_part(r, a, holder, part);
    for (int d = 0; d < r->ndev; d++)
        use[d] = sc_world_is_local(r->w, d) && holder[block_key(m, a, d)] == d;
    free(holder);
    snprintf(path, n, "%s/result%d.process%d.npy", r->out, i, r->process);
    return 0;
}

/* --out FILE.npz (on process 0, gathering): one archive holding result0,
 * result1, ..., and each result again under the name it is returned as
 * (return loss, w: loss, w), the first of a name; with --steps a carried
 * result's name is its parameter's, so the final parameters are there. */
static int write_archive(Run *r) {
    const sk_program *p = r->p;
    int n = p->nresults, k = 0, rc = 0;
    sk_npz_entry *e = calloc(2 * (size_t)n + 1, sizeof *e);
    char (*names)[32] = calloc((size_t)n + 1, sizeof *names), err[512];
    double **g = calloc((size_t)n + 1, sizeof *g);
    int *use = malloc(((size_t)r->ndev + 1) * sizeof *use);
    rc = !e || !names || !g || !use;
    if (rc)
        sk_run_fail(r, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        Box part;
        char path[16];
        rc = result_part(r, i, &part, use, path, sizeof path) || !(g[i] = assemble_part(r, i, &part, use));
        snprintf(names[i], sizeof names[i], "result%d", i);
        e[k++] = (sk_npz_entry){names[i], p->results[i].global, g[i]};
    }
    for (int i = 0; i < n && !rc; i++) {
        const char *name = p->results[i].var;
        int taken = !name;
        for (int j = 0; j < k && !taken; j++)
            taken = strcmp(e[j].name, name) == 0;
        if (!taken)
            e[k++] = (sk_npz_entry){name, p->results[i].global, g[i]};
    }
    if (!rc && (rc = sk_npz_write(r->out, e, k, err, sizeof err) != 0))
        sk_run_fail(r, "%s", err);
    for (int i = 0; g && i < n; i++)
        free(g[i]);
    free(g);
    free(e);
    free(names);
    free(use);
    return rc;
}

static int write_files(Run *r);

/* The results, then (with --steps) each carried one again as the final
 * value of its parameter: DIR/NAME.npy, or DIR/NAME.process{p}.npy, all
 * or none of them (Pending), with the signals that end a process held
 * meanwhile. */
static int write_results(Run *r) {
    if (r->npz_out)
        return write_archive(r);
    sk_signals_hold();
    int rc = write_files(r);
    sk_signals_release();
    return rc;
}

static int write_files(Run *r) {
    int n = 2 * r->p->nresults + 1;
    Pending w = {0, calloc((size_t)n, sizeof(char *)), calloc((size_t)n, sizeof(char *))};
    int *use = malloc((size_t)r->ndev * sizeof *use), rc = !use || !w.tmp || !w.path || make_out_dir(r);
    if (!use || !w.tmp || !w.path)
        sk_run_fail(r, "out of memory");
    for (int i = 0; i < r->p->nresults && !rc; i++) {
        Box part;
        char path[4096];
        rc = result_part(r, i, &part, use, path, sizeof path) || write_part(r, i, &part, use, path, &w);
    }
    for (int i = 0; r->steps && i < r->p->nresults && !rc; i++) {
        Box part;
        char path[4096];
        const char *name = r->p->params[r->carry[i] >= 0 ? r->carry[i] : 0].name;
        if (r->carry[i] < 0 || (rc = result_part(r, i, &part, use, path, sizeof path)))
            continue;
        if (r->local_outputs)
            snprintf(path, sizeof path, "%s/%s.process%d.npy", r->out, name, r->process);
        else
            snprintf(path, sizeof path, "%s/%s.npy", r->out, name);
        rc = write_part(r, i, &part, use, path, &w);
    }
    free(use);
    return pending_finish(r, &w, rc);
}

int sk_gather_results(Run *r) {
    for (int i = 0; i < r->p->nresults; i++) {
        void **blocks = malloc((size_t)r->ndev * sizeof *blocks);
        for (int d = 0; blocks && d < r->ndev; d++)
            blocks[d] = r->results[d][i];
        int rc = !blocks || sc_world_collect(r->w, blocks, (size_t)sk_local_bytes(&r->p->results[i])) != 0;
        free(blocks);
        if (rc) {
            sk_run_fail(r, "gathering result%d on process 0 failed", i);
            return 1;
        }
    }
    return 0;
}

double *sk_result_array(Run *r, int i) {
    const sk_arg_desc *a = &r->p->results[i];
    int *use = malloc(((size_t)r->ndev + 1) * sizeof *use);
    if (!use) {
        sk_run_fail(r, "out of memory");
        return NULL;
    }
    for (int d = 0; d < r->ndev; d++)
        use[d] = owner_of(&r->p->mesh, a, d) == d;
    Box whole = whole_box(a);
    double *g = assemble_part(r, i, &whole, use);
    free(use);
    return g;
}

/* --outputs gather: process 0 checks and writes everything.  --outputs
 * local: every process checks its copies, they agree that all are right,
 * and each writes its parts. */
int sk_write_outputs(Run *r) {
    if (!r->local_outputs) {
        if (sk_gather_results(r))
            return 1;
        return r->root ? check_replicas(r) || write_results(r) : 0;
    }
    int rc = check_replicas(r);
    if (!sc_world_agree(r->w, rc == 0, NULL))
        return 1;
    return write_results(r);
}


/* ---- global arrays in memory (the global API, session.c) ---- */

/* Box b of an array between the global array (row-major, of a's global
 * dims, in a's dtype) and a device's block (of a's local dims): a run of
 * the last dim at a time, so that a row is one memcpy.  to_block: from the
 * global array into the block; else back. */
static void copy_box(const sk_arg_desc *a, const Box *b, void *global, void *block, int to_block) {
    int rank = a->global.rank;
    size_t es = sk_dtype_size((sk_dtype)a->global.dtype);
    int64_t idx[SC_MAX_RANK] = {0}, rows = rank ? box_elems(rank - 1, b->count) : 1;
    size_t run = (size_t)(rank ? b->count[rank - 1] : 1) * es;
    for (int64_t k = 0; k < rows; k++) {
        int64_t g = 0, l = 0;
        for (int d = 0; d < rank; d++) {
            int64_t i = d < rank - 1 ? idx[d] : 0;
            g = g * a->global.dims[d] + b->start[d] + i;
            l = l * a->local[d] + i;
        }
        char *gp = (char *)global + (size_t)g * es, *lp = (char *)block + (size_t)l * es;
        memcpy(to_block ? lp : gp, to_block ? gp : lp, run);
        for (int d = rank - 2; d >= 0 && ++idx[d] == b->count[d]; d--)
            idx[d] = 0;
    }
}

/* Parameter i's blocks of this process's devices from global: each block
 * copied once per process, by its holder, and the replicas copied whole
 * from it.  Blocks are allocated zeroed at the first call, so the padding
 * of an uneven dim is zeros; later calls rewrite only the data. */
static int param_from(Run *r, int i, const void *global) {
    const sk_arg_desc *a = &r->p->params[i];
    int *holder = local_holders(r, a);
    if (!holder)
        return 1;
    int rc = 0;
    for (int d = 0; d < r->ndev && !rc; d++) {
        Box b;
        if (!sc_world_is_local(r->w, d))
            continue;
        if (!r->params[d][i] && !(r->params[d][i] = sk_alloc_zeroed((size_t)sk_local_bytes(a) + 1))) {
            sk_run_fail(r, "out of memory");
            rc = 1;
            break;
        }
        int e = holder[block_key(&r->p->mesh, a, d)];
        if (e != d)
            memcpy(r->params[d][i], r->params[e][i], (size_t)sk_local_bytes(a));
        else if (block_of(&r->p->mesh, a, d, &b))
            copy_box(a, &b, (void *)global, r->params[d][i], 1);
    }
    free(holder);
    return rc;
}

int sk_params_from(Run *r, const void *const *global) {
    for (int i = 0; i < r->p->nparams; i++)
        if (global[i] && param_from(r, i, global[i]))   /* NULL: the blocks hold it (sk_session_carry) */
            return 1;
    return 0;
}

/* Process 0 assembles each result from the block of the device at
 * coordinate 0 of the axes that do not split it, as sk_main writes its
 * files; the replicas are not compared (sk_main does that: here it would
 * cost every call a pass over every copy). */
int sk_results_to(Run *r, void *const *global) {
    if (sc_world_process_count(r->w) > 1 && sk_gather_results(r))
        return 1;
    for (int i = 0; r->root && i < r->p->nresults; i++) {
        const sk_arg_desc *a = &r->p->results[i];
        for (int d = 0; d < r->ndev; d++) {
            Box b;
            if (owner_of(&r->p->mesh, a, d) == d && block_of(&r->p->mesh, a, d, &b))
                copy_box(a, &b, global[i], r->results[d][i], 0);
        }
    }
    /* Every process made the call with the same parameters and expects the
     * results: process 0's whole arrays go to the others. */
    for (int i = 0; sc_world_process_count(r->w) > 1 && i < r->p->nresults; i++) {
        const sk_arg_desc *a = &r->p->results[i];
        int64_t bytes = box_elems(a->global.rank, a->global.dims) * (int64_t)sk_dtype_size((sk_dtype)a->global.dtype);
        if (sc_world_share(r->w, global[i], (size_t)bytes) != 0) {
            sk_run_fail(r, "sending result%d from process 0 to the others failed", i);
            return 1;
        }
    }
    return 0;
}
