/* Semantic analysis: checks a parsed program against docs/language.md and
 * lowers it to the IR, one function at a time.  Loops are unrolled here, or
 * kept as one loop instruction over a body fn (loop.c), and compile-time
 * integers are folded here, so each fn is straight-line code over tensors.
 * Internal to compiler/sema. */
#ifndef SHARDC_SEMA_H
#define SHARDC_SEMA_H

#include "../ir/ir.h"
#include "../base/suggest.h"

/* Limits that keep any input, however large its loops, from exhausting
 * memory or time (docs/language.md, "Limits"). */
#ifdef SHARDC_FUZZ_LIMITS
/* The fuzz target's budget: a run must finish in seconds under ASan. */
enum { MAX_FN_INSTS = 50000, MAX_STMTS_RUN = 100000 };
#else
enum {
    MAX_FN_INSTS = 1000000,          /* instructions per function after unrolling */
    MAX_STMTS_RUN = 2000000,         /* statements executed while unrolling */
};
#endif
enum {
    MAX_DEVICES = 1 << 16,
    MAX_INDEX_LABELS = 64,           /* distinct index names in one statement */
};

/* An integer scalar: konst + coef * atom, where atom is an i32[] IR value
 * known only at run time (axis_index and what is computed from it), or -1.
 * The affine form is what lets `x[o : o + n]` know its size n at compile
 * time when o is a run-time offset. */
typedef struct {
    int64_t konst, coef;
    int atom;
} IntVal;

typedef enum { VAL_INT, VAL_FLOAT, VAL_TENSOR } ValKind;
typedef struct {
    ValKind kind;
    IntVal i;                        /* VAL_INT */
    double f;                        /* VAL_FLOAT: an untyped constant */
    int v;                           /* VAL_TENSOR: IR value */
} Val;

typedef enum { B_NONE, B_VALUE, B_AXIS, B_FN, B_SUBMESH } BindKind;
typedef struct {
    uint8_t kind;
    Val val;                         /* B_VALUE */
    int index;                       /* B_AXIS: axis; B_FN: function; B_SUBMESH: submesh */
    Loc loc;                         /* where it was bound */
} Binding;

typedef struct Builtin Builtin;

typedef struct {
    int from, to;                    /* function indices */
    Loc loc;
} CallEdge;

/* The statement lists being lowered, innermost first: what a loop that
 * stays a loop scans for the names read after it (loop.c). */
typedef struct Block {
    const PtrVec *stmts;
    int at;                          /* the statement being lowered */
    int loop;                        /* a loop's body: all of it runs again after any statement */
    struct Block *up;
} Block;

typedef struct {
    Module *m;
    Diag *diag;
    Symtab *syms;
    Arena *arena;
    Binding *global, *local;         /* symbol id -> binding */
    const Builtin **builtin;         /* symbol id -> builtin or NULL */
    int nsyms;
    Fn *fn;                          /* the function being lowered */
    int fn_index;
    const AstTop *mesh;              /* the mesh line, for "used before the mesh" */
    CallEdge *calls;                 /* the call graph, for the cycle check */
    int ncalls, calls_cap;
    int *label_of;                   /* index.c scratch: symbol -> label + 1, all 0 between statements */
    int *touched;                    /* symbols bound in `local`, to reset it */
    int ntouched, touched_cap;
    int64_t stmts_left;
    int returned;
    const AstFn **ast_fns;           /* each user fn's syntax, by index (parameter names) */
    int nuser_fns;
    int ntransforms;                 /* the program's grad calls: room kept in m->fns for their fns */
    Block *block;
    uint8_t *name_mark;              /* loop.c scratch: symbol -> 1, all 0 between uses */
    uint8_t *differentiated;         /* user fn -> a gradient runs it */
    int in_grad;                     /* the fn being lowered is differentiated */
    int auto_ok;                     /* resolving a signature: `@auto` allowed */
    uint8_t auto_dims;               /* the `@auto` dims of the type just resolved */
    Loc auto_loc;                    /* the first `@auto` of the signature */
} Sema;

/* sema.c */
_Noreturn void sema_error(Sema *s, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "Did you mean": for an unknown name, the nearest of the candidates by
 * compiler/base/suggest.h's rule, as the CLI suggests.  The candidates are
 * names given one by one and the names in scope of some kinds (a mask of
 * NEAR_ bits); the first of equally near ones wins, names in scope in
 * symbol order (the order they first occur in the file, then the builtins
 * it does not mention). */
enum {
    NEAR_VALUES = 1 << B_VALUE,      /* parameters, locals, loop variables, constants */
    NEAR_AXES = 1 << B_AXIS,
    NEAR_FNS = 1 << B_FN,
    NEAR_SUBMESHES = 1 << B_SUBMESH,
    NEAR_BUILTINS = 1 << 5,
};
void near_add(Suggest *sg, const char *name);
void near_add_scope(Sema *s, Suggest *sg, unsigned kinds);
const char *near_text(Sema *s, const Suggest *sg);          /* "; did you mean 'X'?", or "" */
const char *did_you_mean(Sema *s, int symbol, unsigned kinds);  /* from the names in scope */
_Noreturn void undefined_name(Sema *s, int symbol, Loc loc);
void check_axis_declared_later(Sema *s, int symbol, Loc loc);
const char *sym(const Sema *s, int id);
Binding *lookup(Sema *s, int symbol);
void bind_local(Sema *s, int symbol, Val v, Loc loc);
int emit(Sema *s, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
         const Shape *type, Loc loc);
void lower_stmts(Sema *s, const PtrVec *stmts, int loop_body);
void check_local_name(Sema *s, int symbol, Loc loc);

/* loop.c: `for`, unrolled or kept as a loop */
void lower_for(Sema *s, const Stmt *st);
void find_differentiated(Sema *s);
const char *shape_str(Sema *s, const Shape *shape);
const char *count_of(Sema *s, int64_t n, const char *noun);

/* The submesh of `fn ... on NAME` (NULL for the whole mesh), and what its
 * devices are called in messages: "submesh 'first' (the devices where S is 0)". */
const Submesh *fn_submesh(const Sema *s, const Fn *fn);
const char *submesh_str(Sema *s, const Submesh *sm);
void check_placed_sharding(Sema *s, int v, const Sharding *sh, Loc loc);

/* scalar.c: compile-time and run-time integer scalars */
Val eval(Sema *s, const Expr *e);            /* any expression in value context */
int64_t eval_const_int(Sema *s, const Expr *e, const char *what);
IntVal int_binary(Sema *s, int op, IntVal a, IntVal b, Loc loc);
int int_is_const(IntVal v);
int materialize_int(Sema *s, IntVal v, Loc loc);
Val int_val(int64_t k);
Val eval_index(Sema *s, const Expr *e, const char *what);   /* a subscript: i32[] scalars are run-time integers */

/* types.c */
_Noreturn void not_an_axis(Sema *s, int symbol, Loc loc);     /* with the mesh's nearest axis */
void resolve_type(Sema *s, const AstType *t, Shape *shape, Sharding *sh);
void resolve_axes(Sema *s, const AstAxes *ax, int dim, Sharding *sh, uint32_t *used);
uint32_t axes_arg(Sema *s, const Expr *e, int64_t *order, int *n);
void check_spmd_divisible(Sema *s, const Shape *shape, const Sharding *sh, Loc loc);

/* What subscripts ask of a tensor: a static range or a run-time offset per
 * dim, and whether the dim stays (slices) or goes (integer subscripts). */
typedef struct {
    int rank;
    int64_t start[MAX_RANK], limit[MAX_RANK];
    int dynamic[MAX_RANK];           /* run-time offset value, or -1 */
    int64_t size[MAX_RANK];          /* of a dynamic slice */
    int keep[MAX_RANK];
} SliceSpec;

/* expr.c: tensors in value statements */
int to_tensor(Sema *s, Val v, int dtype, Loc loc);
int expect_tensor(Sema *s, const Expr *e, const char *what);
Val binary_op(Sema *s, int op, Val a, Val b, Loc loc);
Val unary_op(Sema *s, Op op, const char *name, Val a, Loc loc);
Val elementwise2(Sema *s, Op op, Val a, Val b, Loc loc);
Val not_op(Sema *s, Val a, Loc loc);
_Noreturn void unknown_callee(Sema *s, const Expr *e);
/* An i32 or i64 index as i32 (i64 clamped to i32's range first). */
int index_as_i32(Sema *s, int v, Loc loc);
Val select_op(Sema *s, Val c, Val a, Val b, Loc loc);
Val tensor(int v);
int dtype_of_val(Sema *s, Val v);
Val index_value(Sema *s, const Expr *e);     /* x[lo:hi, k] in value context */
void slice_spec_init(SliceSpec *sp, const Shape *shape);
void slice_spec_select(Sema *s, SliceSpec *sp, int d, Val k, int64_t extent, Loc loc);
int emit_slices(Sema *s, int x, const SliceSpec *sp, Loc loc);
int broadcast_to(Sema *s, int v, const Shape *to, const int64_t *dims_map, Loc loc);

/* builtins.c */
struct Builtin {
    const char *name;
    int kind;                        /* BuiltinKind */
    int op;                          /* Op, Dtype or Reducer by kind */
    int min_args, max_args;
};
enum { BK_UNARY, BK_BINARY, BK_CAST, BK_REDUCTION, BK_SPECIAL, BK_COLLECTIVE, BK_RANDOM };
void builtins_init(Sema *s);
/* Argument i of call e, a tensor type (`where` names its place in messages:
 * "first", "last"); returns whether it writes a sharding. */
int type_arg(Sema *s, const Expr *e, int i, const char *where, Shape *shape, Sharding *sh);
int is_reduction_name(const char *name);
int is_normalization(const char *name);                     /* softmax[k](...), log_softmax[k](...) */
_Noreturn void not_a_reduction(Sema *s, const Expr *e);     /* called with index names, not a reduction */
Val call_value(Sema *s, const Expr *e, int nresults_wanted, Val *results);

/* grad_call.c: grad(f, [w...])(args), value_and_grad(f, [w...])(args) and
 * checkpoint(f)(args) */
Val transform_call(Sema *s, const Expr *e, int nresults_wanted, Val *results);
void near_add_transforms(Suggest *sg);       /* grad, value_and_grad, checkpoint: for a did-you-mean */
Val user_call(Sema *s, const Expr *e, int callee, int nwanted, Val *results);
/* A call of fn `callee`, named `name` in diagnostics, its instruction
 * given `flags` (INST_REMAT for checkpoint). */
Val fn_call(Sema *s, const Expr *e, int callee, const char *name, int flags, int nwanted, Val *results);

/* random.c: key, split, fold_in and the draws (docs/language.md#random-numbers) */
enum {
    RB_KEY, RB_SPLIT, RB_FOLD_IN, RB_BITS, RB_UNIFORM, RB_NORMAL, RB_TRUNCATED_NORMAL, RB_BERNOULLI, RB_RANDINT,
};
Val random_builtin(Sema *s, const Expr *e, int which);
/* records.c: the program with its records lowered to their tensor fields
 * (run before builtins_init: it interns the fields' names, `p.wq`) */
const AstProgram *lower_records(Sema *s, const AstProgram *prog);

/* replication.c */
void check_replication(Sema *s, Fn *fn);

/* index.c */
void lower_index_stmt(Sema *s, const Stmt *st);

#endif
