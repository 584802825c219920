/* bench/coll_mpi.c: OpenMPI's MPI_Allreduce (sum f32), MPI_Allgather and
 * MPI_Alltoall on every rank of MPI_COMM_WORLD, measured as
 * bench/coll_threads.c measures the threads backend: SIZE is the bytes of
 * each rank's result; one warm-up call, then REPS loops of `iters` calls
 * (the same counts as coll_threads) after a barrier, each loop's time the
 * slowest rank's, best of REPS.  Prints one line per measurement from rank 0:
 *
 *   mpi KIND SIZE SECONDS ITERS
 *
 * Usage: mpirun -np 8 coll_mpi [MAX_BYTES [MIN_BYTES [KIND]]]. */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REPS = 5 };

static const char *const kind_name[3] = {"all-reduce", "all-gather", "all-to-all"};

static void one(int kind, const float *send, float *recv, int64_t n, int k) {
    if (kind == 0)
        MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (kind == 1)
        MPI_Allgather(send, (int)(n / k), MPI_FLOAT, recv, (int)(n / k), MPI_FLOAT, MPI_COMM_WORLD);
    else
        MPI_Alltoall(send, (int)(n / k), MPI_FLOAT, recv, (int)(n / k), MPI_FLOAT, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, k;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &k);
    int64_t max = argc > 1 ? atoll(argv[1]) : (int64_t)64 << 20;
    int64_t min = argc > 2 ? atoll(argv[2]) : 1024;
    const char *only = argc > 3 ? argv[3] : NULL;
    float *send = malloc((size_t)max), *recv = malloc((size_t)max);
    if (!send || !recv) {
        fprintf(stderr, "coll_mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int kind = 0; kind < 3; kind++)
        for (int64_t bytes = min; bytes <= max && (!only || !strcmp(only, kind_name[kind])); bytes *= 4) {
            int64_t n = bytes / 4;
            for (int64_t i = 0; i < n; i++)
                send[i] = (float)((i + me) % 97) * 0.25f, recv[i] = 0.0f;
            int64_t it = ((int64_t)128 << 20) / bytes;
            int iters = (int)(it < 2 ? 2 : it > 200 ? 200 : it);
            one(kind, send, recv, n, k);
            double best = 1e30;
            for (int r = 0; r < REPS; r++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                for (int i = 0; i < iters; i++)
                    one(kind, send, recv, n, k);
                double t = (MPI_Wtime() - t0) / iters, worst;
                MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                best = worst < best ? worst : best;
            }
            /* A spot check of the last result. */
            int64_t i = n / 3;
            double want = 0;
            if (kind == 0)
                for (int j = 0; j < k; j++)
                    want += (double)((i + j) % 97) * 0.25;
            else if (kind == 1)
                want = (double)((i % (n / k) + i / (n / k)) % 97) * 0.25;
            else
                want = (double)((me * (n / k) + i % (n / k) + i / (n / k)) % 97) * 0.25;
            if (recv[i] != (float)want) {
                fprintf(stderr, "coll_mpi: %s %lld bytes: rank %d element %lld is %g, not %g\n",
                        kind_name[kind], (long long)bytes, me, (long long)i, recv[i], want);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (me == 0) {
                printf("mpi %s %lld %.6e %d\n", kind_name[kind], (long long)bytes, best, iters);
                fflush(stdout);
            }
        }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
