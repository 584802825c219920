/* bench/gemm.c: the f32 GEMM engines against each other on one einsum
 * out[m,n] = x[m,k] * w[k,n] (m = n = k = 2048 unless given), at 1 thread
 * and at every core:
 *   sk_dot       shardc's kernel (lib/dot.c), with the engine it chose;
 *   dnnl_sgemm   oneDNN called directly;
 *   cblas_sgemm  OpenBLAS called directly, with the kernels it picked
 *                (bench/report.py runs this program a second time with
 *                OPENBLAS_CORETYPE set from the ISA, for OpenBLAS's best);
 * plus the bf16 einsum through sk_dot (oneDNN's matmul, or widened to f32).
 * Each engine runs its rounds in a row (alternating would leave one
 * library's idle threads spinning on the cores while the other runs); best
 * of RUNS rounds after one warm-up round, and the whole program after a
 * second of GEMMs: the first engine measured ran 15% slow without it (the
 * first 0.8 s of GEMMs on a fresh process run at 165-175 GFLOP/s here, then
 * 200-210).  Prints one line per
 * figure, `gemm THREADS NAME GFLOP/S`, which bench/report.py reads. */
#include "shardc_lib.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { RUNS = 5, ENGINES = 3 };

void omp_set_num_threads(int n);

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static const char *const engine_name[ENGINES] = {"sk_dot", "dnnl_sgemm", "cblas_sgemm"};

static void one(int e, int dim, const float *x, const float *w, float *out) {
    sk_dot_dims d = {0, 1, {0}, {0}, {1}, {0}};
    if (e == 0 && sk_dot(NULL, SK_F32, SC_SHAPE(dim, dim), x, SC_SHAPE(dim, dim), w, &d, out, NULL) != 0) {
        fprintf(stderr, "gemm: sk_dot failed\n");
        exit(1);
    }
    if (e == 1 && dnnl_sgemm('N', 'N', dim, dim, dim, 1.0f, x, dim, w, dim, 0.0f, out, dim) != dnnl_success) {
        fprintf(stderr, "gemm: dnnl_sgemm failed\n");
        exit(1);
    }
    if (e == 2)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1.0f, x, dim, w, dim, 0.0f, out, dim);
}

static void warm_up(int dim, const float *x, const float *w, float *out) {
    sk_blas_threads(1);
    for (double t0 = now_s(); now_s() - t0 < 1.0;)
        one(1, dim, x, w, out);
}

static void measure(int threads, int dim, const float *x, const float *w, float *out) {
    sk_blas_threads(threads);   /* OpenBLAS's and this thread's OpenMP (oneDNN's) */
    double best[ENGINES] = {1e30, 1e30, 1e30};
    for (int e = 0; e < ENGINES; e++)
        for (int r = 0; r < RUNS + 1; r++) {
            double t0 = now_s();
            one(e, dim, x, w, out);
            double t = now_s() - t0;
            if (r > 0 && t < best[e])
                best[e] = t;
        }
    for (int e = 0; e < ENGINES; e++)
        printf("gemm %d %s %.1f\n", threads, engine_name[e], 2.0 * dim * dim * dim / best[e] * 1e-9);
    fflush(stdout);
}

/* The bf16 einsum through sk_dot, one thread, best of 3, with a workspace
 * bound as the driver binds one to each device (a CPU without bf16
 * instructions widens the operands into it). */
static void measure_bf16(int dim, const float *x, const float *w) {
    size_t sz = (size_t)dim * dim;
    uint16_t *xb = malloc(sz * 2), *wb = malloc(sz * 2), *ob = malloc(sz * 2);
    if (!xb || !wb || !ob)
        exit(1);
    sk_convert(NULL, SK_F32, SK_BF16, (int64_t)sz, x, xb);
    sk_convert(NULL, SK_F32, SK_BF16, (int64_t)sz, w, wb);
    sk_dot_dims d = {0, 1, {0}, {0}, {1}, {0}};
    double best = 1e30;
    sk_blas_threads(1);   /* measure() left every core set */
    sk_workspace *ws = sk_workspace_new();
    sk_workspace_bind(ws);
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        if (sk_dot(NULL, SK_BF16, SC_SHAPE(dim, dim), xb, SC_SHAPE(dim, dim), wb, &d, ob, NULL) != 0) {
            fprintf(stderr, "gemm: sk_dot bf16 failed\n");
            exit(1);
        }
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    printf("gemm 1 sk_dot_bf16 %.1f\n", 2.0 * dim * dim * dim / best * 1e-9);
    sk_workspace_bind(NULL);
    sk_workspace_free(ws);
    free(xb), free(wb), free(ob);
}

int main(int argc, char **argv) {
    int dim = argc > 1 ? atoi(argv[1]) : 2048;
    size_t sz = (size_t)dim * dim;
    float *x = malloc(sz * sizeof *x), *w = malloc(sz * sizeof *w), *out = malloc(sz * sizeof *out);
    if (dim <= 0 || !x || !w || !out)
        return 1;
    for (size_t i = 0; i < sz; i++) {
        x[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        w[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    char engine[512];
    sk_gemm_engine(engine, sizeof engine);
    printf("kernels %s\nopenblas_core %s\n", engine, openblas_get_corename());
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    warm_up(dim, x, w, out);
    measure(1, dim, x, w, out);
    if (cores > 1)
        measure(cores, dim, x, w, out);
    measure_bf16(dim < 1024 ? dim : 1024, x, w);
    free(x), free(w), free(out);
    return 0;
}
