/* What halo.c and halo_concat.c share: the devices of an exchange, the
 * rows that cross blocks, and the exchanges both build on. */
#ifndef SHARDC_HALO_H
#define SHARDC_HALO_H

#include "part.h"

/* The devices along the split axes of an exchange, and per-device scalars:
 * the device's index along the axes is emitted once, on first use. */
typedef struct {
    Part *p;
    const int *axes;
    int naxes;
    int64_t k;
    int index;                   /* -1 until emitted */
} Devices;

typedef struct {
    int64_t src, len, at;
    int last;                    /* the block's real rows end with these: padding follows */
} Rows;

/* One row range that crosses devices: block q's rows go to block j. */
typedef struct {
    int64_t j, q;
    Rows r;
} Transfer;

/* Block x sliced to bounds (starts, then ends, per dim), or x itself when
 * they take it whole. */
int slice_unless_whole(Part *p, int x, const int64_t *bounds);

int slice_along(Part *p, int x, int dim, int64_t lo, int64_t hi);

/* Bytes of one row along dim of the local block v. */
int64_t row_bytes(const Part *p, int v, int dim);

/* The collectives since `first` are op's exchange of rows from block `of`
 * (the report's move; ex gets its row size here). */
void note_exchange(Part *p, int first, int of, int op, int dim, Exchange *ex);

/* Src value x rolled by `shift` along a split dim of even blocks, as sh
 * splits it.  With the shift s = q blocks + r rows and blocks of b rows, a
 * device's new block is the last r rows of the block q + 1 before it (the
 * halo), then the first b - r rows of the block q before it: each piece is
 * sliced before it is sent, so no more than a block moves.  `segments`
 * (NULL: roll's own) say where the result's rows come from, for the
 * report. */
Piece roll_as(Part *p, int x, int dim, int64_t shift, const Sharding *sh, const Shape *type, int op,
              const Segment *segments, int nsegments);

int device_index(Devices *dv);

/* Rows of x along `dim` from a per-device start (a static slice when the
 * start is one constant), `len` rows; x is padded with zeros at both ends
 * when a start would leave it, as a dynamic-slice would clamp it. */
int rows_at(Devices *dv, int x, int dim, const int64_t *start, const uint8_t *care, int64_t len);

/* The rows of a slice that cross devices, in collective-permutes: each
 * permute pairs senders and receivers at most once, takes transfers
 * longest first (first fit), and sends as many rows as its longest; a
 * sender starts where its receiver's rows start (or earlier, to stay in
 * its block), and the receiver puts the rows at their place in its block
 * and keeps only them. */
int permute_transfers(Devices *dv, int y, int dim, Transfer *t, int64_t nt, int acc, int64_t b, int64_t c);

/* A slice [lo, hi) along a split dim, result blocks of c rows: block j is
 * operand rows [lo + j c, lo + (j + 1) c), which lie in at most two
 * operand blocks of b >= c rows.  The rows a device holds are taken from
 * its own block (at a per-device offset when c != b); the others come in
 * collective-permutes, only the rows each device needs.  When c == b every
 * device needs the same pieces of the same neighbours (the rows r.. of
 * block j + q and ..r of block j + q + 1, lo = q b + r): static slices and
 * one permute each, as for roll; rows wrapped around past the end land in
 * the result's padding. */
int slice_exchange(Devices *dv, int y, int dim, int64_t lo, int64_t hi, int64_t b, int64_t c);

/* A pad along a split dim (a concat of constants around one value): a
 * window on the value, only the rows that cross blocks moving. */
int lower_split_pad(Part *p, const Inst *in, Piece *out);

/* A concat along a split dim of slices of one value x along that dim (or x
 * itself), each slice read by the concat only, x split along the dim too
 * (held whole, x slices locally for free) and built (not a pad only its
 * slices read): every result block's rows are runs of x's rows, which move
 * straight from x's blocks, so the slices are never built
 * (find_unbuilt_slices).  Not when a block would hold two runs of its own
 * rows.  Any dtype: rows are only sliced, sent and selected. */
int slices_of(const Part *p, const Inst *in, int *x);

#endif
