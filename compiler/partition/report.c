/* The reshard report: what each move of a value (a reshard, the rows a
 * slice, roll or concat exchanges, a transfer between submeshes) needs to
 * send at least, so that the partitioned dump can mark the collectives that
 * send more (docs/partitioning.md, "The reshard report").
 *
 * Bytes are per device, as the summary counts them (collective_bytes).  A
 * device must receive every element of its new block that its old block
 * does not hold; the minimum is the most any device must receive, with the
 * blocks taken as their padded local shapes.  Partial sums add the cheapest
 * reduction of the ring model. */
#include "part.h"

/* A device's block of one dim: rows [lo, hi). */
typedef struct {
    int64_t lo, hi;
} Span;

static int64_t overlap(Span a, Span b) {
    int64_t lo = a.lo > b.lo ? a.lo : b.lo, hi = a.hi < b.hi ? a.hi : b.hi;
    return hi > lo ? hi - lo : 0;
}

/* The extent of dim d padded to whole blocks of sh: ceil(n / k) * k. */
static int64_t padded(const Module *m, const Sharding *sh, int64_t n, int d) {
    int axes[MAX_AXES], na = sharding_dim_axes(sh, d, axes);
    int64_t k = 1;
    for (int i = 0; i < na; i++)
        k *= m->axis_size[axes[i]];
    return (n + k - 1) / k * k;
}

/* The block of dim d that the device at `coord` holds under sh: its padded
 * block when the dim is split, else the whole dim padded to `extent` (the
 * larger padded extent of the two shardings: padding is free to make where
 * the dim is whole, and an uneven dim is exchanged in padded blocks). */
static Span block_of(const Module *m, const Sharding *sh, int64_t n, int d, const int64_t *coord, int64_t extent) {
    int axes[MAX_AXES], na = sharding_dim_axes(sh, d, axes);
    int64_t k = 1, idx = 0;
    for (int i = 0; i < na; i++) {
        idx = idx * m->axis_size[axes[i]] + coord[axes[i]];
        k *= m->axis_size[axes[i]];
    }
    if (k == 1)
        return (Span){0, extent};
    int64_t b = (n + k - 1) / k;
    return (Span){idx * b, idx * b + b};
}

/* Each dim's larger padded extent under the two shardings. */
static void extents(const Module *m, const Shape *global, const Sharding *a, const Sharding *b, int64_t *extent) {
    for (int d = 0; d < global->rank; d++) {
        int64_t x = padded(m, a, global->dims[d], d), y = padded(m, b, global->dims[d], d);
        extent[d] = x > y ? x : y;
    }
}

/* The most elements any device must receive to turn its block under `from`
 * into its block under `to` (neither partial): the elements of the new
 * block outside the old one.  Devices are enumerated over the axes either
 * sharding uses (the others hold the same). */
static double most_to_receive(const Module *m, const Shape *global, const Sharding *from, const Sharding *to) {
    int axes[MAX_AXES], na = 0;
    for (int a = 0; a < m->naxes; a++)
        if (from->dim[a] >= 0 || to->dim[a] >= 0)
            axes[na++] = a;
    int64_t coord[MAX_AXES] = {0}, extent[MAX_RANK];
    extents(m, global, from, to, extent);
    double most = 0;
    for (;;) {
        double block = 1, held = 1;
        for (int d = 0; d < global->rank; d++) {
            Span t = block_of(m, to, global->dims[d], d, coord, extent[d]);
            block *= (double)(t.hi - t.lo);
            held *= (double)overlap(t, block_of(m, from, global->dims[d], d, coord, extent[d]));
        }
        most = block - held > most ? block - held : most;
        int i = na - 1;          /* the next device */
        while (i >= 0 && ++coord[axes[i]] == m->axis_size[axes[i]])
            coord[axes[i--]] = 0;
        if (i < 0)
            return most;
    }
}

static int64_t saturated(double bytes) { return bytes >= 9.2e18 ? INT64_MAX : (int64_t)bytes; }

/* The least a reshard of x to `to` sends per device.  Partial sums over
 * the axes the target splits by are reduce-scattered ((k - 1) / k of the
 * block, padded as the target pads) onto the dims the target puts them on,
 * after the axes already there; the other partial axes are all-reduced on
 * what is left (2 (k - 1) / k of it); then the block moves from there to
 * `to`. */
int64_t reshard_min_bytes(const Part *p, const Piece *x, const Sharding *to) {
    const Module *m = p->m;
    double k_scatter = 1, k_reduce = 1, block = dtype_size(x->global.dtype);
    Sharding reduced = x->sh;
    for (int a = 0; a < m->naxes; a++)
        if (x->sh.dim[a] == SH_PARTIAL) {
            reduced.dim[a] = SH_REPLICATED;
            *(to->dim[a] >= 0 ? &k_scatter : &k_reduce) *= (double)m->axis_size[a];
        }
    int64_t extent[MAX_RANK], origin[MAX_AXES] = {0};
    extents(m, &x->global, &reduced, to, extent);
    for (int d = 0; d < x->global.rank; d++) {
        Span s = block_of(m, &reduced, x->global.dims[d], d, origin, extent[d]);
        block *= (double)(s.hi - s.lo);
    }
    for (int d = 0; d < x->global.rank; d++) {
        int want[MAX_AXES], nw = sharding_dim_axes(to, d, want);
        for (int i = 0; i < nw; i++)
            if (x->sh.dim[want[i]] == SH_PARTIAL) {
                int have[MAX_AXES], nh = sharding_dim_axes(&reduced, d, have);
                reduced.dim[want[i]] = (int8_t)d;
                reduced.pos[want[i]] = (uint8_t)(nh ? reduced.pos[have[nh - 1]] + 1 : 0);
            }
    }
    /* Partial sums of bf16 and f16 are reduced in f32 (partial.c). */
    double sums = block / dtype_size(x->global.dtype) * dtype_size(sum_dtype(x->global.dtype));
    double bytes = sums * (k_scatter - 1) / k_scatter + sums / k_scatter * 2 * (k_reduce - 1) / k_reduce;
    bytes += most_to_receive(m, &x->global, &reduced, to) * dtype_size(x->global.dtype);
    return saturated(bytes);
}

/* The least an exchange along one split dim sends per device: each device
 * receives the rows of its result block (real rows, not padding) that its
 * own operand blocks do not hold, and sends the rows of its operand blocks
 * that other devices' result blocks hold; each row has one holder along
 * the axes, so both count.  The larger of the two, over the devices. */
int64_t exchange_min_bytes(const Part *p, const Exchange *ex) {
    int64_t k = ex->k, *recv = arena_alloc(p->m->arena, sizeof(int64_t) * (size_t)(2 * k)), *sent = recv + k, most = 0;
    for (int64_t j = 0; j < k; j++)
        for (int i = 0; i < ex->nsegments; i++) {
            const Segment *s = &ex->segment[i];
            int64_t lo = j * ex->block, hi = lo + ex->block < ex->extent ? lo + ex->block : ex->extent;
            lo = lo > s->at ? lo : s->at;
            hi = hi < s->at + s->len ? hi : s->at + s->len;
            int64_t b = ex->operand_block[s->operand];
            for (int64_t r = lo; r < hi;) {     /* rows [r, ...) of the result, by operand block */
                int64_t src = s->src + r - s->at, q = src / b, n = (q + 1) * b - src < hi - r ? (q + 1) * b - src : hi - r;
                if (q != j) {
                    recv[j] += n;
                    sent[q] += n;
                }
                r += n;
            }
        }
    for (int64_t j = 0; j < 2 * k; j++)
        most = recv[j] > most ? recv[j] : most;
    return saturated((double)most * (double)ex->row_bytes);
}

int new_collectives(const Part *p, int first) {
    for (int v = first; v < p->dst->ninsts; v++)
        if (op_is_collective(p->dst->insts[v].op) && !p->dst->insts[v].move)
            return 1;
    return 0;
}

void note_move(Part *p, int first, int of, int op, int64_t min_bytes) {
    Fn *fn = p->dst;
    Move *mv = VEC_PUSH(p->m->arena, fn->moves, fn->nmoves, fn->moves_cap);
    *mv = (Move){min_bytes, of, (int16_t)op};
    for (int v = first; v < fn->ninsts; v++)
        if (op_is_collective(fn->insts[v].op) && !fn->insts[v].move)
            fn->insts[v].move = fn->nmoves;
}
