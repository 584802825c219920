/* SPMD partitioning: rewrite every fn into one per-device program with
 * local shapes and explicit collectives (docs/partitioning.md). */
#ifndef SHARDC_PARTITION_H
#define SHARDC_PARTITION_H

#include "../ir/ir.h"

/* Partition every fn of `m` in place, after sharding propagation.  A value
 * that has to be replicated whole to be resharded gets a warning through
 * `diag`, at its source location. */
void partition_module(Module *m, Diag *diag);

#endif
