/* Sharding propagation: give every value of every fn a sharding. */
#ifndef SHARDC_PROPAGATE_H
#define SHARDC_PROPAGATE_H

#include "../ir/ir.h"

/* Propagate shardings through every non-spmd function of `m`, in place.
 * Afterwards every value's sharding is known and Inst.why says where it
 * came from.  Deterministic; see docs/propagation.md for the cost model. */
void propagate_module(Module *m);

/* specialize.c: does fn leave dims of its parameters or results open
 * (`@?`), so that each call gives them shardings? */
int fn_is_generic(const Fn *fn);
/* Does fn call a generic fn whose body is inlined for propagation? */
int fn_calls_generic(const Module *m, const Fn *fn);
/* Propagate fn (with `propagate`, one function's propagation) with its
 * calls of generic fns inlined, then turn each inlined body back into a
 * call of a specialization `g.N` (appended to the module) that carries the
 * shardings the body got.  Bodies with equal shardings share one. */
void specialize_fn(Module *m, int fn, void (*propagate)(const Module *, Fn *));

#endif
