/* Shared by the code generator's files:
 *   codegen.c      the file and each function: names, buffers, order
 *   kernels.c      one kernel or collective call per instruction
 *   fuse.c         which elementwise instructions share one loop
 *   fused.c        the loop of such a group
 *   header.c       prog.h and the entry points' signatures
 *   codegen_main.c main() for one function
 *   trace.c        the SHARDC_TRACE event of each instruction */
#ifndef SHARDC_CODEGEN_INTERNAL_H
#define SHARDC_CODEGEN_INTERNAL_H

#include "../ir/ir.h"

#include <stdio.h>

extern const char *const ctype_of[];      /* "float", ... by dtype */
extern const char *const sk_dtype_of[];   /* "SK_F32", ... by dtype */


/* ---- fusion (fuse.c) ---- */
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
} Fusion;
/* The most bytes of a row that a later stage reads from a local array
 * (fused.c): reductions of rows over ROW_SCRATCH_MAX / 8 elements (4096)
 * are not fused. */
enum { ROW_SCRATCH_MAX = 32768 };
/* `buf`: the buffer of each value (-1 none), as the function's code uses
 * them.  The arrays are allocated in `arena`. */
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

/* ---- one function being generated ---- */
typedef struct {
    const Module *m;
    const Fn *fn;
    FILE *out;
    Arena *arena;                /* the function's: freed when it is emitted */
    const char *const *irname;   /* IR name per value, for the comments */
    char **name;                 /* C name per value: `%acc.1` is acc_1_ */
    int *buf;                    /* buffer per value, -1 none */
    int *result;                 /* per value: 1 + the result it is written straight into, or 0 */
    int *param;                  /* the parameter(i) instruction, or -1 */
    int *run_of;                 /* per value: the concatenate it is written into (INST_IN_RUN), or -1 */
    int64_t *run_at;             /* per such value: its byte offset there */
    int64_t *run_ld;             /* per such value: the elements between its rows there, or 0: one run */
    Fusion fu;
    const char *err;
    int at;                      /* the instruction being emitted, whose event TRY_TRACED names */
} Gen;

/* Declare where value v is written: its buffer, or its result array. */
void emit_storage(Gen *g, int v);
/* C names of a function's values, from their IR names (ir_value_names),
 * in time linear in their number. */
char **c_value_names(const Fn *fn, const char *const *irname, Arena *arena);
/* The parameter(i) instruction of each parameter (-1 if none). */
int *param_insts(const Fn *fn, Arena *arena);

/* Print the C function of a per-device function: shardc_NAME for an fn or
 * spmd fn (exported), local_NAME for a `.local` copy (static); returns the
 * characters printed. */
int emit_fn_cname(FILE *o, const Module *m, const Fn *fn);
int fn_exported(const Fn *fn);
int fn_emittable(const Fn *fn);
/* in[f] for each fn: is it in the file (codegen.c)? */
char *fns_in_file(const Module *m, int main_fn, Arena *arena);
/* `int shardc_f(sc_device *dev, const float *x_, float *result0)`; `names`
 * are the C names of fn's values (NULL: param0, ...). */
void emit_signature(FILE *o, const Module *m, const Fn *fn, char **names, const int *param);
/* The comment that documents an entry point: shapes global and local. */
void emit_abi_comment(FILE *o, const Module *m, const Fn *fn, char **names, const int *param);

void emit_list(FILE *o, const int64_t *x, int n);   /* {1, 2} */
/* The instruction's IR, as the dump prints it, as a comment line. */
void emit_ir_comment(Gen *g, int v);
void emit_inst(Gen *g, int v);                       /* kernels.c */
void emit_fused(Gen *g, int group);                  /* fused.c */
/* `int shardc_f_global(sk_session *s, const float *x_, float *result0)`:
 * fn on global arrays. */
void emit_global_signature(FILE *o, const Module *m, const Fn *fn, char **names, const int *param);
/* The ABI comment of shardc_f_global: the global arrays. */
void emit_global_comment(FILE *o, const Module *m, const Fn *fn, char **names, const int *param);
/* The sk_program table of every exported fn in the file, which lib/ reads,
 * and its shardc_NAME_global wrapper (codegen_main.c). */
void emit_programs(const Module *m, const char *in_file, const char ***irnames, FILE *o,
                   Arena *arena);
/* main() for function fn: sk_main on its table. */
void emit_main(const Module *m, const Fn *fn, FILE *o);
/* Why the file cannot have its global wrappers (a fn named like another's
 * shardc_NAME_global), or NULL. */
const char *global_name_clash(const Module *m, const char *in_file, Arena *arena);
/* ---- SHARDC_TRACE events (trace.c) ---- */
/* What instruction v runs, as its event's name ("dot f32 [32,128]x[128,64]",
 * "all-reduce-start f32 sum [32,128] over {Y}", "call stage1"), and the
 * bytes it writes (a collective, start or done: sends). */
const char *trace_name(Gen *g, int v);
int64_t trace_bytes(Gen *g, int v);
/* The event of a group's loop: "loop multiply,add,gelu f32 [4,4]", and the
 * bytes it stores. */
const char *trace_loop_name(Gen *g, int group, int64_t *bytes);
/* Writes `    TRY_TRACED("NAME", BYTES, ` for instruction g->at, the opening
 * of its kernel or collective call; returns the characters written. */
int try_open(Gen *g);

#endif
