/* bench/gemm_shapes.c: shardc's f32 GEMM (sk_dot) over a grid of shapes,
 * for the cost model's GEMM efficiency by shape (docs/autoshard.md, "GEMM
 * efficiency").  `gemm_shapes THREADS REF M1,.. N1,.. K1,.. [LAYOUT,..]`
 * times out[m,n] = x[m,k] * w[k,n] for every m, n, k of the three lists in
 * each layout and prints `dot_efficiency LAYOUT M N K EFF` per shape, EFF
 * its rate over the rate of the REF^3 product in layout nn (measured before
 * the grids and after them, the better; one reference for every layout;
 * printed last as `reference REF GFLOP/S`).  A LAYOUT (nn unless given) is
 * how BLAS reads the operands: tn stores x as [k,m] (a weight gradient's
 * x^T dy), nt w as [n,k], tt both.
 * THREADS threads run each shape at once, each on its own operands with
 * one BLAS thread, as THREADS threads-backend devices do on this machine
 * (lib/host/driver.c gives each device its share of the cores: one, with more
 * devices than cores), sharing the cores and their caches.  A shape's rate
 * is its FLOPs over the CPU time its threads took (CLOCK_THREAD_CPUTIME_ID,
 * summed), not the wall time: on a shared machine other processes take the
 * cores for a while, which would read as a slow shape, whereas the caches
 * the threads evict from each other's, the cost of sharing, stay in their
 * CPU time.  Each thread makes one warm-up call, then as many calls as make
 * 5e7 FLOPs (at least 2, but 1 from 1e9: the grid's large shapes are most
 * of its time); best of ROUNDS rounds (a single round of a large shape
 * read 0.46 where two read 0.85, on a machine other VMs shared). */
#include "internal.h"   /* sk_alloc_zeroed */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_DIMS = 8, MAX_THREADS = 64, ROUNDS = 2 };

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
    float *x, *w, *out;
    int64_t m, n, k;
    int lhs_t, rhs_t;            /* x stored [k,m], w stored [n,k] */
    int calls;
    double cpu;                  /* CPU seconds of its timed calls */
} Worker;

static pthread_barrier_t start;

static void call(const Worker *t) {
    sk_dot_dims d = {0, 1, {0}, {0}, {!t->lhs_t}, {t->rhs_t}};
    sc_shape x = t->lhs_t ? SC_SHAPE(t->k, t->m) : SC_SHAPE(t->m, t->k);
    sc_shape w = t->rhs_t ? SC_SHAPE(t->n, t->k) : SC_SHAPE(t->k, t->n);
    if (sk_dot(NULL, SK_F32, x, t->x, w, t->w, &d, t->out, NULL) != 0) {
        fprintf(stderr, "gemm_shapes: sk_dot failed\n");
        exit(1);
    }
}

static void *work(void *arg) {
    Worker *t = arg;
    sk_blas_threads(1);
    call(t);                     /* warm-up */
    pthread_barrier_wait(&start);
    double t0 = cpu_s();
    for (int i = 0; i < t->calls; i++)
        call(t);
    t->cpu = cpu_s() - t0;
    return NULL;
}

/* GFLOP/s of [m,k] x [k,n] per CPU second, nt threads at once. */
static double rate(Worker *w, int nt, int64_t m, int64_t n, int64_t k, int layout) {
    double flops = 2.0 * (double)m * (double)n * (double)k, best = 1e30;
    int calls = flops >= 1e9 ? 1 : flops >= 2.5e7 ? 2 : (int)(5e7 / flops) + 1;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t tid[MAX_THREADS];
        pthread_barrier_init(&start, NULL, (unsigned)nt);
        for (int i = 0; i < nt; i++) {
            w[i].m = m, w[i].n = n, w[i].k = k, w[i].calls = calls;
            w[i].lhs_t = layout >> 1, w[i].rhs_t = layout & 1;
            if (pthread_create(&tid[i], NULL, work, &w[i]) != 0)
                exit(1);
        }
        double t = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(tid[i], NULL);
            t += w[i].cpu;
        }
        best = t < best ? t : best;
        pthread_barrier_destroy(&start);
    }
    return flops * calls * nt / best * 1e-9;
}

/* A comma-separated list of positive dims; returns how many, 0 if bad. */
static int dims_of(const char *list, int64_t *d) {
    int n = 0;
    for (char *end; n < MAX_DIMS; list = end + 1) {
        d[n] = strtoll(list, &end, 10);
        if (end == list || d[n] <= 0 || (*end && *end != ','))
            return 0;
        n++;
        if (!*end)
            return n;
    }
    return 0;
}

enum { LAYOUTS = 4 };
static const char *const layout_name[LAYOUTS] = {"nn", "nt", "tn", "tt"};

/* A comma-separated list of layouts into their indices; how many, 0 if bad. */
static int layouts_of(const char *list, int *l) {
    int n = 0;
    for (const char *p = list; n < LAYOUTS; p += 3) {
        l[n] = 0;
        while (l[n] < LAYOUTS && strncmp(p, layout_name[l[n]], 2) != 0)
            l[n]++;
        if (l[n] == LAYOUTS || (p[2] && p[2] != ','))
            return 0;
        n++;
        if (!p[2])
            return n;
    }
    return 0;
}

int main(int argc, char **argv) {
    int given = argc == 6 || argc == 7, layout[LAYOUTS] = {0};
    int nt = given ? atoi(argv[1]) : 0, nd[3] = {0}, nl = argc == 7 ? layouts_of(argv[6], layout) : 1;
    int64_t dim[3][MAX_DIMS], ref = given ? atoll(argv[2]) : 0;
    for (int a = 0; a < 3 && given; a++)
        nd[a] = dims_of(argv[a + 3], dim[a]);
    if (nt < 1 || nt > MAX_THREADS || ref <= 0 || !nd[0] || !nd[1] || !nd[2] || !nl) {
        fprintf(stderr, "usage: gemm_shapes THREADS REF M1,M2,.. N1,N2,.. K1,K2,.. [LAYOUT,..] (at most %d dims "
                "each; layouts nn, nt, tn, tt)\n", MAX_DIMS);
        return 2;
    }
    /* Operands of the largest [M,K], [K,N] and [M,N]. */
    int64_t big[3] = {ref, ref, ref};
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < nd[a]; i++)
            big[a] = dim[a][i] > big[a] ? dim[a][i] : big[a];
    size_t sx = (size_t)(big[0] * big[2]), sw = (size_t)(big[2] * big[1]), so = (size_t)(big[0] * big[1]);
    Worker w[MAX_THREADS];
    for (int t = 0; t < nt; t++) {
        /* Where a program's parameters lie (the driver's blocks, on 2 MiB
         * pages): malloc's start 16 bytes into a page, and oneDNN's no-copy
         * kernels ran at 53 GFLOP/s on those where page-aligned operands ran
         * at 30 (docs/kernels.md, "Padded rows"). */
        w[t].x = sk_alloc_zeroed(sx * sizeof(float));
        w[t].w = sk_alloc_zeroed(sw * sizeof(float));
        w[t].out = sk_alloc_zeroed(so * sizeof(float));
        if (!w[t].x || !w[t].w || !w[t].out)
            return 1;
        /* Written, not calloc's zero pages: a GEMM reading one shared zero
         * page ran at half speed at some shapes. */
        for (size_t i = 0; i < sx; i++)
            w[t].x[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        for (size_t i = 0; i < sw; i++)
            w[t].w[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    static double r[LAYOUTS][MAX_DIMS][MAX_DIMS][MAX_DIMS];
    double r0 = rate(w, nt, ref, ref, ref, 0);
    for (int l = 0; l < nl; l++)
        for (int a = 0; a < nd[0]; a++)
            for (int b = 0; b < nd[1]; b++)
                for (int c = 0; c < nd[2]; c++)
                    r[l][a][b][c] = rate(w, nt, dim[0][a], dim[1][b], dim[2][c], layout[l]);
    double again = rate(w, nt, ref, ref, ref, 0);   /* the machine is shared: the better of two */
    r0 = again > r0 ? again : r0;
    for (int l = 0; l < nl; l++)
        for (int a = 0; a < nd[0]; a++)
            for (int b = 0; b < nd[1]; b++)
                for (int c = 0; c < nd[2]; c++)
                    printf("dot_efficiency %s %lld %lld %lld %.3f\n", layout_name[layout[l]], (long long)dim[0][a],
                           (long long)dim[1][b], (long long)dim[2][c], r[l][a][b][c] / r0);
    printf("reference %lld %.2f\n", (long long)ref, r0);   /* GFLOP per CPU second */
    for (int t = 0; t < nt; t++)
        free(w[t].x), free(w[t].w), free(w[t].out);
    return 0;
}
