/* Reverse-mode differentiation (docs/grad.md): build the bodies of the fns
 * that grad(...) and value_and_grad(...) define, on the global program,
 * before sharding propagation. */
#ifndef SHARDC_GRAD_H
#define SHARDC_GRAD_H

#include "../ir/ir.h"

/* Give every fn with grad_of its body, adding a backward fn (vjp_of) for
 * each fn its source calls.  Returns 0, or -1 after reporting through
 * `diag` an op that has no gradient (at its source location). */
int grad_module(Module *m, Diag *diag);

#endif
