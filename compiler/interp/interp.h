/* The reference interpreter: runs a module's functions on concrete tensors,
 * slowly and simply, as the ground truth that later stages (the SPMD
 * partitioner, code generation) are checked against.  docs/ir.md, section
 * "Reference interpreter", gives the semantics.
 *
 * Values are dense row-major arrays of doubles, rounded after every op to
 * the values their dtype can hold (compiler/interp/numerics.h), so results
 * match an f32/bf16/f16/i32 implementation up to the order of sums.
 * Local functions (spmd fn, and fns after partitioning) run in lockstep on
 * every device of the mesh, one instruction on all devices before the next,
 * which lets collectives read every device's operand. */
#ifndef SHARDC_INTERP_H
#define SHARDC_INTERP_H

#include "../ir/ir.h"

typedef struct {
    Shape shape;
    double *data;                /* shape_elems(&shape) elements, row-major */
} InterpValue;

/* Run function `fn` (an index into m->fns) as a global program: one
 * argument per parameter with its global type, one result per result with
 * its global type.  An fn runs as written; an spmd fn (or a partitioned fn)
 * gets each argument split into the blocks its parameter sharding gives
 * each device, runs on every device of the mesh, and its results are
 * assembled from the blocks by the result shardings.  Result data is
 * malloc'd (interp_free_values).  Returns 0, or -1 with a message in err. */
int interp_call(const Module *m, int fn, const InterpValue *args, InterpValue *results, char *err,
                size_t errlen);

/* Run function `fn` on `ndev` devices (the mesh's device count) in
 * lockstep, on per-device arguments: args[d][i] is parameter i on device d
 * (the local block for an spmd or partitioned fn; an fn runs on each
 * device's data alone).  results[d] must have room for every result. */
int interp_spmd(const Module *m, int fn, int64_t ndev, const InterpValue *const *args,
                InterpValue *const *results, char *err, size_t errlen);

void interp_free_values(InterpValue *values, int n);

#endif
