/* The shardc IR: a typed SSA program in the spirit of XLA's HLO.
 *
 * A function is an array of instructions; an instruction's index is the
 * value it defines, and operands are earlier indices (a straight-line
 * program; a loop that sema does not unroll is one OP_LOOP instruction that
 * calls its body, a derived fn, once per iteration).  Every value carries a shape and a
 * sharding, so the same structures serve every stage from `parsed` (global
 * shapes, user shardings) to `partitioned` (per-device shapes, collectives). */
#ifndef SHARDC_IR_H
#define SHARDC_IR_H

#include "../base/ast.h"

enum { MAX_RANK = 8, MAX_AXES = 8 };

/* Dtypes beyond the user's: a call with several results yields a tuple. */
enum { DT_TUPLE = DT_COUNT };

typedef struct {
    uint8_t dtype;
    uint8_t rank;
    int64_t dims[MAX_RANK];
} Shape;

typedef enum { RED_SUM, RED_MAX, RED_MIN } Reducer;
typedef enum { CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_EQ, CMP_NE } Cmp;

/* A sharding is stored per mesh axis, which makes "an axis splits at most one
 * dim" true by construction: dim[a] is the tensor dim axis a splits, or
 * SH_REPLICATED, or SH_PARTIAL when the value holds unreduced partial results
 * along a.  Axes that split the same dim are ordered by pos[a], major first. */
enum { SH_REPLICATED = -1, SH_PARTIAL = -2 };
typedef struct {
    int8_t dim[MAX_AXES];
    uint8_t pos[MAX_AXES];
    uint8_t open;        /* bit d: dim d is open (`@?`): the compiler chooses */
    uint8_t reducer;     /* Reducer of the partial axes */
    uint8_t known;       /* 0: no sharding assigned (yet) */
} Sharding;

typedef enum {
#define OP(id, name, nargs, cls, kernel, flags, dtypes, prio, attrs) id,
#include "ops.def"
#undef OP
    OP_COUNT
} Op;

enum {
    INST_CONSTRAINED = 1,        /* sharding fixed by the user */
    INST_ASYNC = 2,              /* a collective that only starts; an OP_DONE waits for it */
    INST_FOLDED = 4,             /* computed by the next instruction that is not (scheduling: a dot's epilogue) */
    INST_VIEW = 8,               /* its operand's memory, not a copy (scheduling: a parameter reshaped or sliced) */
    INST_REMAT = 16,             /* a call checkpoint(f)(...): a gradient recomputes f rather than keep its residuals */
    INST_STRIDED = 32,           /* a view that is not one run: read by dots with its operand's strides */
    INST_IN_RUN = 64,            /* written straight into its run of the concatenate that reads it (scheduling) */
    INST_ASSEMBLED = 128,        /* a concatenate whose operands are all INST_IN_RUN: it copies nothing */
    INST_WRITTEN = 256,          /* its buffer is written by the next instruction that is neither this nor
                                    INST_FOLDED, whose call has several results (scheduling: an attention's gradient) */
};

typedef struct {
    uint16_t op;
    uint16_t flags;
    int32_t sym;                 /* source name, -1 for temporaries */
    int32_t args, nargs;         /* operands: Fn.args[args .. args+nargs) */
    int32_t attrs, nattrs;       /* attributes: Fn.ints[attrs ..) */
    double value;                /* OP_CONSTANT */
    Shape type;
    Sharding sh;
    Loc loc;
    /* Why the value has its sharding (set by propagation): a root kind, or
     * the neighbour it was taken from and the root that started the chain. */
    uint8_t why;                 /* Why */
    int32_t why_from, why_from2, why_root;   /* why_from2: a second source, or -1 */
    int32_t buffer;              /* after scheduling: the buffer holding the value, or -1 */
    /* Where the value lives (docs/language.md, "Submeshes and pipelines"):
     * 0 on every device of the mesh, 1 + i on Module.submesh[i] only.  In a
     * per-device program only those devices run the instruction. */
    uint8_t place;
    int32_t move;                /* after partitioning, a collective: 1 + its Move in Fn.moves, or 0 */
    int32_t note;                /* 1 + its line in Fn.notes (a partitioner's choice and its cost), or 0 */
} Inst;

typedef enum {
    WHY_NONE, WHY_PARAMETER, WHY_CONSTRAINT, WHY_CALL, WHY_RESULT, WHY_FORWARD, WHY_BACKWARD, WHY_DEFAULT,
    WHY_CALLER,                  /* in a specialization: from the values at its call sites */
} Why;

typedef struct {
    Shape type;                  /* global */
    Sharding sh;
    /* A result's name: 1 + the symbol of the local name the return
     * statement returns (`return l, w`), 0 for an expression (`return l *
     * 2.0`).  Set by sema, kept by every stage; 0 for parameters (their
     * OP_PARAMETER instruction has the name). */
    int32_t name;
} Sig;

/* One move of a value in a partitioned function: a reshard, an exchange of
 * the rows a slice, roll or concat moves between blocks, or a transfer
 * between submeshes.  Its collectives (Inst.move) should send no more than
 * min_bytes per device together, the least its shardings need
 * (docs/partitioning.md, "The reshard report"). */
enum { MOVE_RESHARD = -1, MOVE_TRANSFER = -2 };
typedef struct {
    int64_t min_bytes;
    int32_t of;                  /* the value moved: the instruction of its block before the move */
    int16_t op;                  /* MOVE_RESHARD, MOVE_TRANSFER, or the op whose rows it exchanges */
} Move;

typedef struct {
    int sym;
    int spmd;
    int partitioned;             /* rewritten per device by the partitioner */
    int kept_global;             /* a copy that spmd fns call on local blocks: never partitioned */
    int scheduled;               /* collectives split into start/done, buffers assigned */
    int64_t peak_bytes;          /* after scheduling: bytes of all buffers of one device */
    /* After scheduling: peak_bytes plus the largest peak_nested of the fns
     * it calls, whose buffers are taken on top of its own while they run
     * (sk_workspace_take is a stack): what one call of it holds at most. */
    int64_t peak_nested;
    int collectives_started;     /* after scheduling: how many a call starts, its callees' included */
    int nbuffers;
    Loc loc;
    Inst *insts;
    int ninsts, insts_cap;
    int32_t *args;
    int nargs, args_cap;
    int64_t *ints;
    int nints, ints_cap;
    Sig *params, *results;       /* declared global types and shardings */
    int nparams, nresults;
    Move *moves;                 /* after partitioning (Inst.move) */
    int nmoves, moves_cap;
    const char **notes;          /* (Inst.note) printed after the instruction: a partitioner's choice */
    int nnotes, notes_cap;
    int on;                      /* `fn ... on NAME`: 1 + its submesh, or 0 (the whole mesh) */
    Loc auto_loc;                /* its signature's first `@auto` (line 0: none) */
    uint8_t *autod;              /* per parameter, then per result: bit d, dim d is `@auto` (the
                                  * sharding search, compiler/autoshard); NULL: none is */
    int spec_of;                 /* a specialization (compiler/propagate/specialize.c): 1 + the generic fn, else 0 */
    /* A derived function (compiler/grad): grad_of is 1 + the fn it
     * differentiates, else 0.  Sema gives it a signature; the grad pass its
     * body.  It differentiates that fn's first result with respect to the
     * parameters grad_wrt lists, and with grad_value returns the fn's own
     * results before the gradients (value_and_grad).  vjp_of is 1 + the fn
     * whose vector-Jacobian product it is (a callee's backward pass), else 0. */
    int grad_of, grad_value, vjp_of;
    int32_t *grad_wrt;
    int ngrad_wrt;
    /* A loop body (compiler/sema/loop.c): loop_of is 1 + the fn whose `for`
     * it is, else 0.  Parameter 0 is the index, parameters 1 .. loop_carried
     * and the first loop_carried results are the carried values, which keep
     * one type and, after propagation, one sharding across iterations.  A
     * loop of run-time trip count passes its end as the last parameter, which
     * the body does not read. */
    int loop_of, loop_carried;
    uint8_t *carried_in_place;   /* after scheduling a loop body: per carried value, loop_carried_in_place */
} Fn;

enum { INST_IN_FOLD = INST_FOLDED | INST_WRITTEN };

/* Is value v zeros (sema's zeros(...): a constant 0, or a broadcast of one)? */
static inline int is_zeros(const Fn *fn, int v) {
    const Inst *in = &fn->insts[v];
    if (in->op == OP_BROADCAST)
        in = &fn->insts[fn->args[in->args]];
    return in->op == OP_CONSTANT && in->value == 0;
}

/* Is v the instruction whose kernel call computes the INST_FOLDED ones
 * right before it, and writes the INST_WRITTEN ones (a dot's epilogue, an
 * attention, compiler/schedule)? */
static inline int ends_fold(const Fn *fn, int v) {
    return v > 0 && (fn->insts[v - 1].flags & INST_IN_FOLD) && !(fn->insts[v].flags & INST_IN_FOLD);
}

/* ... whose fold is a dot's (its epilogue, a gather, an attention), not a
 * scatter's zeros, which sk_scatter_add writes itself (NULL operand). */
static inline int ends_dot_fold(const Fn *fn, int v) { return ends_fold(fn, v) && fn->insts[v].op != OP_SCATTER; }

/* Does v compute an attention's gradient (attention_grad_form), writing
 * the two INST_WRITTEN results right before it and its own? */
static inline int ends_attention_grad(const Fn *fn, int v) {
    return ends_fold(fn, v) && (fn->insts[v - 1].flags & INST_WRITTEN);
}

/* Is v a dot that computes an attention folded before it (attention_form),
 * not a gather (the only other fold a dot ends)? */
static inline int ends_attention(const Fn *fn, int v) {
    return fn->insts[v].op == OP_DOT && ends_fold(fn, v) && fn->insts[v - 1].op != OP_GATHER &&
           !ends_attention_grad(fn, v);
}

/* Is v a view of its operand's memory (a reshape or slice of it), whose
 * readers read that memory?  (Not a call's result: its array is the
 * call's, not its operand's.) */
static inline int views_operand(const Fn *fn, int v) {
    return fn->insts[v].flags & INST_VIEW && fn->insts[v].op != OP_GET_TUPLE_ELEMENT;
}

/* The operand an add ending a fold accumulates into, or -1: an f32 or f64
 * dot folded into an add of a value that dies there adds its product into
 * that value's buffer (BLAS's beta = 1), which becomes the add's
 * (compiler/schedule: an accumulator of a loop of dots needs no second
 * array, nor one for the product). */
static inline int accumulated_operand(const Fn *fn, int v) {
    const Inst *in = &fn->insts[v];
    if (in->op != OP_ADD || !ends_fold(fn, v))
        return -1;
    for (int i = 0; i < 2; i++) {
        const Inst *d = &fn->insts[fn->args[in->args + i]], *x = &fn->insts[fn->args[in->args + 1 - i]];
        if (d->op == OP_DOT && (d->flags & INST_FOLDED) && !(x->flags & INST_FOLDED))
            return fn->args[in->args + 1 - i];
    }
    return -1;
}

/* The instruction whose kernel call computes v: the first after it that is
 * neither INST_FOLDED nor INST_WRITTEN (v itself when v is not; folded runs
 * are a few long). */
static inline int folded_into(const Fn *fn, int v) {
    while (fn->insts[v].flags & INST_IN_FOLD)
        v++;
    return v;
}

/* `submesh NAME = AXIS[k]`: the devices whose coordinate along `axis` is `coord`. */
enum { MAX_SUBMESHES = 64 };
typedef struct {
    int sym;
    int axis;
    int64_t coord;
} Submesh;

typedef struct {
    Arena *arena;
    Symtab *syms;
    int naxes;
    int axis_sym[MAX_AXES];
    int64_t axis_size[MAX_AXES];
    Submesh submesh[MAX_SUBMESHES];
    int nsubmeshes;
    Fn *fns;
    int nfns, fns_cap;
    int op_sym[OP_COUNT];        /* op names interned, to name temporaries */
    /* Bytes one device may hold (--device-memory), 0 for no limit: the
     * partitioner avoids a lowering whose peak exceeds it when another fits
     * (docs/partitioning.md, "Gathers"). */
    int64_t device_memory;
    /* Note on each reshard the plans weighed and their bytes
     * (--reshard-candidates; docs/partitioning.md, "The reshard planner"). */
    int reshard_candidates;
} Module;

void module_init(Module *m, Arena *arena, Symtab *syms);

/* Does the body see local blocks (an spmd fn, or any fn after partitioning)? */
static inline int fn_is_local(const Fn *fn) { return fn->spmd || fn->partitioned; }

/* ---- op facts: the columns of ops.def (ops.c) ---- */
enum { OPF_COLLECTIVE = 1, OPF_INVARIANT = 2, OPF_FUSIBLE = 4, OPF_MOVES = 8 };
typedef enum { TY_ANY, TY_NUM, TY_FLOAT, TY_BOOL } TypeClass;
typedef struct {
    const char *name;
    int8_t nargs;                /* -1: variadic */
    uint8_t flags;               /* OPF_* */
    uint8_t dtypes;              /* TypeClass */
    uint8_t prio;                /* propagation: 0 first, 1 later */
    int8_t at_reducer, at_dim, at_axes;   /* attribute layout; -1: none */
} OpInfo;
extern const OpInfo op_info[OP_COUNT];

/* An elementwise op's formulas as text (lib/shardc_elementwise.def's
 * notation: K, M, T, x, y), NULL for other ops. */
typedef struct {
    const char *f, *i32;         /* floating point; the integer dtypes */
} OpFormula;
extern const OpFormula op_formula[OP_COUNT];
/* Does the op's floating-point formula call T(exp), sk_exp_f32: a call per
 * vector in a vectorized loop, through its vector variants
 * (lib/shardc_elementwise.h), where other helpers are inlined? */
int op_calls_exp(int op);

/* ---- reducer facts: what each Reducer is called and starts from, in the
 * dumps, the source, the trace, the generated C and the runtime ---- */
typedef struct {
    const char *hlo;             /* to_apply=: add, maximum, minimum */
    const char *builtin;         /* the TDSL reduction: sum, max, min */
    const char *partial;         /* the sharding's partial suffix: "", "_max", "_min" */
    const char *words;           /* show's description of a partial value */
    const char *start;           /* a generated accumulator's first value (C) */
    const char *omp;             /* the omp simd reduction operator */
    const char *keeps;           /* the comparison that keeps a new element (max, min), or NULL */
    const char *runtime;         /* the runtime's sc_reduce */
} ReducerInfo;
extern const ReducerInfo reducer_info[RED_MIN + 1];
/* The Reducer a TDSL reduction (sum, max, min) names; -1 for none. */
int reducer_named(const char *builtin);

static inline int op_is_collective(int op) { return op_info[op].flags & OPF_COLLECTIVE; }
/* Can the op compute on dtype dt (its TypeClass)? */
int op_accepts(int op, int dt);

/* A factor rule: the op's iteration space as factors, and for each operand
 * (then the result) which factors each dim is made of, major first. */
enum { MAX_FACTORS = 24, MAX_RULE_TENSORS = 33, MAX_DIM_FACTORS = MAX_RANK };
typedef enum {
    FACTOR_PASS,         /* in operands and result with the same extent */
    FACTOR_REDUCTION,    /* in operands only: summed away */
    FACTOR_REPLICATE,    /* extents differ between tensors (slice, concat, roll) */
} FactorKind;
typedef struct {
    int nfactors, ntensors;      /* tensors: operands, then the result */
    int64_t size[MAX_FACTORS];
    uint8_t kind[MAX_FACTORS];
    uint8_t rank[MAX_RULE_TENSORS];
    uint8_t ndf[MAX_RULE_TENSORS][MAX_RANK];
    uint8_t f[MAX_RULE_TENSORS][MAX_RANK][MAX_DIM_FACTORS];
} Rule;

/* Infer the result shape of `in` from its operands and attributes.  Returns
 * NULL, or a message saying what is inconsistent. */
const char *op_infer(const Module *m, const Fn *fn, const Inst *in, Shape *out);
/* Build the factor rule; returns 0 for ops without one (leaves, calls,
 * collectives, too many operands). */
int op_rule(const Fn *fn, const Inst *in, Rule *rule);

/* How value v of an spmd fn varies across devices (JAX's replication
 * check): returns the mesh axes along which v starts to differ (a
 * parameter split over them, axis_index, a collective that leaves its
 * result different per device), and sets *keep to the axes along which it
 * differs wherever its operands differ (all but a psum's or all_gather's).
 * Not for a loop, whose results fn_variation finds from its body. */
uint32_t variation_rule(const Fn *fn, int v, uint32_t *keep);
/* The axes each value of spmd fn `fn` differs along, into varies[ninsts];
 * parameter p differs along params[p] too (NULL: none; a loop body's are
 * its loop's, loop_variation).  A loop's results differ along what their
 * iterations leave them differing along, each its own. */
void fn_variation(const Module *m, const Fn *fn, const uint32_t *params, uint32_t *varies);
/* Of loop instruction v of fn, its values before v varying as varies[]:
 * what its body's parameters differ along (params[nparams]: a carried
 * value along what every iteration leaves it differing along, a fixed
 * point) and its results (results[nresults]: a carried one as its
 * parameter). */
void loop_variation(const Module *m, const Fn *fn, int v, const uint32_t *varies, uint32_t *params,
                    uint32_t *results);

/* ---- building (ir.c) ---- */
Fn *module_add_fn(Module *m, int sym, int spmd, Loc loc);
/* fn's name, signature and kind with an empty body: what a pass that
 * rebuilds a function's instructions starts from. */
Fn fn_without_body(const Fn *fn);
/* Drop fn's values that nothing returned reads (a loss a backward fn does
 * not return, the zeros a partitioned scatter replaced with its own): every
 * op is pure, so they are dead; parameters stay, and so does every field
 * of what stays but its Move (Fn.moves, the partitioner's record, which
 * scheduling drops too).  One pass back; one forward where any is dead. */
void fn_drop_dead(Module *m, Fn *fn);
/* Append a copy of fn f named `sym` whose instructions and attributes are
 * its own (the operand lists are shared: passes rewrite attributes, never
 * operands in place).  Returns its index. */
int module_clone_fn(Module *m, int f, int sym);
/* Every function of m once, each after the functions it calls (calls form
 * no cycle: sema rejects recursion); order has room for m->nfns. */
void module_callees_first(const Module *m, int *order);
/* The type of fn's result i: the returned value's (after partitioning,
 * local). */
const Shape *result_type(const Fn *fn, int i);
/* The arrays a call's results are written to, beside the caller's buffers
 * (scheduling counts them, codegen lays them out): one per result of a call
 * with several (the first call_tuple_arrays), and for a loop also two per
 * carried value (the ping-pong of its iterations) and one per other result.
 * call_array_type gives array k's type. */
int call_tuple_arrays(const Module *m, const Fn *fn, int v);
int call_arrays(const Module *m, const Fn *fn, int v);
const Shape *call_array_type(const Module *m, const Fn *fn, int v, int k);
/* Can carried value j of scheduled loop body `body` stay in one array
 * across the iterations: the body's result j a dynamic-update-slice of
 * parameter 1 + j, written straight into its result array (codegen's
 * returned_in_place), the parameter read by nothing that runs after it?
 * Then the loop passes that one array as both, each iteration writes only
 * its slot (a stack of saved values costs a slot per iteration, not a copy
 * of the stack), and the other ping-pong array has no elements. */
static inline int loop_carried_in_place(const Fn *body, int j) {
    return body->carried_in_place && body->carried_in_place[j];   /* decided by compiler/schedule */
}
int ir_emit(Module *m, Fn *fn, Op op, const int32_t *args, int nargs,
            const int64_t *attrs, int nattrs, const Shape *type, Loc loc);
int ir_emit_checked(Module *m, Fn *fn, Op op, const int32_t *args, int nargs,
                    const int64_t *attrs, int nattrs, const Shape *type, Loc loc, const char **err);
static inline const int64_t *ir_attrs(const Fn *fn, const Inst *in) { return in->nattrs ? &fn->ints[in->attrs] : NULL; }
/* A dot's labels as HLO dims: pairs of operand dims that are batch dims
 * (in the result) or contracting dims (summed). */
typedef struct {
    int nbatch, ncontract;
    int64_t lhs_batch[MAX_RANK], rhs_batch[MAX_RANK], lhs_contract[MAX_RANK], rhs_contract[MAX_RANK];
} DotDims;
void dot_dims(const Fn *fn, const Inst *dot, DotDims *d);
/* The dtype sums of dt accumulate in: f32 for bf16 and f16, which are
 * rounded once (docs/language.md); dt itself for the others. */
int sum_dtype(int dt);
/* A wide dot writes the f32 sums of its bf16 or f16 operands unrounded:
 * only in a partitioned fn, where they are partial sums reduced in f32
 * and rounded once after (op_infer, compiler/partition/partial.c). */
static inline int dot_is_wide(const Fn *fn, const Inst *in) {
    return in->op == OP_DOT && in->type.dtype != fn->insts[fn->args[in->args]].type.dtype;
}
/* A dot of gathered rows of a table of matrices, w[e, k, n] (or w[e, n, k]
 * when trans), by x: result row p is x's row p / rep times w[idx[p]]; the
 * gathered [rows, k, n] value itself is never needed (sk_gather_dot). */
typedef struct {
    int gather;                  /* the dot's gather operand */
    int trans;
    int64_t e, k, n, rows, rep;
} GatherDot;
int gather_dot_form(const Fn *fn, const Inst *dot, int side, GatherDot *gd);
/* Softmax attention ending in a dot (compiler/ir/attention.c): the dot's
 * result is sum_t softmax_t(scale * q[s, :] . k[t, :] + mask[s, t]) v[t, :]
 * for each index of the batch dims, q, k and v of float dtypes (the
 * scores' sums and the softmax in f32; the probabilities may be rounded
 * to v's dtype), the result of v's or f32, and `members` are the
 * instructions between q, k, v, the mask and the dot, which
 * sk_attention computes without their [batch..., S, T] values.  Strides
 * are in elements of each dense value, batch dims in the scores' order;
 * the last dims of q, k, v and the result are contiguous. */
enum { ATTENTION_MAX_MEMBERS = 16 };
typedef struct {
    int q, k, v, mask;           /* values; the mask, [S, T], or -1 */
    int dtype, v_dtype, out_dtype;   /* q and k's, v's (sk_attention: the same), the result's */
    int causal;                  /* the mask is where(t > s, fill <= -1e9, 0): masked by position */
    double scale;
    int nbatch;
    int64_t batch[MAX_RANK], q_batch[MAX_RANK], k_batch[MAX_RANK], v_batch[MAX_RANK], out_batch[MAX_RANK];
    int64_t S, T, K, Kv, q_row, k_row, v_row, out_row, mask_row;
    int members[ATTENTION_MAX_MEMBERS], nmembers;   /* in program order */
} AttentionForm;
int attention_form(const Fn *fn, int dot, AttentionForm *af);
/* The gradient of a softmax attention as compiler/grad's attention rule
 * emits it (compiler/ir/attention.c): the probabilities p recomputed from
 * q, k and the mask, then dv = p^T dout, dp = dout v^T,
 * ds = p (dp - sum_t p dp) scale, dq = ds k and dk = ds^T q, p and ds
 * rounded to q's dtype before their products when it is narrow.  `outs`
 * are the three values written (each a dot, or a transpose of one that
 * puts its last dim last), in any order; af holds q, k, v, the mask and
 * the batch dims as attention_form's (its out fields unused), the rest
 * sk_attention_grad's operands.  The members are every instruction from
 * q, k, v, dout and the mask to the three, the transposed dots included. */
enum { ATTENTION_GRAD_MAX_MEMBERS = 40 };
typedef struct {
    AttentionForm af;
    int dout, dq, dk, dv;        /* values: dout's dtype is its own; dq, dk and dv's the grad's */
    int grad_dtype;
    int64_t dout_batch[MAX_RANK], dq_batch[MAX_RANK], dk_batch[MAX_RANK], dv_batch[MAX_RANK];
    int64_t dout_row, dq_row, dk_row, dv_row;
    int members[ATTENTION_GRAD_MAX_MEMBERS], nmembers;   /* in program order */
} AttentionGradForm;
int attention_grad_form(const Fn *fn, const int outs[3], AttentionGradForm *gf);
/* The form of the gradient instruction v computes in a scheduled fn
 * (ends_attention_grad: its results are v - 2, v - 1 and v), or 0. */
int attention_grad_at(const Fn *fn, int v, AttentionGradForm *gf);
/* How many operand slots of the instructions set[0..n) and `last` read x. */
int reads_within(const Fn *fn, const int *set, int n, int last, int x);
/* Do only af's members and its last dot read its members?  uses: per
 * value, how many operand slots read it. */
int attention_private(const Fn *fn, const AttentionForm *af, int last, const int *uses);

/* Bytes one device sends in a collective, by the ring model (docs/partitioning.md). */
int64_t collective_bytes(const Module *m, const Fn *fn, const Inst *in);
static inline Inst *ir_inst(const Fn *fn, int v) { return &fn->insts[v]; }
static inline int32_t ir_arg(const Fn *fn, const Inst *in, int i) { return fn->args[in->args + i]; }
static inline int64_t ir_attr(const Fn *fn, const Inst *in, int i) { return fn->ints[in->attrs + i]; }

/* Ops that run another fn: a call, and a loop (its body once per
 * iteration).  Both hold the callee in attrs[0] and pass their operands as
 * its parameters, so the passes that follow calls follow loops alike. */
static inline int op_calls(int op) { return op == OP_CALL || op == OP_LOOP; }
static inline int inst_callee(const Fn *fn, const Inst *in) { return (int)ir_attr(fn, in, 0); }
/* A loop's trip count (-1: known at run time, the index running from the
 * first operand to the last) and how many of its body's results are carried. */
static inline int64_t loop_trips(const Fn *fn, const Inst *in) { return ir_attr(fn, in, 1); }
/* The trip count for cost estimates: a run-time one counts once. */
static inline int64_t loop_trips_known(const Fn *fn, const Inst *in) {
    return loop_trips(fn, in) < 0 ? 1 : loop_trips(fn, in);
}
static inline int loop_carried(const Fn *fn, const Inst *in) { return (int)ir_attr(fn, in, 2); }

/* The runtime lets a device start a group's collective only once the one
 * it started COLLECTIVE_WINDOW before is done (SC_MAX_PENDING,
 * runtime/shardc_rt.h).  The scheduler keeps every fn within it, counting
 * the collectives of all groups and those its calls start, and the
 * verifier checks that it did. */
enum { COLLECTIVE_WINDOW = 8 };
/* How many collectives a scheduled call or loop starts (and finishes):
 * a loop's body in every iteration, capped at 2^20 (past the window any
 * count is as good; a run-time trip count counts as the cap). */
int call_collectives(const Module *m, const Fn *fn, const Inst *in);

/* Typed attributes, at the places ops.def's layout gives them. */
static inline Reducer inst_reducer(const Fn *fn, const Inst *in) {
    return (Reducer)ir_attr(fn, in, op_info[in->op].at_reducer);
}
/* The op's dim (an all-to-all's split dim, whose concat dim follows it). */
static inline int inst_dim(const Fn *fn, const Inst *in) { return (int)ir_attr(fn, in, op_info[in->op].at_dim); }
static inline int inst_concat_dim(const Fn *fn, const Inst *in) {
    return (int)ir_attr(fn, in, op_info[in->op].at_dim + 1);
}
/* The mesh axes of an axis-index or a collective, major first: *n of them. */
static inline const int64_t *inst_axes(const Fn *fn, const Inst *in, int *n) {
    int first = op_info[in->op].at_axes;
    *n = in->op == OP_COLLECTIVE_PERMUTE ? (int)ir_attr(fn, in, 0) : in->nattrs - first;
    return &fn->ints[in->attrs + first];
}
/* A gather's attributes: [dim, mode, (table dim, indices dim) pairs...].
 * Its mode says what an index outside the gathered dim reads: GATHER_CLAMP,
 * the element it is clamped to (the language's gathers), or GATHER_FILL,
 * zeros (a device's local gather from its own block of a split table). */
enum { GATHER_CLAMP, GATHER_FILL };
/* A top-k's order, its attrs[1]: 0 smallest first, 1 largest first (NaN
 * first either way, jax.lax.top_k), or TOP_K_ASCENDING, numpy.sort's order
 * (smallest first, NaN last) for sort and argsort; the kernel library's
 * SK_ASCENDING has the same value. */
enum { TOP_K_ASCENDING = 2 };
static inline int inst_gather_mode(const Fn *fn, const Inst *in) { return (int)fn->ints[in->attrs + 1]; }
/* A gather's batch dims: *n (table dim, indices dim) pairs. */
static inline const int64_t *inst_gather_batch(const Fn *fn, const Inst *in, int *n) {
    *n = (in->nattrs - 2) / 2;
    return &fn->ints[in->attrs + 2];
}
/* A scatter's index tensors are operands 1 .. n; the operand dim each
 * scatters into is attribute i. */
static inline int inst_scatter_nidx(const Inst *in) { return in->nargs - 2; }
/* A collective-permute's (source, target) pairs, coordinates in the group. */
static inline const int64_t *inst_pairs(const Fn *fn, const Inst *in, int *npairs) {
    int naxes;
    const int64_t *axes = inst_axes(fn, in, &naxes);
    *npairs = (in->nattrs - 1 - naxes) / 2;
    return axes + naxes;
}

int64_t shape_elems(const Shape *s);
/* The strides, in elements, of a dense row-major value of shape s. */
void row_major_strides(const Shape *s, int64_t stride[MAX_RANK]);
int shape_eq(const Shape *a, const Shape *b);
int sharding_eq(const Sharding *a, const Sharding *b);
Sharding sharding_replicated(void);        /* known, every axis replicated */
int sharding_is_replicated(const Sharding *sh);
uint32_t sharding_split_axes(const Sharding *sh);   /* mask of the axes that split a dim */
int64_t axes_size(const Module *m, uint32_t axis_mask);
/* The device groups of a collective over `axes` (major first), as the dump
 * prints them and the interpreter runs them: one group per coordinate of the
 * other axes, listed by their first device id, members in order of their
 * coordinate along `axes`.  Writes every device id of the mesh once into
 * `members` (sized for all devices), group after group; returns the group
 * size. */
int64_t ir_replica_groups(const Module *m, const int64_t *axes, int naxes, int64_t *members);
/* Local (per-device) shape of a global shape under a sharding: split dims
 * rounded up, as uneven dims are padded to the ceiling. */
Shape shape_local(const Module *m, const Shape *global, const Sharding *sh);
/* Axes splitting dim d, major first; returns how many. */
int sharding_dim_axes(const Sharding *sh, int d, int axes[MAX_AXES]);
int dtype_is_float(int dt);
/* dtype_is_num: f32, f64, bf16, f16, i32 (what dots, +=, scatter-adds,
 * collectives' sema checks and the partitioner's padded sums take);
 * dtype_is_arith: every dtype but bool (elementwise arithmetic, reductions,
 * cumsum: i64, u8 and u32 wrap as i32 does). */
int dtype_is_num(int dt);
int dtype_is_arith(int dt);
int dtype_size(int dt);                     /* bytes of one element */

/* ---- checking and printing ---- */
/* Check every invariant of the module; returns NULL or a description of
 * the first violation (a compiler bug, not a user error). */
enum { VERIFY_MSG_SIZE = 256 };
const char *ir_verify(const Module *m, char buf[VERIFY_MSG_SIZE]);
/* Print the IR; `show_why` adds where each sharding came from. */
void ir_dump(const Module *m, FILE *out, int only_fn_sym, int show_why);
/* ir_dump with extra text: after each instruction (before its newline) and
 * after each fn's summary (dump --cost, compiler/cost). */
typedef struct {
    void *ctx;
    void (*inst)(void *ctx, FILE *out, const Module *m, int fn, int v);
    void (*fn)(void *ctx, FILE *out, const Module *m, int fn);
} DumpHooks;
void ir_dump_hooked(const Module *m, FILE *out, int only_fn_sym, int show_why, const DumpHooks *hooks);
void ir_print_shape(FILE *out, const Shape *s);
/* The names the dump gives a function's values (without the %), and every
 * function's: names[f][v]. */
const char **ir_value_names(const Module *m, const Fn *fn, Arena *arena);
const char ***ir_module_value_names(const Module *m, Arena *arena);
/* Instruction v as the dump prints it, without indent, newline or the
 * sharding's origin; `names` are the function's value names. */
void ir_print_inst(FILE *out, const Module *m, const Fn *fn, int v, const char *const *names);
void ir_print_sharding(FILE *out, const Module *m, const Shape *s, const Sharding *sh);

#endif
