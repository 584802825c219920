/* SPMD partitioning: rewrite every fn into one per-device program with
 * local shapes and explicit collectives (docs/partitioning.md). */
#ifndef SHARDC_PARTITION_H
#define SHARDC_PARTITION_H

#include "../ir/ir.h"

/* Partition every fn of `m` in place, after sharding propagation.  A value
 * that has to be replicated whole to be resharded gets a warning through
 * `diag`, at its source location. */
void partition_module(Module *m, Diag *diag);

/* Note on every fn of the propagated module, for the sharded dump, the
 * choices partition_module will make and their costs, as the partitioned
 * dump notes them: each gather from a table split along its gathered dim
 * gets its scheme, with both schemes' bytes and peaks (gather.c decides
 * from the propagated program alone, so both dumps say the same). */
void partition_note_choices(Module *m);

#endif
