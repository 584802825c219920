/* The grad pass's state, shared by grad.c (the pass) and adjoint.c (one
 * rule per op).  Internal to compiler/grad. */
#ifndef SHARDC_GRAD_INTERNAL_H
#define SHARDC_GRAD_INTERNAL_H

#include "grad.h"

/* How a loop that stays a loop is differentiated (loops.c), by its body b.
 * `body` is b, or b's copy that takes a row-read invariant (w read only as
 * w[i], i the index) as that row; its fwd/bwd pair does one iteration.
 * The forward loop (fwd_loop) runs body's fwd, inlined, and writes what the
 * backward reads into [trips, ...] arrays it carries (the stacks: body
 * fwd's residuals, then the carried parameters body bwd reads); the
 * backward loop (bwd_loop) runs body's bwd, inlined, from the last
 * iteration to the first,
 * carrying the carried values' cotangents and the invariants' gradients. */
typedef struct {
    int body, fwd_loop, bwd_loop;
    int64_t trips;
    uint8_t *row;                /* per body parameter: an invariant passed as its row */
    int nres;                    /* stacks [0, nres): body fwd's residuals */
    int *carried_stack;          /* stacks [nres, nstack): these carried parameters */
    int nstack;
} LoopGrad;

/* How a call is differentiated, by callee (fn index, -1 where not needed).
 * An fn callee gets a pair: fwd runs it and also returns the values its
 * backward pass reads (its residuals), bwd takes them with the cotangents,
 * so nothing runs twice.  An spmd callee, whose per-device values have no
 * global type to return, gets one vjp fn that runs it again, then backward;
 * so does an fn called through checkpoint (INST_REMAT), whose residuals are
 * not kept: an fn called both ways has both.
 * wrt: per fn, the parameters its pair differentiates (a callee's: every
 * float one; a loop body's: its float carried values and the invariants
 * that depend on what the caller differentiates), NULL where none (a loop
 * whose operands depend on nothing differentiated has none).  loop:
 * per loop body, how its loop is differentiated, NULL where not.
 * varies_in, varies_out: per loop body in an spmd fn, the axes its
 * parameters and its results differ along in its loop (loop_variation:
 * a carried value along what every iteration leaves it differing along).
 * Each of their cotangents is each device's share along those axes: the
 * caller's cotangent of the loop's operand or result, summed over the axes
 * along which the body's value is the same (seed_results, loop_adjoint). */
typedef struct {
    int32_t *vjp, *fwd, *bwd;
    KeptCalls *kept;             /* grad_module's, or NULL */
    uint8_t **wrt;
    LoopGrad **loop;
    uint8_t *by_loop;            /* a fn whose pair loops.c builds (a LoopGrad's body) */
    uint32_t **varies_in, **varies_out;
} Backward;

/* Building one derived fn: the source's instructions are copied (the
 * forward pass), then walked backwards, each active value's cotangent
 * handed to its operands by the op's rule. */
/* A cotangent of rows [lo, hi) of dim `dim` of a value, kept apart from
 * the value's cotangent until its rule runs (grad.c, give_slice). */
typedef struct {
    int32_t c, next;             /* the piece (a dst value); the value's next piece, or -1 */
    int dim;
    int64_t lo, hi;
} SlicePiece;

typedef struct {
    Module *m;
    Diag *diag;
    const Fn *src;
    Fn *dst;
    const Backward *bk;
    int32_t *fwd;                /* src value -> its copy in dst */
    int32_t *fwd_ct;             /* src value -> its copy in the cotangent dtype (made once), or -1 */
    int32_t *ct;                 /* src value -> dst value of its cotangent so far, or -1 (zero) */
    int32_t **tuple_ct;          /* a src call with several results -> each result's cotangent */
    uint8_t *active;             /* src value: depends on a differentiated parameter and reaches a seed */
    uint32_t *varies;            /* spmd: the mesh axes each src value differs along */
    int32_t *res_at;             /* a src call of a fwd fn -> the first dst value holding its residuals */
    int32_t *piece_head;         /* src value -> its first pending SlicePiece, or -1 */
    SlicePiece *pieces;
    int npieces, cap_pieces;
    int v;                       /* the src instruction whose rule runs */
    int *uses;                   /* src value -> operand slots that read it (adjoint.c, made when first needed) */
    int32_t *remap;              /* src value -> dst value, adjoint.c's scratch for re-emitted instructions */
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
/* give, for c the cotangent of rows [lo, hi) of dim d of operand i. */
void give_slice(Grad *g, int i, int c, int d, int64_t lo, int64_t hi);
/* The pieces ps[0, k) of one dim (sorted, disjoint), with zeros between
 * them, to n rows: one concatenate. */
int g_tile(Grad *g, const SlicePiece *ps, int k, int64_t n);
int g_psum(Grad *g, int x, uint32_t axes);
_Noreturn void no_gradient(Grad *g, const char *what);

/* The pass over one body (grad.c): start on src into dst; mark what takes
 * part; copy the forward instructions; walk them backwards. */
Grad grad_begin(Module *m, Diag *diag, const Fn *src, Fn *dst, const Backward *bk);
void find_active(Grad *g, const uint8_t *wrt, const uint8_t *seed);
void copy_forward(Grad *g);
void run_backward(Grad *g);
int param_grad(Grad *g, int p, int dtype);
/* A copied instruction keeps its value, name, flags, sharding and place. */
void keep_fields(Inst *out, const Inst *in);
/* Instruction u of `from` re-emitted into `to`, its operands through map. */
int reemit(Module *m, Fn *to, const Fn *from, int u, const int32_t *map);
/* Add dst value c to the cotangent of src value v (a seed, or a share). */
void add_ct(Grad *g, int v, int c);

/* callees.c: the backward fns of the fns the derived fns call */
int runs_again(const Module *m, const Fn *caller, const Inst *call);  /* differentiated through the callee's vjp fn */
void add_backward_fns(Module *m, Diag *diag, Backward *bk);
void build_backward_fns(Module *m, Diag *diag, const Backward *bk);
int add_fn(Module *m, int f, const char *suffix);           /* a new fn named f_suffix, unique */
void build_pair(Module *m, Diag *diag, int f, const Backward *bk);
/* wide_dots.c: dots of bf16 and f16 values that sum in f32 */
void widen_dots(Module *m);
int dot_operand_dtype(const Fn *fn, const Inst *dot);
int sym_of(Module *m, const char *name);

/* loops.c: loops that stay loops */
/* The parameters of loop body b (the loop `loop` of fn f, which is
 * differentiated with respect to f_wrt) that its pair differentiates. */
uint8_t *loop_body_wrt(Module *m, int f, const uint8_t *f_wrt, const Inst *loop);
/* The LoopGrad of the loop `loop` of fn f (its body's pair and loops,
 * empty until build_loop_fns). */
LoopGrad *add_loop_fns(Module *m, Diag *diag, Backward *bk, int f, const Inst *loop);
/* Build b's pair and its two loops, once b's callees' are built. */
void build_loop_fns(Module *m, Diag *diag, const Backward *bk, int b);
/* copy_forward of an active loop: the forward loop; its value, or its
 * tuple (whose elements loop_element maps). */
int loop_forward(Grad *g, int v, const int32_t *args);
int loop_element(const Grad *g, int loop, int index);
void loop_adjoint(Grad *g, int c);

/* adjoint.c: hand cotangent c of src value g->v to its operands. */
void adjoint(Grad *g, int c);

#endif
