/* The main() of generated programs (shardc_main.h): .npy inputs split into
 * each device's block, every device run on the threads backend, results
 * assembled from the blocks and written as .npy files. */
#include "shardc_main.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const sk_program *p;
    void ***params, ***results;      /* [device][i] */
} Run;

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

/* Copy the box between the global doubles and a device's block. */
static void copy_box(const sk_arg_desc *a, const int64_t *start, const int64_t *box, double *global, void *block,
                     int to_block) {
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
        if (to_block)
            store(block, l, a->global.dtype, global[g]);
        else
            global[g] = load(block, l, a->global.dtype);
        for (int d = rank - 1; d >= 0 && ++idx[d] == box[d]; d--)
            idx[d] = 0;
    }
}

static int64_t local_bytes(const sk_arg_desc *a) {
    int64_t n = 1;
    for (int d = 0; d < a->global.rank; d++)
        n *= a->local[d];
    return n * (int64_t)sk_dtype_size((sk_dtype)a->global.dtype);
}

static int64_t global_elems(const sk_arg_desc *a) {
    int64_t n = 1;
    for (int d = 0; d < a->global.rank; d++)
        n *= a->global.dims[d];
    return n;
}

static void print_type(const sk_arg_desc *a) {
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "i32", "bool"};
    fprintf(stderr, "%s[", names[a->global.dtype]);
    for (int d = 0; d < a->global.rank; d++)
        fprintf(stderr, "%s%lld", d ? ", " : "", (long long)a->global.dims[d]);
    fputc(']', stderr);
}

static int usage(const char *prog) {
    fprintf(stderr, "usage: %s --in NAME=FILE.npy ... --out DIR\n", prog);
    return 2;
}

int sk_main(int argc, char **argv, const sk_program *p) {
    const char *out = NULL, **file = calloc((size_t)p->nparams + 1, sizeof(char *));
    if (!file)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 == argc || (strcmp(argv[i], "--in") != 0 && strcmp(argv[i], "--out") != 0))
            return usage(argv[0]);
        const char *v = argv[++i];
        if (strcmp(argv[i - 1], "--out") == 0) {
            out = v;
            continue;
        }
        const char *eq = strchr(v, '=');
        int which = -1;
        for (int k = 0; eq && k < p->nparams; k++)
            if (strlen(p->params[k].name) == (size_t)(eq - v) && memcmp(p->params[k].name, v, (size_t)(eq - v)) == 0)
                which = k;
        if (which < 0) {
            fprintf(stderr, "error: --in '%s': '%s' has no parameter named '%.*s'\n", v, p->fn,
                    eq ? (int)(eq - v) : (int)strlen(v), v);
            return 1;
        }
        if (file[which]) {
            fprintf(stderr, "error: --in gives parameter '%s' twice\n", p->params[which].name);
            return 1;
        }
        file[which] = eq + 1;
    }
    if (!out)
        return usage(argv[0]);
    int ndev = 1;
    for (int a = 0; a < p->mesh.naxes; a++)
        ndev *= p->mesh.sizes[a];
    int np = p->nparams, nr = p->nresults, rc = 0;
    double **global = calloc((size_t)(np + nr) + 1, sizeof(double *));
    Run run = {p, calloc((size_t)ndev, sizeof(void **)), calloc((size_t)ndev, sizeof(void **))};
    for (int d = 0; d < ndev; d++) {
        run.params[d] = calloc((size_t)np + 1, sizeof(void *));
        run.results[d] = calloc((size_t)nr + 1, sizeof(void *));
    }
    char err[512];
    for (int i = 0; i < np && !rc; i++) {
        sk_npy_shape got;
        if (!file[i]) {
            fprintf(stderr, "error: no --in for parameter '%s' of '%s', which needs a .npy file of ", p->params[i].name,
                    p->fn);
            print_type(&p->params[i]);
            fputc('\n', stderr);
            rc = 1;
        } else if (sk_npy_read(file[i], &p->params[i].global, &got, &global[i], err, sizeof err)) {
            fprintf(stderr, "error: --in %s: %s\n", p->params[i].name, err);
            rc = 1;
        }
        for (int d = 0; d < ndev && !rc; d++) {
            int64_t start[SC_MAX_RANK], box[SC_MAX_RANK];
            if (!(run.params[d][i] = calloc((size_t)local_bytes(&p->params[i]) + 1, 1)))
                rc = 1;
            else if (block_box(&p->mesh, &p->params[i], d, start, box))
                copy_box(&p->params[i], start, box, global[i], run.params[d][i], 1);
        }
    }
    for (int i = 0; i < nr && !rc; i++)
        for (int d = 0; d < ndev && !rc; d++)
            if (!(run.results[d][i] = calloc((size_t)local_bytes(&p->results[i]) + 1, 1)))
                rc = 1;
    sc_world *w = NULL;
    if (!rc && !(w = sc_threads_create(&p->mesh, err, sizeof err))) {
        fprintf(stderr, "error: %s\n", err);
        rc = 1;
    }
    if (!rc && sc_run(w, body, &run) != 0) {
        fprintf(stderr, "error: running '%s': %s\n", p->fn, sc_world_error(w));
        rc = 1;
    }
    sc_world_destroy(w);
    for (int i = 0; i < nr && !rc; i++) {
        const sk_arg_desc *a = &p->results[i];
        if (!(global[np + i] = calloc((size_t)global_elems(a) + 1, sizeof(double)))) {
            rc = 1;
            break;
        }
        for (int d = 0; d < ndev; d++) {
            int owner = 1;                /* the copy at coordinate 0 of the axes that do not split it */
            for (int ax = 0; ax < p->mesh.naxes; ax++)
                owner &= a->dim[ax] >= 0 || coord(&p->mesh, d, ax) == 0;
            int64_t start[SC_MAX_RANK], box[SC_MAX_RANK];
            if (owner && block_box(&p->mesh, a, d, start, box))
                copy_box(a, start, box, global[np + i], run.results[d][i], 0);
        }
    }
    if (!rc && mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: cannot create '%s': %s\n", out, strerror(errno));
        rc = 1;
    }
    for (int i = 0; i < nr && !rc; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/result%d.npy", out, i);
        if (sk_npy_write(path, &p->results[i].global, global[np + i], err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            rc = 1;
        }
    }
    for (int d = 0; d < ndev; d++) {
        for (int i = 0; i < np; i++)
            free(run.params[d][i]);
        for (int i = 0; i < nr; i++)
            free(run.results[d][i]);
        free(run.params[d]);
        free(run.results[d]);
    }
    for (int i = 0; i < np + nr; i++)
        free(global[i]);
    free(global);
    free(run.params);
    free(run.results);
    free(file);
    return rc;
}
