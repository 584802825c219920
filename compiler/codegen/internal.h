/* Shared by the code generator's files:
 *   codegen.c      the file and each function: names, buffers, order
 *   kernels.c      one kernel or collective call per instruction
 *   fused.c        the loop of such a group
 *   header.c       prog.h and the entry points' signatures
 *   codegen_main.c main() for one function
 *   trace.c        the SHARDC_TRACE event of each instruction */
#ifndef SHARDC_CODEGEN_INTERNAL_H
#define SHARDC_CODEGEN_INTERNAL_H

#include "../ir/ir.h"
#include "codegen.h"
#include "../schedule/fuse.h"

#include <stdio.h>

extern const char *const ctype_of[];      /* "float", ... by dtype */
extern const char *const sk_dtype_of[];   /* "SK_F32", ... by dtype */


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
    int jumps;                   /* something emitted can `goto fail` */
    int64_t *index_at;           /* per loop instruction: its index's place in the workspace */
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
char *fns_in_file(const Module *m, Entries main_fns, Arena *arena);
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
void emit_main(const Module *m, Entries main_fns, FILE *o);
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
/* Writes `    LAUNCH("NAME", BYTES, ` for instruction g->at, the opening of
 * its kernel or blocking collective call (work on the device), or
 * `    TRY_TRACED(` for a call of a generated function; returns the
 * characters written. */
int try_open(Gen *g);
/* Writes `    TRY(` (sets g->jumps): the opening of a call that can fail. */
void try_plain(Gen *g, const char *indent);

#endif
