/* Failures on the MPI backend end the run instead of hanging.  Run on a
 * mesh of 4 devices (`mpirun -np 4`, or -np 2 with SHARDC_LOCAL_DEVICES=2)
 * with SHARDC_TIMEOUT=1 (the world's options come from the environment):
 *
 *   mpi_fail late       device 3 never joins an all-reduce: the others
 *                       fail within the timeout, naming device 3
 *   mpi_fail mismatch   device 3 calls an all-gather where the others call
 *                       an all-reduce: both calls are named
 *   mpi_fail die        device 3's process dies after a first all-reduce:
 *                       mpirun, or the others' timeout, ends the job
 *
 * Every failing process prints "failed: MESSAGE" and the world's
 * destruction aborts the job (exit status != 0); tests/run-tests checks the
 * messages and the time taken. */
#include "shardc_rt.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int body(sc_device *dev, void *arg) {
    const char *mode = arg;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[32];
    if (sc_device_id(dev) == 3) {
        if (strcmp(mode, "late") == 0) {
            nanosleep(&(struct timespec){60, 0}, NULL);   /* killed long before */
            return 0;
        }
        if (strcmp(mode, "die") == 0) {
            sc_all_reduce(dev, SC_AXES(0), SC_F32, SC_SUM, x, y, 8);
            _exit(3);
        }
        return sc_all_gather(dev, SC_AXES(0), SC_F32, SC_SHAPE(8), 0, x, y);
    }
    if (strcmp(mode, "die") == 0 && sc_all_reduce(dev, SC_AXES(0), SC_F32, SC_SUM, x, y, 8))
        return SC_ERR;
    return sc_all_reduce(dev, SC_AXES(0), SC_F32, SC_SUM, x, y, 8);
}

int main(int argc, char **argv) {
    char err[256];
    sc_mesh mesh = {1, {4}, {"X"}};
    sc_options opt = {0};
    if (argc != 2)
        return 2;
    if (sc_options_from_env(&opt, err, sizeof err) != 0) {
        fprintf(stderr, "options: %s\n", err);
        return 1;
    }
    sc_world *w = sc_mpi_create(&mesh, &opt, err, sizeof err);
    if (!w) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }
    if (sc_run(w, body, argv[1]) != 0) {
        fprintf(stderr, "failed: %s\n", sc_world_error(w));
        fflush(stderr);
    }
    sc_world_destroy(w);
    return 0;
}
