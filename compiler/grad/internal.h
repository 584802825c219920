/* The grad pass's state, shared by grad.c (the pass) and adjoint.c (one
 * rule per op).  Internal to compiler/grad. */
#ifndef SHARDC_GRAD_INTERNAL_H
#define SHARDC_GRAD_INTERNAL_H

#include "grad.h"

/* Building one derived fn: the source's instructions are copied (the
 * forward pass), then walked backwards, each active value's cotangent
 * handed to its operands by the op's rule. */
typedef struct {
    Module *m;
    Diag *diag;
    const Fn *src;
    Fn *dst;
    const int32_t *vjp;          /* fn index -> its backward fn, or -1 */
    int32_t *fwd;                /* src value -> its copy in dst */
    int32_t *fwd_ct;             /* src value -> its copy in the cotangent dtype (made once), or -1 */
    int32_t *ct;                 /* src value -> dst value of its cotangent so far, or -1 (zero) */
    int32_t **tuple_ct;          /* a src call with several results -> each result's cotangent */
    uint8_t *active;             /* src value: depends on a differentiated parameter and reaches a seed */
    uint32_t *varies;            /* spmd: the mesh axes each src value differs along */
    int v;                       /* the src instruction whose rule runs */
} Grad;

/* grad.c: emitting into dst at the place and location of src value g->v */
int g_emit(Grad *g, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs, const Shape *type);
int g_const(Grad *g, double value, const Shape *shape);     /* a splat */
int g_cast(Grad *g, int x, int dtype);                      /* dst value x as dtype (itself when it is) */
int ct_dtype(int dtype);                                    /* f32 for bf16 and f16 */
int g_fwd(Grad *g, int v);                                  /* src value v's copy, in its cotangent dtype */
const Shape *src_type(const Grad *g, int v);
Shape ct_shape(const Grad *g, int v);                       /* src value v's shape in its cotangent dtype */
/* Add c to the cotangent of operand i of the running instruction (summed
 * over the axes along which that instruction varies and the operand does
 * not, in an spmd fn: a replicated value's cotangent is the sum of every
 * device's). */
void give(Grad *g, int i, int c);
/* The same, without the sum: the rule has accounted for the axes. */
void give_exact(Grad *g, int i, int c);
int g_psum(Grad *g, int x, uint32_t axes);
_Noreturn void no_gradient(Grad *g, const char *what);

/* adjoint.c: hand cotangent c of src value g->v to its operands. */
void adjoint(Grad *g, int c);

#endif
