/* Sharding propagation: give every value of every fn a sharding. */
#ifndef SHARDC_PROPAGATE_H
#define SHARDC_PROPAGATE_H

#include "../ir/ir.h"

/* Propagate shardings through every non-spmd function of `m`, in place.
 * Afterwards every value's sharding is known and Inst.why says where it
 * came from.  Deterministic; see docs/propagation.md for the cost model. */
void propagate_module(Module *m);

#endif
