/* bench/coll_threads.c: the threads backend's all-reduce (sum f32),
 * all-gather and all-to-all on a flat mesh of DEVICES devices (8 unless
 * given), from 1 KiB to 64 MiB per device, and the machine's STREAM copy
 * rate on min(DEVICES, cores) threads (the memory-bandwidth bound of
 * bench/report.py).
 *
 * SIZE is the bytes of each device's result: all-reduce sends and receives
 * SIZE; all-gather sends SIZE/DEVICES and receives SIZE; all-to-all sends
 * and receives SIZE.  For each size every device runs the collective `iters`
 * times after one warm-up call; a collective returns only when every member
 * has finished it, so device 0's clock over the loop divided by `iters` is
 * the time of one.  Best of REPS such loops.  Prints one line per
 * measurement:
 *
 *   stream-copy THREADS BYTES_PER_S
 *   threads KIND SIZE SECONDS ITERS
 *
 * Usage: coll_threads [MAX_BYTES [MIN_BYTES [KIND [DEVICES]]]] (default 64 MiB,
 * 1 KiB, all three kinds ("all"), 8 devices; at most 64).  The world takes
 * its options from the environment (SHARDC_BIND, SHARDC_TIMEOUT). */
#include "shardc_rt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAXDEV = 64, REPS = 5 };
static int NDEV = 8;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- STREAM copy (c[i] = a[i], 8-byte elements), one array pair per thread ---- */

typedef struct {
    double *a, *c;
    size_t n;
    pthread_barrier_t *bar;
    double best;
} Stream;

static void *stream_thread(void *arg) {
    Stream *s = arg;
    for (size_t i = 0; i < s->n; i++)
        s->a[i] = 1.0 + (double)(i & 7), s->c[i] = 0.0;
    s->best = 1e30;
    for (int r = 0; r < 6; r++) {
        pthread_barrier_wait(s->bar);
        double t0 = now_s();
        double *restrict c = s->c;
        const double *restrict a = s->a;
        for (size_t i = 0; i < s->n; i++)
            c[i] = a[i];
        pthread_barrier_wait(s->bar);   /* the copy takes as long as the slowest thread */
        double t = now_s() - t0;
        if (r > 0 && t < s->best)
            s->best = t;
    }
    return NULL;
}

/* Bytes read + written per second by `threads` threads copying 64 MiB each. */
static double stream_copy(int threads) {
    Stream s[MAXDEV];
    pthread_t tid[MAXDEV];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    size_t n = (64u << 20) / sizeof(double);
    for (int t = 0; t < threads; t++) {
        s[t] = (Stream){malloc(n * sizeof(double)), malloc(n * sizeof(double)), n, &bar, 0};
        if (!s[t].a || !s[t].c) {
            fprintf(stderr, "coll_threads: out of memory\n");
            exit(1);
        }
        pthread_create(&tid[t], NULL, stream_thread, &s[t]);
    }
    double best = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        best = s[t].best > best ? s[t].best : best;
        free(s[t].a);
        free(s[t].c);
    }
    pthread_barrier_destroy(&bar);
    return 2.0 * (double)n * sizeof(double) * threads / best;
}

/* ---- collectives ---- */

typedef enum { ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, NKIND } Kind;
static const char *const kind_name[NKIND] = {"all-reduce", "all-gather", "all-to-all"};

typedef struct {
    Kind kind;
    int64_t bytes;          /* per device result */
    int iters;
    float *send[MAXDEV], *recv[MAXDEV];
    double best;            /* seconds per collective, written by device 0 */
} Bench;

static int one(sc_device *dev, Bench *b, int d) {
    int64_t n = b->bytes / 4;
    switch (b->kind) {
    case ALL_REDUCE:
        return sc_all_reduce(dev, SC_AXES(0), SC_F32, SC_SUM, b->send[d], b->recv[d], n);
    case ALL_GATHER:
        return sc_all_gather(dev, SC_AXES(0), SC_F32, SC_SHAPE(n / NDEV), 0, b->send[d], b->recv[d]);
    default:
        return sc_all_to_all(dev, SC_AXES(0), SC_F32, SC_SHAPE(n), 0, 0, b->send[d], b->recv[d]);
    }
}

static int body(sc_device *dev, void *arg) {
    Bench *b = arg;
    int d = sc_device_id(dev);
    int64_t n = b->bytes / 4;
    for (int64_t i = 0; i < n; i++)       /* each device touches its own pages */
        b->send[d][i] = (float)((i + d) % 97) * 0.25f, b->recv[d][i] = 0.0f;
    if (one(dev, b, d) != 0)              /* warm-up */
        return 1;
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        for (int i = 0; i < b->iters; i++)
            if (one(dev, b, d) != 0)
                return 1;
        double t = (now_s() - t0) / b->iters;
        if (d == 0 && t < b->best)
            b->best = t;
    }
    return 0;
}

/* The results of the last run must be right: a cheap spot check. */
static int check(const Bench *b) {
    int64_t n = b->bytes / 4;
    for (int d = 0; d < NDEV; d++)
        for (int64_t i = 0; i < n; i += n / 7 + 1) {
            double want;
            if (b->kind == ALL_REDUCE) {
                want = 0;
                for (int j = 0; j < NDEV; j++)
                    want += (double)((i + j) % 97) * 0.25;
            } else if (b->kind == ALL_GATHER) {
                int64_t blk = n / NDEV, j = i / blk;
                want = (double)((i % blk + j) % 97) * 0.25;
            } else {
                int64_t blk = n / NDEV, j = i / blk;
                want = (double)((d * blk + i % blk + j) % 97) * 0.25;
            }
            if (b->recv[d][i] != (float)want) {
                fprintf(stderr, "coll_threads: %s %lld bytes: device %d element %lld is %g, not %g\n",
                        kind_name[b->kind], (long long)b->bytes, d, (long long)i, b->recv[d][i], want);
                return -1;
            }
        }
    return 0;
}

int main(int argc, char **argv) {
    int64_t max = argc > 1 ? atoll(argv[1]) : (int64_t)64 << 20;
    int64_t min = argc > 2 ? atoll(argv[2]) : 1024;
    const char *only = argc > 3 && strcmp(argv[3], "all") ? argv[3] : NULL;
    NDEV = argc > 4 ? atoi(argv[4]) : 8;
    if (NDEV < 1 || NDEV > MAXDEV) {
        fprintf(stderr, "coll_threads: 1 to %d devices\n", MAXDEV);
        return 1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int st = (int)(cores < 1 ? 1 : cores < NDEV ? cores : NDEV);
    printf("stream-copy %d %.6e\n", st, stream_copy(st));
    fflush(stdout);

    char err[256];
    sc_mesh mesh = {1, {NDEV}, {"X"}};
    sc_options opt = {0};            /* SHARDC_BIND=core: as OpenMPI binds 2 ranks */
    if (sc_options_from_env(&opt, err, sizeof err)) {
        fprintf(stderr, "coll_threads: %s\n", err);
        return 1;
    }
    sc_world *w = sc_threads_create(&mesh, &opt, err, sizeof err);
    if (!w) {
        fprintf(stderr, "coll_threads: %s\n", err);
        return 1;
    }
    Bench b;
    for (int d = 0; d < NDEV; d++) {
        b.send[d] = malloc((size_t)max);
        b.recv[d] = malloc((size_t)max);
        if (!b.send[d] || !b.recv[d]) {
            fprintf(stderr, "coll_threads: out of memory\n");
            return 1;
        }
    }
    for (int k = 0; k < NKIND; k++)
        for (int64_t bytes = min; bytes <= max && (!only || !strcmp(only, kind_name[k])); bytes *= 4) {
            b.kind = (Kind)k;
            b.bytes = bytes;
            /* 128 MiB of results per loop: 2 iterations at 64 MiB, at
             * most 200 at small sizes. */
            int64_t it = ((int64_t)128 << 20) / bytes;
            b.iters = (int)(it < 2 ? 2 : it > 200 ? 200 : it);
            b.best = 1e30;
            if (sc_run(w, body, &b) != 0) {
                fprintf(stderr, "coll_threads: %s\n", sc_world_error(w));
                return 1;
            }
            if (check(&b) != 0)
                return 1;
            printf("threads %s %lld %.6e %d\n", kind_name[k], (long long)bytes, b.best, b.iters);
            fflush(stdout);
        }
    sc_world_destroy(w);
    for (int d = 0; d < NDEV; d++)
        free(b.send[d]), free(b.recv[d]);
    return 0;
}
