/* backend.c: which backend a generated program's run takes, chosen when it
 * runs, not where its C is compiled (docs/cli.md, "The MPI backend").
 *
 * Every program links the threads backend.  One built for MPI (`shardc
 * build --backend mpi`) links the MPI one too: libshardc_rt_mpi.a, pulled
 * in by -Wl,-u,sc_mpi_create, since the reference below is weak and so
 * pulls in nothing by itself; in other programs sc_mpi_create is NULL.
 * Such a program runs on MPI when an MPI launcher started it (mpirun, or
 * srun with PMI), and on threads when it is run directly, so one build
 * serves both.  SHARDC_BACKEND=threads or mpi decides instead. */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern sc_world *sc_mpi_create(const sc_mesh *mesh, const sc_options *opt, char *err, size_t errlen)
    __attribute__((weak));

/* The processes an MPI launcher started, as its environment says (0: not
 * started by one). */
static long launched_processes(void) {
    static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof size_vars / sizeof *size_vars; i++) {
        const char *v = getenv(size_vars[i]);
        if (v && *v)
            return strtol(v, NULL, 10);
    }
    return getenv("PMIX_RANK") || getenv("PMI_RANK") ? 1 : 0;
}

sk_world_create sk_backend_choose(char *err, size_t errlen) {
    const char *want = getenv("SHARDC_BACKEND");
    if (want && !*want)
        want = NULL;
    long launched = launched_processes();
    if (want && strcmp(want, "threads") && strcmp(want, "mpi")) {
        snprintf(err, errlen, "SHARDC_BACKEND='%s': the backends are threads and mpi", want);
        return NULL;
    }
    int mpi = want ? strcmp(want, "mpi") == 0 : launched > 0 && sc_mpi_create != NULL;
    if (mpi && !sc_mpi_create) {
        snprintf(err, errlen, "SHARDC_BACKEND=mpi, but this program was built without the MPI backend "
                              "(build it with shardc build --backend mpi)");
        return NULL;
    }
    if (!mpi && launched > 1 && !want) {
        snprintf(err, errlen, "started by an MPI launcher as one of %ld processes, but this program was built "
                              "without the MPI backend: each process would run every device (build it with "
                              "shardc build --backend mpi, or set SHARDC_BACKEND=threads)", launched);
        return NULL;
    }
    return mpi ? sc_mpi_create : sc_threads_create;
}

const char *sk_backend_name(sk_world_create create) {
    return create == sc_threads_create ? "threads" : create && create == sc_mpi_create ? "mpi" : "another";
}

const char *sk_session_backend(void) {
    char err[256];
    sk_world_create create = sk_backend_choose(err, sizeof err);
    return create ? sk_backend_name(create) : NULL;
}
