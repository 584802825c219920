/* Internals of compiler/partition, shared by its files: partition.c lowers
 * each op, reshard.c moves values between shardings, halo.c and
 * halo_concat.c exchange the halos of shifted slices, rolls, concats, pads
 * and reshapes, place.c moves values between submeshes. */
#ifndef SHARDC_PART_H
#define SHARDC_PART_H

#include "partition.h"

/* A value of the per-device program and the sharding its blocks have
 * (partial sums included), with the global shape it is a block of. */
typedef struct {
    int v;
    Sharding sh;
    Shape global;
    int place;                   /* the devices that hold it: 0 all, 1 + i submesh i (Inst.place) */
} Piece;

/* One reshard done in the function being built: block `from` of a value
 * with global shape `global` and sharding `sh`, resharded to `to` by
 * instructions that run where `place` says, gave block `out` (`out_sh`). */
typedef struct {
    int from, out;
    int prev;                    /* the reshard of `from` done before, + 1 (0: none) */
    uint8_t place;
    uint8_t warned;              /* it replicated a split value whole (warn again on reuse) */
    Sharding sh, to, out_sh;
    Shape global;
} Reshard;

/* The reshards done so far in one function (reshard.c), so that resharding
 * the same block the same way again reuses the first result instead of
 * emitting its collectives twice.  Each dst value heads a list of its own
 * reshards: a lookup scans only those. */
typedef struct {
    Reshard *items;              /* in the order they were done: a rollback pops them */
    int n, cap;
    int *last;                   /* dst value -> its latest reshard, + 1 (0: none) */
    int nlast;
} ReshardCache;

/* A top-k lowered on the blocks of its split last dim (topk.c): its
 * candidates' values all-gathered, and the positions among them of the
 * final k, with the sharding both have. */
typedef struct {
    int values;                  /* -1: not lowered so */
    int positions;
    Sharding sh;
} TopkCandidates;

/* Arguments a call in the source reshards with collectives (warned once). */
typedef struct {
    Loc loc;
    int callee, param;
    int64_t bytes;               /* sent per device, over all calls */
    int calls;
    const char *from, *to;       /* the shardings, as the dump prints them */
} CallReshard;

typedef struct {
    Module *m;
    Diag *diag;
    const Fn *src;               /* the global function */
    Fn *dst;                     /* the per-device function being built */
    Piece *value;                /* src value -> its piece in dst */
    Loc loc;                     /* of the src instruction being lowered */
    const Inst *name_of;         /* that instruction, named in warnings */
    uint8_t place;               /* where what is emitted now runs (Inst.place) */
    Piece *moved;                /* src value -> its last copy moved to another placement (v < 0: none) */
    int32_t *only_user;          /* src value -> its one user, or -1 (none) or -2 (several) */
    uint8_t *unbuilt_pad;        /* src value -> a pad that only slices read, never built (halo.c) */
    uint8_t *unbuilt_slice;      /* src value -> a slice that only rotations read, never built (halo.c) */
    ReshardCache reshards;
    CallReshard *call_reshards;
    int ncall_reshards, call_reshards_cap;
    TopkCandidates *top_k;       /* src value -> its candidates (NULL until a top-k is lowered so) */
} Part;

/* partition.c: the factor shardings an op's lowering asks for. */
typedef struct {
    const Rule *rule;
    int nfactor_axes[MAX_FACTORS];
    int factor_axes[MAX_FACTORS][MAX_AXES];
    uint32_t summed_axes;        /* axes splitting factors the result does not have */
} Plan;
/* Give tensor t's (the result's) axes to the major factor of each of its
 * dims, except axes a summed factor keeps. */
void plan_result_axes(Plan *pl, int t, const Sharding *sh);
/* The sharding tensor t of the op must have under the plan. */
Sharding plan_wanted(const Plan *pl, int t);
/* Drop `axes` from every factor of the plan: the op computes those dims
 * whole along them. */
void plan_without(Plan *pl, uint32_t axes);

int emit_local(Part *p, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
               const Shape *type);
/* Everything emitted after a mark can be taken back, so a failed or
 * weighed attempt leaves no dead instructions (or phantom collectives)
 * behind; the reshards it remembered are forgotten too. */
typedef struct {
    int ninsts, nargs, nints, nreshards, nmoves, nnotes;
} Mark;
Mark mark(const Part *p);
void rollback(Part *p, Mark k);
/* The bytes per device the collectives emitted since mark k send, and how
 * many there are. */
int64_t bytes_since(const Part *p, Mark k, int *ncollectives);
/* Block v all-gathered along dim over `axes` (n of them, major first). */
int all_gather_along(Part *p, int v, int dim, const int *axes, int n);
/* A collective-permute's attributes over `axes` (n of them) with room for
 * npairs (source, target) pairs after the header, which is written:
 * pairs go from attrs[1 + n] on. */
int64_t *permute_attrs(Part *p, const int *axes, int n, int64_t npairs);
int try_emit_local(Part *p, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
                   const Shape *type);
Piece reshard(Part *p, Piece x, const Sharding *to);
int reshard_done(const Part *p, const Piece *x, const Sharding *to);
/* Do a and b split each of the first `rank` dims by the same axes, in order? */
int same_split(const Sharding *a, const Sharding *b, int rank);
/* Forget the reshards done after the first n, whose instructions a
 * rollback has taken back. */
void reshard_forget(Part *p, int n);
int dim_is_even(const Module *m, const Shape *global, const Sharding *sh, int d);
int linear_index(Part *p, const int *axes, int n);
/* i32 tensor idx of positions along a dim split over `axes` into blocks
 * of `block`, made positions in the device's own block (idx minus the
 * block's start; outside it, they fall outside [0, block)). */
int shift_to_block(Part *p, int idx, const int *axes, int n, int64_t block);
int i32_constant(Part *p, int64_t value);
/* A tensor of shape s holding `value` everywhere (a constant, broadcast). */
int splat(Part *p, double value, const Shape *s);
/* x with `before` and `after` rows of zeros around it along dim (x itself
 * when both are 0 or less). */
int pad_zeros(Part *p, int x, int dim, int64_t before, int64_t after);
const char *inst_name(Part *p);
/* partition.c: print `note` after dst instruction v (Fn.notes). */
void add_note(Module *m, Fn *fn, int v, const char *note);
/* The sharding of a value of shape s as the dump prints it ("{X,_}"). */
const char *sharding_text(Part *p, const Shape *s, const Sharding *sh);
int mask_padding(Part *p, Piece x, int d, Reducer reducer);

/* report.c: the least bytes per device a move needs (docs/partitioning.md,
 * "The reshard report"), and the moves' collectives. */
int64_t reshard_min_bytes(const Part *p, const Piece *x, const Sharding *to);
/* An exchange of rows along one split dim (a slice, roll or concat): result
 * rows [at, at + len) are rows [src, src + len) of operand `operand`. */
typedef struct {
    int operand;
    int64_t at, len, src;
} Segment;
typedef struct {
    int64_t k;                   /* devices along the split axes */
    int64_t extent, block;       /* the result's dim and its blocks */
    const int64_t *operand_block;        /* each operand's blocks along the dim */
    const Segment *segment;
    int nsegments;
    int64_t row_bytes;           /* one row of a result block */
} Exchange;
int64_t exchange_min_bytes(const Part *p, const Exchange *ex);
/* Were collectives emitted since instruction `first` that no move has? */
int new_collectives(const Part *p, int first);
/* Attribute them to a move of value `of` (op: MOVE_RESHARD, MOVE_TRANSFER
 * or the exchanging op) that needs min_bytes per device. */
void note_move(Part *p, int first, int of, int op, int64_t min_bytes);

/* place.c: operand src value v as the devices of p->place hold it: moved
 * from another submesh (collective-permute), broadcast from a submesh to
 * the whole mesh (all-reduce), or gathered off the submesh's axis. */
Piece arrive(Part *p, int v);

/* partial.c: partial sums kept past the dot that is their only user. */
void find_only_users(Part *p);
/* The mesh axes sh holds partial results along, as a mask. */
uint32_t partial_axes(const Sharding *sh);
/* sh with `axes` set to `to` (SH_REPLICATED or SH_PARTIAL). */
Sharding sharding_without(const Sharding *sh, uint32_t axes, int8_t to);
/* Bytes per device to reduce src value v holding `partial`: now, or after
 * the dot that is its only user when that is cheaper. */
int64_t partial_sum_bytes(const Part *p, int v, const Sharding *partial);
/* Should src value v, lowered to x, stay partial for its dot? */
int keeps_partial(const Part *p, int v, const Piece *x);
/* Whether v's partial sums are kept for the add that uses it (partition only). */
int add_keeps_partial(const Part *p, int v, const Piece *x);
/* Is x's block wider than its dtype (bf16 or f16 partial sums in f32)? */
int piece_is_wide(const Part *p, const Piece *x);
/* Block v converted to sum_dtype (v itself when it is already): partial
 * sums of bf16 and f16 are held in f32. */
int widen(Part *p, int v);
/* x, reduced, rounded back to its global dtype when its block is wider. */
void narrow_reduced(Part *p, Piece *x);
/* What dot u does with its operand v (read once) holding partial sums
 * along `axes` (none: 0): its other operand, the sharding it reads that
 * one with (its contracted dims whole, and whole along the axes), and its
 * result's (partial sums along them), as propagation left the program. */
typedef struct {
    int other;
    Sharding other_sh, result_sh;
} DotReads;
DotReads dot_reads(const Part *p, int u, int v, uint32_t axes);

/* gather.c: a gather from a table split along its gathered dim, lowered
 * by all-gathering the table or by a masked local gather (GATHER_*). */
enum { GATHER_ALL, GATHER_MASKED };
/* Why the scheme was chosen: it sends fewer bytes; as many, with a lower
 * peak; as many with the same peak (the all-gather); or the other exceeds
 * Module.device_memory and it does not. */
typedef enum { CHOSEN_FEWER_BYTES, CHOSEN_LOWER_PEAK, CHOSEN_TIE, CHOSEN_WITHIN_BUDGET } ChosenBecause;
typedef struct {
    int scheme;                  /* the one chosen */
    int naxes, axes[MAX_AXES];   /* the axes splitting the table's gathered dim, major first */
    double sent[2];              /* bytes per device each scheme sends */
    double peak[2];              /* bytes a device holds for the op under each scheme */
    ChosenBecause because;
    int fits;                    /* the chosen scheme's peak is within Module.device_memory (or no limit) */
    int64_t budget;              /* Module.device_memory */
    int after_dot;               /* the masked scheme sums its results after the dot that reads them */
} GatherChoice;
/* The choice for src value v, a gather, from the propagated program alone
 * (its operands' and its own shardings): 0 when there is none to make. */
int gather_choice(const Part *p, int v, GatherChoice *c);
/* The choice and both costs, as the dumps print them after the gather. */
const char *gather_choice_note(Arena *arena, const GatherChoice *c);

/* halo.c and halo_concat.c: each returns 0 when its exchange does not
 * apply. */
int lower_split_roll(Part *p, const Inst *in, Piece *out);
int halo_reshard_dim(const Piece *x, const Sharding *to);
void halo_reshard(Part *p, Piece *x, const Sharding *to, int dim, int gather);
int lower_split_update_slice(Part *p, const Inst *in, Piece *out);
int lower_split_dynamic_slice(Part *p, const Inst *in, Piece *out);
int lower_split_slice(Part *p, const Inst *in, Piece *out);
int lower_split_concat(Part *p, const Inst *in, Piece *out);
int lower_split_cumsum(Part *p, const Inst *in, Piece *out);
int lower_split_reshape(Part *p, const Inst *in, Piece *out);
/* Set Part.unbuilt_pad (before lowering a function). */
void find_unbuilt_pads(Part *p);

/* topk.c: a top-k along a split last dim, from the blocks' candidates. */
typedef struct {
    int naxes, axes[MAX_AXES];   /* the axes splitting the operand's last dim, major first */
    int64_t block;               /* a device's block of it */
    int64_t local_k;             /* the candidates each block gives: min(k, block) */
} TopkSplit;
/* Is src value v a top-k that is lowered so (it sends fewer bytes than
 * all-gathering its operand)?  From the propagated program alone. */
int topk_split(const Module *m, const Fn *src, int v, TopkSplit *t);
/* Is src value v the gather of such a top-k's values (take_along_axis of
 * its operand)?  It is read from the candidates, with no collective. */
int topk_values_gather(const Module *m, const Fn *src, int v);
int lower_split_top_k(Part *p, const Inst *in, Piece *out);
int lower_whole_top_k(Part *p, const Inst *in, Piece *out);      /* its result's last dim split */
int lower_top_k_values(Part *p, const Inst *in, Piece *out);

/* scatter.c: a scatter-add on the devices' blocks; always applies. */
int lower_scatter(Part *p, const Inst *in, Piece *out);

#endif
