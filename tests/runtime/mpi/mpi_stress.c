/* Many small collectives in flight over several groups at once, on the MPI
 * backend: the exchange between processes under pressure (the intermittent
 * hang of tests/run-tests step 7c, docs/runtime.md "Progress").
 *
 *   mpirun -np P [-x SHARDC_LOCAL_DEVICES=L] mpi_stress [ROUNDS [WORLDS]]
 *
 * The mesh is 2 x (P L / 2) devices (X, Y), in WORLDS worlds one after the
 * other (default 1: each makes and frees its communicators and progress
 * thread, as test_collectives' 35 do).  Every device, ROUNDS times:
 * starts SC_MAX_PENDING collectives that cycle through the groups of {X},
 * {Y} and {X,Y} (all-reduce sum and all-gather of i32, a few to 40
 * elements, so that many messages are small and cross at once), then
 * completes them in order and checks every result.  Process 0 prints one
 * TAP line, with the time taken; a hang ends at the world's timeout
 * (SHARDC_TIMEOUT) with the runtime's message. */
#include "shardc_rt.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PEND = SC_MAX_PENDING, MAXN = 40, MAXK = 64 };

static int rounds = 200;
static _Atomic int bad;

static const sc_axes sets[3] = {SC_AXES(0), SC_AXES(1), SC_AXES(0, 1)};

/* Element e of device d's send in round r, slot i. */
static int32_t value(int d, int r, int i, int e) { return d * 1000 + r * 7 + i * 3 + e; }

static int count_of(int r, int i) { return 1 + (r * 7 + i * 5) % MAXN; }

/* Checks collective i of round r (even i: all-reduce, odd: all-gather). */
static int verify(sc_device *dev, int r, int i, const int32_t *recv) {
    sc_axes a = sets[i % 3];
    int k = sc_group_size(dev, a), n = count_of(r, i);
    for (int e = 0; e < n; e++) {
        if (i % 2 == 0) {
            int32_t want = 0;
            for (int j = 0; j < k; j++)
                want += value(sc_group_member(dev, a, j), r, i, e);
            if (recv[e] != want)
                return 1;
        } else
            for (int j = 0; j < k; j++)
                if (recv[j * n + e] != value(sc_group_member(dev, a, j), r, i, e))
                    return 1;
    }
    return 0;
}

static int body(sc_device *dev, void *arg) {
    (void)arg;
    static _Thread_local int32_t send[PEND][MAXN], recv[PEND][MAXK * MAXN];
    int me = sc_device_id(dev);
    for (int r = 0; r < rounds; r++) {
        sc_handle *h[PEND];
        for (int i = 0; i < PEND; i++) {
            int n = count_of(r, i);
            for (int e = 0; e < n; e++)
                send[i][e] = value(me, r, i, e);
            h[i] = i % 2 == 0 ? sc_start_all_reduce(dev, sets[i % 3], SC_I32, SC_SUM, send[i], recv[i], n)
                              : sc_start_all_gather(dev, sets[i % 3], SC_I32, SC_SHAPE(n), 0, send[i], recv[i]);
        }
        for (int i = 0; i < PEND; i++)
            if (sc_done(h[i]))
                return SC_ERR;
        for (int i = 0; i < PEND; i++)
            if (verify(dev, r, i, recv[i]))
                bad = 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int rank, size, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int worlds = argc > 2 ? atoi(argv[2]) : 1;
    if (argc > 1)
        rounds = atoi(argv[1]);
    sc_options opt = {0};
    char err[256] = "";
    if (sc_options_from_env(&opt, err, sizeof err) != 0) {
        fprintf(stderr, "mpi_stress: %s\n", err);
        return 1;
    }
    int L = opt.local_devices ? opt.local_devices : 1;
    sc_mesh m = {2, {2, size * L / 2}, {"X", "Y"}};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ok = 1;
    for (int i = 0; i < worlds && ok; i++) {
        sc_world *w = sc_mpi_create(&m, &opt, err, sizeof err);
        int rc = w ? sc_run(w, body, NULL) : -1;
        ok = rc == 0 && !bad;
        if (!w || rc)
            fprintf(stderr, "mpi_stress: process %d, world %d: %s\n", rank, i, w ? sc_world_error(w) : err);
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!ok && rank == 0)
            printf("not ok 1 - stress: world %d of %d failed\n# done: 1 tests\n", i, worlds);
        sc_world_destroy(w);                /* a failed world aborts the job */
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rank == 0 && ok) {
        printf("ok 1 - stress: %d worlds of %d rounds of %d collectives over {X}, {Y}, {X,Y} on 2x%d devices, "
               "%d processes x %d (%.1f s)\n# done: 1 tests\n",
               worlds, rounds, PEND, size * L / 2, size, L,
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        fflush(stdout);
    }
    MPI_Finalize();
    return !ok;
}
