/* The syntax tree the parser builds.  It is a faithful picture of the source:
 * names are interned symbols, nothing is resolved or checked yet.  Semantic
 * analysis (compiler/sema) reads it once and lowers it to the IR. */
#ifndef SHARDC_AST_H
#define SHARDC_AST_H

#include "base.h"

typedef struct Expr Expr;
typedef struct Stmt Stmt;

typedef struct { void **items; int n, cap; } PtrVec;
void ptrvec_push(Arena *a, PtrVec *v, void *p);

typedef enum {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) DT_##ID,
#include "../ir/dtypes.def"
#undef DTYPE
    DT_COUNT
} Dtype;
/* Names by dtype, and "tuple" after them (compiler/ir/ir.c). */
extern const char *const dtype_name[];
/* The end of the message for an unknown dtype `word`: ": dtypes are f32,
 * f64, ...", then "; did you mean 'f32'?" when one is near, or when the word
 * is near another language's name of one (flaot, double).  The parser (a
 * parameter's type) and sema (zeros(T), casts) say it. */
const char *dtype_hint(const char *word, char *buf, size_t cap);
/* Whether an unknown word, called as a function, is meant as a cast: it has
 * the form of a dtype name (a kind, then digits: i64, u8, f23, bf61) or is
 * near another language's name of one (flaot, int32). */
int dtype_like(const char *word);

/* `@X`, `@(X, Y)`, `@?`, `@auto` (the sharding search chooses), or nothing. */
typedef enum { AXES_NONE, AXES_LIST, AXES_OPEN, AXES_AUTO } AxesKind;
typedef struct {
    AxesKind kind;
    int n;
    int *syms;       /* axis names, major first */
    Loc *locs;
    Loc loc;         /* of the '@' */
} AstAxes;

typedef struct {
    Expr *size;
    AstAxes axes;
} AstDim;

typedef struct {
    Dtype dtype;
    int ndims;
    AstDim *dims;
    Loc loc;
    int record;      /* a record's name as a type (`p: Params`): 1 + its symbol; 0 for a tensor type */
} AstType;

/* Operators: single characters stand for themselves ('+', '<', ...); the
 * logic ops are the keywords and, or, xor and (unary) not. */
enum { OPR_LE = 256, OPR_GE, OPR_EQ, OPR_NE, OPR_AND, OPR_OR, OPR_XOR, OPR_NOT };

typedef enum {
    E_INT,      /* ival */
    E_FLOAT,    /* fval */
    E_NAME,     /* sym */
    E_UNARY,    /* op, lhs */
    E_BINARY,   /* op, lhs, rhs */
    E_CALL,     /* sym(args); sym[binders](args) for sum[k](e) and friends;
                 * with lhs, a call of a function transform: grad(f, [w])(args) */
    E_INDEX,    /* lhs[args]: einsum access, integer index, slice or gather */
    E_SLICE,    /* lo:hi inside a subscript; either side may be NULL */
    E_LIST,     /* [a, b, ...] */
    E_TUPLE,    /* (a, b, ...) */
    E_TYPE,     /* a tensor type used as a value: zeros(f32[8, 16]) */
    E_FIELD,    /* lhs.sym: a record's field (sema/records.c rewrites it away) */
    E_RECORD,   /* a record literal sym { f: e, ... }: args the values, binders the
                 * field names (E_NAME), in the order written (sema/records.c) */
} ExprKind;

struct Expr {
    ExprKind kind;
    int op;          /* E_UNARY / E_BINARY: a character or OPR_* */
    Loc loc;
    int sym;
    int64_t ival;
    double fval;
    Expr *lhs, *rhs;
    PtrVec args;     /* Expr*: call arguments, subscripts, list items */
    PtrVec binders;  /* Expr* (E_NAME) of sum[i, j](e); n == 0 otherwise */
    AstType *type;   /* E_TYPE */
    int depth;       /* height of the tree below: bounded so recursive passes cannot overflow the stack */
    /* Scratch for index statements (sema/index.c), recomputed each time the
     * statement is lowered: index labels occurring below this node, and the
     * labels an Einstein sum reduces at this node. */
    uint64_t occ, sum_here;
    int has_index;   /* an index name occurs below, bound by a reduction or not */
};

typedef struct {
    int sym;
    AstAxes axes;
    Loc loc;
    Expr *gather;           /* `idx[s]` on the left of `+=` (a scatter), else NULL */
    int whole;              /* `:`, a whole dim of a slot write (cache[l, :, pos] = k); sym is 0 */
} AstIndex;

typedef enum { S_ASSIGN, S_INDEX, S_MULTI, S_RETURN, S_FOR } StmtKind;

struct Stmt {
    StmtKind kind;
    Loc loc;
    int sym;                /* S_ASSIGN, S_INDEX target; S_FOR variable */
    PtrVec names;           /* S_MULTI: Expr* (E_NAME) targets */
    AstIndex *indices;      /* S_INDEX left side */
    int nindices;
    int add;                /* S_INDEX with `+=` */
    Expr *value;            /* right side */
    PtrVec values;          /* S_RETURN: Expr* */
    Expr *lo, *hi;          /* S_FOR bounds */
    PtrVec body;            /* S_FOR: Stmt* */
    Expr *field;            /* S_ASSIGN to a record's field, p.a.b = e: the E_FIELD target (sym is p) */
    AstType *check;         /* S_ASSIGN made by sema/records.c: the type its value must have, a field's */
    const char *check_what; /* that field, for the message: "field 'w' of record 'P'" */
};

typedef struct {
    int sym;
    AstType *type;
    Loc loc;
} AstParam;

typedef struct {
    int sym;
    int spmd;
    Loc loc;
    PtrVec params;          /* AstParam* */
    PtrVec results;         /* AstType* */
    PtrVec body;            /* Stmt* */
    Loc end;                /* closing brace */
    int on;                 /* `on NAME`: 1, with on_sym and on_loc; 0 without */
    int on_sym;
    Loc on_loc;
    int checkpoint;         /* `checkpoint fn`: every call is checkpoint(f)(...) */
} AstFn;

typedef struct {
    int sym;
    Expr *value;
    Loc loc;
} AstBinding;           /* `X = 2` in a mesh line, `N = 1024` in a const line, `first = S[0]` in a submesh line */

typedef enum { TOP_MESH, TOP_CONST, TOP_FN, TOP_SUBMESH, TOP_RECORD } TopKind;
typedef struct {
    TopKind kind;
    Loc loc;
    PtrVec bindings;        /* AstBinding*: mesh axes, constants or submeshes (`first = S[0]`) */
    AstFn *fn;
    int sym;                /* TOP_RECORD: its name */
    PtrVec fields;          /* TOP_RECORD: AstParam*, a field's name and type */
} AstTop;

typedef struct {
    PtrVec tops;            /* AstTop*, in source order */
    int ntransforms;        /* calls of grad(...)(...) and value_and_grad(...)(...): each may define one fn */
} AstProgram;

#endif
