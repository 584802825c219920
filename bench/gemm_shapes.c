/* bench/gemm_shapes.c: shardc's f32 GEMM (sk_dot) on one thread over a
 * grid of shapes, for the cost model's GEMM efficiency by shape
 * (docs/autoshard.md, `dot_efficiency`).  `gemm_shapes REF D1 D2 ...`
 * times out[m,n] = x[m,k] * w[k,n] for every m, n, k among D1 D2 ... and
 * prints `dot_efficiency M N K EFF` per shape, EFF being its GFLOP/s over
 * the GFLOP/s of the REF^3 product, and first `reference REF GFLOP/S`.
 * One thread, as each threads-backend device of `make bench` runs its
 * GEMMs (lib/driver.c gives each device its share of the cores: one, with
 * more devices than cores).  Each shape: one warm-up call, then calls until
 * 3 have run and 20 ms have passed, the best of them. */
#include "shardc_lib.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { MAX_DIMS = 8, MIN_CALLS = 3 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* GFLOP/s of sk_dot on [m,k] x [k,n]; x, w, out hold at least that many. */
static double rate(int64_t m, int64_t n, int64_t k, const float *x, const float *w, float *out) {
    sk_dot_dims d = {0, 1, {0}, {0}, {1}, {0}};
    double best = 1e30, spent = 0;
    for (int calls = 0; calls <= MIN_CALLS || spent < 0.02; calls++) {   /* call 0 warms up */
        double t0 = now_s();
        if (sk_dot(SK_F32, SC_SHAPE(m, k), x, SC_SHAPE(k, n), w, &d, out, NULL) != 0) {
            fprintf(stderr, "gemm_shapes: sk_dot failed\n");
            exit(1);
        }
        double t = now_s() - t0;
        if (calls > 0) {
            spent += t;
            best = t < best ? t : best;
        }
    }
    return 2.0 * (double)m * (double)n * (double)k / best * 1e-9;
}

int main(int argc, char **argv) {
    int nd = argc - 2;
    int64_t dim[MAX_DIMS], top = argc > 1 ? atoll(argv[1]) : 0;
    if (nd < 1 || nd > MAX_DIMS || top <= 0) {
        fprintf(stderr, "usage: gemm_shapes REF D1 [D2 ... D%d]\n", MAX_DIMS);
        return 2;
    }
    for (int i = 0; i < nd; i++) {
        dim[i] = atoll(argv[i + 2]);
        if (dim[i] <= 0)
            return 2;
        if (dim[i] > top)
            top = dim[i];
    }
    size_t sz = (size_t)top * (size_t)top;
    float *x = malloc(sz * sizeof *x), *w = malloc(sz * sizeof *w), *out = malloc(sz * sizeof *out);
    if (!x || !w || !out)
        return 1;
    for (size_t i = 0; i < sz; i++) {
        x[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        w[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    sk_blas_threads(1);
    int64_t ref = atoll(argv[1]);
    double r0 = rate(ref, ref, ref, x, w, out);
    printf("reference %lld %.2f\n", (long long)ref, r0);
    for (int a = 0; a < nd; a++)
        for (int b = 0; b < nd; b++)
            for (int c = 0; c < nd; c++)
                printf("dot_efficiency %lld %lld %lld %.3f\n", (long long)dim[a], (long long)dim[b], (long long)dim[c],
                       rate(dim[a], dim[b], dim[c], x, w, out) / r0);
    free(x), free(w), free(out);
    return 0;
}
