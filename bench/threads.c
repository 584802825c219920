/* bench/threads.c: loops on a device's OpenMP threads (docs/kernels.md,
 * "Threads inside a device").  Not part of `make check`.
 *
 *     build/bench/threads [T [TABLES]]   (T threads against 1, default all cores;
 *                                         TABLES: which of 1, 2, 3, default 123)
 *
 * Three tables, each time the best of several batches, the runs of 1 and T
 * threads alternating so that drift of the machine hits both alike:
 *
 * 1. The threshold: a parallel region forced on every size against the
 *    plain loop on one thread, for the cheapest loop (y = a + b, memory
 *    bound) and an expensive one (e = exp(x - m)): where T threads start to
 *    pay is where SK_PARALLEL_MIN belongs.
 * 2. The loops as shardc runs them, 1 thread against T: a fused chain as
 *    generated code writes it (SK_PARALLEL_FOR: softmax's
 *    e = exp(x - max), layernorm's y = (x - mu) * r * g + b), sk_binary,
 *    sk_reduce over rows and over columns, sk_transpose and sk_broadcast.
 * 3. One thread, SK_PARALLEL_FOR against the plain loop it replaces: the
 *    cost of the branch when a device has one thread (devices >= cores).
 *
 * Built with -DOLD_LIB against a kernel library without threads (the
 * kernels of table 2 on one thread only), it compares the kernels' one-
 * thread times across versions. */
#include "shardc_lib.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

enum { COLS = 512, BATCHES = 7 };

static float *x, *m, *g, *b, *y, *r;
static int64_t n;

/* ---- the loops ---- */

typedef enum { ADD_PLAIN, ADD_FORCED, EXP_PLAIN, EXP_FORCED, SOFTMAX, LAYERNORM, SOFTMAX_PLAIN, LAYERNORM_PLAIN,
               BINARY, REDUCE_ROWS, REDUCE_COLS, TRANSPOSE, BROADCAST } kind;
static const char *const names[] = {
    "y = a + b, plain", "y = a + b, forced", "e = exp(x - m), plain", "e = exp(x - m), forced",
    "fused e = exp(x - max)", "fused (x - mu) * r * g + b", "plain e = exp(x - max)", "plain (x - mu) * r * g + b",
    "sk_binary add", "sk_reduce sum of rows", "sk_reduce sum of columns", "sk_transpose [R,512] {1,0}",
    "sk_broadcast [512] to [R,512]"};

/* The chains as generated code writes them, in functions of their own
 * taking their buffers as parameters, as the generated device functions
 * do (the loops in run() read global pointers). */
#ifndef OLD_LIB
__attribute__((noinline)) static void softmax_fused(int64_t len, float *y_, const float *x_, const float *m_) {
    SK_PARALLEL_FOR(len, for (int64_t i = 0; i < len; i++) {
        float subtract_i = x_[i] - m_[i];
        y_[i] = expf(subtract_i);
    });
}

__attribute__((noinline)) static void layernorm_fused(int64_t len, float *y_, const float *x_, const float *m_,
                                                      const float *r_, const float *g_, const float *b_) {
    SK_PARALLEL_FOR(len, for (int64_t i = 0; i < len; i++) {
        float d_i = x_[i] - m_[i];
        float s_i = d_i * r_[i];
        float t_i = s_i * g_[i];
        y_[i] = t_i + b_[i];
    });
}
#endif

__attribute__((noinline)) static void softmax_plain(int64_t len, float *y_, const float *x_, const float *m_) {
    for (int64_t i = 0; i < len; i++) {
        float subtract_i = x_[i] - m_[i];
        y_[i] = expf(subtract_i);
    }
}

__attribute__((noinline)) static void layernorm_plain(int64_t len, float *y_, const float *x_, const float *m_,
                                                      const float *r_, const float *g_, const float *b_) {
    for (int64_t i = 0; i < len; i++) {
        float d_i = x_[i] - m_[i];
        float s_i = d_i * r_[i];
        float t_i = s_i * g_[i];
        y_[i] = t_i + b_[i];
    }
}

static void run(kind k) {
    int64_t rows = n / COLS;
    switch (k) {
    case ADD_PLAIN:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] + m[i];
        break;
    case ADD_FORCED:
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] + m[i];
        break;
    case EXP_PLAIN:
        for (int64_t i = 0; i < n; i++) {
            float d = x[i] - m[i];
            y[i] = expf(d);
        }
        break;
    case EXP_FORCED:
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float d = x[i] - m[i];
            y[i] = expf(d);
        }
        break;
#ifndef OLD_LIB
    case SOFTMAX: softmax_fused(n, y, x, m); break;   /* as shardc emits it */
    case LAYERNORM: layernorm_fused(n, y, x, m, r, g, b); break;
#endif
    case SOFTMAX_PLAIN: softmax_plain(n, y, x, m); break;   /* what shardc emitted before */
    case LAYERNORM_PLAIN: layernorm_plain(n, y, x, m, r, g, b); break;
    case BINARY: sk_binary(NULL, SK_ADD, SK_F32, n, x, m, y); break;
    case REDUCE_ROWS: sk_reduce(NULL, SK_F32, SC_SHAPE(rows, COLS), x, 1, (const int[]){1}, SC_SUM, y); break;
    case REDUCE_COLS: sk_reduce(NULL, SK_F32, SC_SHAPE(rows, COLS), x, 1, (const int[]){0}, SC_SUM, y); break;
    case TRANSPOSE: sk_transpose(NULL, SK_F32, SC_SHAPE(rows, COLS), x, (const int[]){1, 0}, y); break;
    case BROADCAST: sk_broadcast(NULL, SK_F32, SC_SHAPE(COLS), x, SC_SHAPE(rows, COLS), (const int[]){1}, y); break;
    default: break;
    }
}

/* Seconds per call of k on `threads` threads: calls in batches of about
 * 20 ms, the best batch. */
static double per_call(kind k, int threads, int reps) {
    omp_set_num_threads(threads);
    double best = 1e30;
    for (int bt = 0; bt < BATCHES; bt++) {
        double t0 = now_s();
        for (int i = 0; i < reps; i++)
            run(k);
        double t = (now_s() - t0) / reps;
        best = t < best ? t : best;
    }
    return best;
}

static int reps_for(kind k) {
    omp_set_num_threads(1);
    run(k);
    double t0 = now_s();
    run(k);
    double t = now_s() - t0;
    int reps = (int)(0.02 / (t > 1e-7 ? t : 1e-7));
    return reps < 1 ? 1 : reps > 100000 ? 100000 : reps;
}

/* k against k1 (one thread each unless threads_a/b say otherwise). */
static void row(kind a, int ta, kind bk, int tb) {
    int reps = reps_for(a);
    double best_a = 1e30, best_b = 1e30;
    for (int round = 0; round < 3; round++) {   /* alternate a and b */
        double ta_s = per_call(a, ta, reps), tb_s = per_call(bk, tb, reps);
        best_a = ta_s < best_a ? ta_s : best_a;
        best_b = tb_s < best_b ? tb_s : best_b;
    }
    printf("| %s | %lld | %.1f | %.1f | %.2f |\n", names[bk], (long long)n, best_a * 1e6, best_b * 1e6, best_a / best_b);
    fflush(stdout);
}

static const int64_t big[] = {65536, 262144, 1 << 20, 4 << 20};

#ifndef OLD_LIB
static const int64_t small[] = {4096, 8192, 16384, 32768, 65536, 131072, 262144, 1 << 20};

static void table1(int threads) {
    printf("## 1. A parallel region forced on every size: 1 thread (plain loop) against %d\n\n", threads);
    printf("| loop | elements | 1 thread, us | %d threads, us | speedup |\n| --- | --- | --- | --- | --- |\n", threads);
    for (int s = 0; s < (int)(sizeof small / sizeof *small); s++) {
        n = small[s];
        row(ADD_PLAIN, 1, ADD_FORCED, threads);
        row(EXP_PLAIN, 1, EXP_FORCED, threads);
    }
}

static void table2(int threads) {
    printf("\n## 2. The loops as shardc runs them (SK_PARALLEL_MIN = %d): 1 thread against %d\n\n",
           SK_PARALLEL_MIN, threads);
    printf("| loop | elements | 1 thread, us | %d threads, us | speedup |\n| --- | --- | --- | --- | --- |\n", threads);
    for (int s = 0; s < (int)(sizeof big / sizeof *big); s++) {
        n = big[s];
        for (kind k = SOFTMAX; k <= BROADCAST; k++)
            if (k != SOFTMAX_PLAIN && k != LAYERNORM_PLAIN)
                row(k, 1, k, threads);
    }
}

static void table3(void) {
    printf("\n## 3. One thread: the plain loop against SK_PARALLEL_FOR\n\n");
    printf("| loop | elements | plain, us | SK_PARALLEL_FOR, us | plain / SK_PARALLEL_FOR |\n"
           "| --- | --- | --- | --- | --- |\n");
    for (int s = 0; s < (int)(sizeof big / sizeof *big); s++) {
        n = big[s];
        row(SOFTMAX_PLAIN, 1, SOFTMAX, 1);
        row(LAYERNORM_PLAIN, 1, LAYERNORM, 1);
    }
}
#endif

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_num_procs();
    const char *tables = argc > 2 ? argv[2] : "123";
    if (threads < 1)
        threads = 1;
    int64_t max = 4 << 20;
    x = malloc((size_t)max * 4), m = malloc((size_t)max * 4), g = malloc((size_t)max * 4);
    b = malloc((size_t)max * 4), y = malloc((size_t)max * 4), r = malloc((size_t)max * 4);
    for (int64_t i = 0; i < max; i++) {
        x[i] = (float)sin((double)i), m[i] = (float)cos((double)i * 0.7), g[i] = 1.0f + 0.5f * (float)sin(i * 0.3);
        b[i] = 0.25f, r[i] = 0.9f, y[i] = 0;
    }
#ifndef OLD_LIB
    if (strchr(tables, '1'))
        table1(threads);
    if (strchr(tables, '2'))
        table2(threads);
    if (strchr(tables, '3'))
        table3();
#else
    (void)tables;
    printf("## The kernels on one thread (a library without threads)\n\n");
    printf("| kernel | elements | 1 thread, us | 1 thread, us | ratio |\n| --- | --- | --- | --- | --- |\n");
    for (int s = 0; s < (int)(sizeof big / sizeof *big); s++) {
        n = big[s];
        for (kind k = BINARY; k <= BROADCAST; k++)
            row(k, 1, k, 1);
    }
#endif
    return 0;
}
