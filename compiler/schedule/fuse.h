/* Elementwise fusion (fuse.c): which instructions of a scheduled function
 * share one loop.  The code generator emits each group as one loop
 * (codegen/fused.c); the cost model charges a group's memory traffic once
 * (cost/roofline.c). */
#ifndef SHARDC_FUSE_H
#define SHARDC_FUSE_H

#include "../ir/ir.h"

enum { FUSE_NONE, FUSE_MEMBER, FUSE_FOLDED, FUSE_DEFERRED };   /* DEFERRED: emitted after the loop */
typedef struct {
    unsigned char *role;         /* per instruction: FUSE_* */
    int *group;                  /* per instruction: its group, or -1 */
    int *next;                   /* next instruction of the same group, -1 */
    unsigned char *stored;       /* a member read outside its group (or returned) */
    int *uses;                   /* per value: how many operand slots read it */
    int ngroups;
    int *first, *last;           /* per group: its first and last instruction (members, folded and deferred) */
    int *last_member;            /* per group: where its loop is emitted */
    int *refs, *frefs;           /* fused.c's scratch per value, kept zero between groups */
    int *order;                  /* fused.c's scratch: values in the order first read */
    int64_t *elems;              /* per group: elements of its loop */
    int64_t *row;                /* per group: the span its reductions reduce (its rows), 0 none */
    int *nstages;                /* per group: inner loops per row (1 without reductions) */
    int *stage;                  /* per member: the inner loop that computes it */
    unsigned char *cross;        /* per member: read in a later stage than its own */
    int *host;                   /* fused.c's, per member: the stored member whose row holds it between stages, or -1 */
    int *link;                   /* fused.c's scratch for choosing hosts */
} Fusion;
/* The most bytes of a row that a later stage reads from a local array
 * (fused.c): reductions of rows over ROW_SCRATCH_MAX / 8 elements (4096)
 * are not fused. */
enum { ROW_SCRATCH_MAX = 32768 };
/* The buffer of each value as the function's code uses them, into buf[]
 * (ninsts entries): the scheduler's, or one per value in a function it
 * did not schedule; -1 for values that take none (parameters, done, the
 * return, tuples). */
void value_buffers(const Fn *fn, int *buf);
/* Whether v, an operand of fn's return, is computed straight into the
 * caller's result array, leaving its buffer unused (codegen.c's
 * returned_in_place; fusion needs to know which buffers a loop writes). */
int computed_in_result(const Fn *fn, const int *buf, int v);
/* `buf`: value_buffers'.  The arrays are allocated in `arena`. */
void fuse_fn(const Fn *fn, const int *buf, Fusion *fu, Arena *arena);
/* The instruction's element count if it can be a member of a loop, else -1. */
int64_t fusable_elems(const Fn *fn, int v);
/* For a broadcast along trailing dims (operand dim d is result dim d, the
 * operand of more than one element, not bf16/f16): how many result
 * elements share one operand element, so that element i of the result is
 * element i / inner of the operand.  0 for any other instruction. */
int64_t row_broadcast_inner(const Fn *fn, const Inst *in);
/* For a broadcast along leading dims (operand dim d is result dim
 * lead + d, as a bias or a layernorm scale; the operand of more than one
 * element): the operand's elements, its span, so that element i of the
 * result is element i % span of the operand.  0 for any other. */
int64_t col_broadcast_span(const Fn *fn, const Inst *in);
/* For a reduction over trailing dims that a loop can accumulate row by row
 * (sum, max, min, or a dot summing the product of two operands of one
 * shape; f32, f64; more than one row): the elements per row, else 0. */
int64_t row_reduce_inner(const Fn *fn, const Inst *in);
/* Is op one a row group member accumulates (given row_reduce_inner)? */
static inline int is_reduction(int op) { return op == OP_REDUCE || op == OP_DOT; }
/* Is member v one value per row of its group: a reduction, or an
 * instruction on row values? */
static inline int is_row_value(const Fn *fn, const Fusion *fu, int v) {
    return is_reduction(fn->insts[v].op) || fu->elems[fu->group[v]] != shape_elems(&fn->insts[v].type);
}
/* Does member use constant a as a literal (read no memory)?  A broadcast
 * does for any dtype, other ops for all but bf16 and f16. */
int uses_literal(const Fn *fn, const Inst *member, int a);

#endif
