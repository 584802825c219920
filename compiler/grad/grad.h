/* Reverse-mode differentiation (docs/grad.md): build the bodies of the fns
 * that grad(...) and value_and_grad(...) define, on the global program,
 * before sharding propagation. */
#ifndef SHARDC_GRAD_H
#define SHARDC_GRAD_H

#include "../ir/ir.h"

/* A call that a gradient differentiates by its callee's fwd/bwd pair: the
 * caller (fn index), the call (its instruction) and the bytes of the
 * residuals kept for its backward pass (global shapes).  The candidates for
 * checkpointing when a budget is exceeded (compiler/driver/frontend.c). */
typedef struct {
    int32_t fn, inst, callee;
    int64_t bytes;
    Loc loc;                     /* the call's, in the source */
} KeptCall;

typedef struct {
    KeptCall *at;                /* in the module's arena, each call once */
    int n, cap;
} KeptCalls;

/* Give every fn with grad_of its body, adding a backward fn (vjp_of) for
 * each fn its source calls; the calls that keep residuals into `kept`
 * (NULL: not wanted).  Returns 0, or -1 after reporting through `diag` an
 * op that has no gradient (at its source location). */
int grad_module(Module *m, Diag *diag, KeptCalls *kept);

#endif
