/* `shardc compile`, `build` and `run` (docs/cli.md): C code generation,
 * then cc, then running the program on the threads or the MPI backend. */
#ifndef SHARDC_CODEGEN_CMD_H
#define SHARDC_CODEGEN_CMD_H

#include "../codegen/codegen.h"
#include "../ir/ir.h"
#include "cache.h"
#include "status.h"

/* Write the C for module m (with a main() for the fns, or none when there
 * are none) to `out` (NULL: standard output).  Returns an exit status. */
int compile_command(const Module *m, Entries fns, const char *out);
typedef struct {
    int mpi;                /* the MPI backend, else threads */
    int np;                 /* mpi: processes (0: one per device) */
    const Module *check;    /* run --check: the program compiled for one device */
    int check_fn;           /* the function in it */
    const char *steps;      /* run --steps N and --log-every K, passed to the program (NULL: not given) */
    const char *log_every;
    const char *checkpoint; /* run --checkpoint FILE.npz, --checkpoint-every K, --resume FILE.npz (NULL: not given) */
    const char *checkpoint_every;
    const char *resume;
    CacheOptions cache;     /* the build cache (cache.h) */
    Status *status;         /* the progress line on a terminal (status.h) */
    int cast;               /* run --cast, passed to the program */
    int shared;             /* build --shared: a shared library (the Python package's) */
} RunOptions;

/* Emit C for the fns and link it into the executable `out`, whose main()
 * runs the one its --fn names when there are several. */
int build_command(const Module *m, Entries fns, const char *out, const RunOptions *ro);
/* Build f into a temporary directory and run it on the .npy inputs; with
 * ro->check, also the one-device build, and print the largest errors. */
int run_command(const Module *m, int f, const char *const *ins, int nins, const char *out_dir, const RunOptions *ro);

#endif
