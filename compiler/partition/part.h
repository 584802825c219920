/* Internals of compiler/partition, shared by its two files:
 * partition.c lowers each op, reshard.c moves values between shardings. */
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

/* A reshard already emitted in this function: piece `from` brought to `to`
 * on the devices of `place` gives `out`.  The entries of one dst value are
 * chained through `next` from ReshardCache.head[from.v]. */
typedef struct {
    Piece from, out;
    Sharding to;
    int next;
    uint8_t place;
} Reshard;

typedef struct {
    Reshard *entry;
    int n, cap;
    int *head;                   /* per dst value: its newest entry, or -1 */
    int nhead;
} ReshardCache;

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
    ReshardCache cache;          /* reshard.c: one reshard of a value per target sharding */
} Part;

int emit_local(Part *p, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
               const Shape *type);
int try_emit_local(Part *p, Op op, const int32_t *args, int nargs, const int64_t *attrs, int nattrs,
                   const Shape *type);
/* x with sharding `to` (partial sums reduced, axes moved, gathered, sliced).
 * Resharding a value to a sharding it was resharded to before, on the same
 * devices, gives the earlier result and emits nothing. */
Piece reshard(Part *p, Piece x, const Sharding *to);
int dim_is_even(const Module *m, const Shape *global, const Sharding *sh, int d);
int linear_index(Part *p, const int *axes, int n);
const char *inst_name(Part *p);
int mask_padding(Part *p, Piece x, int d, Reducer reducer);

/* place.c: operand src value v as the devices of p->place hold it: moved
 * from another submesh (collective-permute), broadcast from a submesh to
 * the whole mesh (all-reduce), or gathered off the submesh's axis. */
Piece arrive(Part *p, int v);

/* halo.c: each returns 0 when its exchange does not apply. */
int lower_split_roll(Part *p, const Inst *in, Piece *out);
int lower_split_slice(Part *p, const Inst *in, Piece *out);
int lower_split_concat(Part *p, const Inst *in, Piece *out);

#endif
