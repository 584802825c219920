/* bench/mlp_blas.c: the global math of samples/mlp.tdsl written directly
 * against the fastest GEMM library measured here (oneDNN; bench/gemm.c
 * compares them), the baseline of bench/report.py's MLP section:
 *
 *   h = x w_in (dnnl_sgemm)   a = gelu(h) (a vectorized loop split over the cores)
 *   out = a w_out (dnnl_sgemm)
 *
 * oneDNN uses OpenMP's default thread count (every core, or
 * OMP_NUM_THREADS).  Reads x, w_in and w_out from .npy files, runs the
 * whole function RUNS times and prints to stderr, as programs built by
 * `shardc build` do with --repeat,
 *
 *   time: best X s, median Y s over N runs
 *
 * and writes the result to DIR/result0.npy.
 *
 * Usage: mlp_blas X.npy W_IN.npy W_OUT.npy DIR [RUNS] */
#include "shardc_lib.h"
#include "shardc_npy.h"

#include <oneapi/dnnl/dnnl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static float *read_f32(const char *path, int rank, int64_t *dims) {
    sk_npy_shape want = {SK_F32, (uint8_t)rank, {0}}, got;
    memcpy(want.dims, dims, (size_t)rank * sizeof *dims);
    double *d;
    char err[512];
    if (sk_npy_read(path, &want, &got, &d, err, sizeof err) != 0) {
        fprintf(stderr, "mlp_blas: %s\n", err);
        exit(1);
    }
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) {
        fprintf(stderr, "mlp_blas: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)d[i];
    free(d);
    return f;
}

/* gelu, the tanh approximation, as shardc computes it in f32. */
typedef struct {
    float *x;
    int64_t lo, hi;
} Part;

/* The vectorized form shardc uses (shardc_elementwise.def), compiled for
 * the CPU's widest vectors like the generated loops; in blocks of a fixed
 * count, which -O2's cheap vectorizer needs. */
static inline float gelu1(float v) {
    return v / (1.0f + sk_exp_f32(-1.5957691216057308f * (v + 0.044715f * v * v * v)));
}

SK_ISA_CLONES static void gelu_range(float *restrict x, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + 64 <= hi; i += 64)
        for (int j = 0; j < 64; j++)
            x[i + j] = gelu1(x[i + j]);
    for (; i < hi; i++)
        x[i] = gelu1(x[i]);
}

static void *gelu_part(void *arg) {
    Part *p = arg;
    gelu_range(p->x, p->lo, p->hi);
    return NULL;
}

static void gelu(float *x, int64_t n, int threads) {
    pthread_t tid[64];
    Part part[64];
    for (int t = 0; t < threads; t++) {
        part[t] = (Part){x, n * t / threads, n * (t + 1) / threads};
        if (t > 0)
            pthread_create(&tid[t], NULL, gelu_part, &part[t]);
    }
    gelu_part(&part[0]);
    for (int t = 1; t < threads; t++)
        pthread_join(tid[t], NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: mlp_blas X.npy W_IN.npy W_OUT.npy DIR [RUNS]\n");
        return 2;
    }
    int runs = argc > 5 ? atoi(argv[5]) : 3;
    if (runs < 1 || runs > 1000)
        runs = 3;
    /* The shapes come from x and w_in: x is [B, D], w_in [D, F]. */
    sk_npy_shape sx, sw;
    double *tmp;
    char err[512];
    if (sk_npy_read(argv[1], NULL, &sx, &tmp, err, sizeof err) != 0 || sx.rank != 2) {
        fprintf(stderr, "mlp_blas: %s: %s\n", argv[1], sx.rank != 2 ? "not a matrix" : err);
        return 1;
    }
    free(tmp);
    if (sk_npy_read(argv[2], NULL, &sw, &tmp, err, sizeof err) != 0 || sw.rank != 2) {
        fprintf(stderr, "mlp_blas: %s: %s\n", argv[2], sw.rank != 2 ? "not a matrix" : err);
        return 1;
    }
    free(tmp);
    int64_t B = sx.dims[0], D = sx.dims[1], F = sw.dims[1];
    float *x = read_f32(argv[1], 2, (int64_t[]){B, D});
    float *w_in = read_f32(argv[2], 2, (int64_t[]){D, F});
    float *w_out = read_f32(argv[3], 2, (int64_t[]){F, D});
    float *h = malloc((size_t)(B * F) * sizeof *h), *out = malloc((size_t)(B * D) * sizeof *out);
    double *t = malloc((size_t)runs * sizeof *t);
    if (!h || !out || !t) {
        fprintf(stderr, "mlp_blas: out of memory\n");
        return 1;
    }
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    cores = cores < 1 ? 1 : cores > 64 ? 64 : cores;
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        if (dnnl_sgemm('N', 'N', B, F, D, 1.0f, x, D, w_in, F, 0.0f, h, F) != dnnl_success) {
            fprintf(stderr, "mlp_blas: dnnl_sgemm failed\n");
            return 1;
        }
        gelu(h, B * F, cores);
        if (dnnl_sgemm('N', 'N', B, D, F, 1.0f, h, F, w_out, D, 0.0f, out, D) != dnnl_success) {
            fprintf(stderr, "mlp_blas: dnnl_sgemm failed\n");
            return 1;
        }
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    fprintf(stderr, "time: best %.6f s, median %.6f s over %d run%s\n", t[0], t[runs / 2], runs,
            runs == 1 ? "" : "s");

    double *res = malloc((size_t)(B * D) * sizeof *res);
    if (!res)
        return 1;
    for (int64_t i = 0; i < B * D; i++)
        res[i] = out[i];
    mkdir(argv[4], 0777);
    char path[4096];
    snprintf(path, sizeof path, "%s/result0.npy", argv[4]);
    sk_npy_shape so = {SK_F32, 2, {B, D}};
    if (sk_npy_write(path, &so, res, err, sizeof err) != 0) {
        fprintf(stderr, "mlp_blas: %s\n", err);
        return 1;
    }
    free(res);
    free(x), free(w_in), free(w_out), free(h), free(out), free(t);
    return 0;
}
