/* `shardc interp`: run one function with the reference interpreter on .npy
 * inputs and write its results as .npy files (docs/cli.md). */
#ifndef SHARDC_INTERP_CMD_H
#define SHARDC_INTERP_CMD_H

#include "../ir/ir.h"

/* `ins` are the --in NAME=FILE values; results go to out_dir/resultK.npy.
 * Returns the exit status: 0, 1 for a bad input or a failed run, 2 for a
 * malformed --in. */
int interp_command(const Module *m, int fn, const char *const *ins, int nins, const char *out_dir, int cast);

#endif
