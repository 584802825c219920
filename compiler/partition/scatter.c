/* Lowering a scatter-add (docs/partitioning.md, "Scatters").  Each device
 * scatters into its block of the result:
 *   - the operand's dims that are not scattered keep the result's splits,
 *     and the updates' trailing dims are split the same way: local;
 *   - a scattered dim split over axes A: each device shifts the indices by
 *     its block's start, and the kernel drops the positions that fall
 *     outside its block (the indices are whole along A): local;
 *   - axes B splitting the updates' index dims (the tokens) stay there:
 *     each device scatters its own updates into zeros, the sum over B is
 *     reduced as the result's sharding asks, and then the operand is added;
 *     or the updates and indices are all-gathered along B and every device
 *     scatters all of them: whichever sends fewer bytes per device.  An
 *     embedding's gradient (a table of V rows, a batch of tokens split
 *     over B) sums partial tables: all-gathering the tokens' rows sends
 *     a fraction of that, and gives the global order of the sum.
 * Anything else is resharded to these first. */
#include "part.h"

/* Index tensor `idx` (local) shifted to the device's block of operand dim
 * d, when `local` splits it: position minus the block's start. */
static int shift_into_block(Part *p, int idx, const Sharding *local, int d, int64_t block) {
    int axes[MAX_AXES], n = sharding_dim_axes(local, d, axes);
    return n ? shift_to_block(p, idx, axes, n, block) : idx;
}

/* Lower scatter `in` with the updates' index dims split over axes b (the
 * tokens): each device scatters its own tokens into zeros and the partial
 * sums are reduced; b = 0 all-gathers them first.  *scatter: the local
 * scatter's instruction. */
static Piece scatter_blocks(Part *p, const Inst *in, Piece u, uint32_t b, int *scatter) {
    const Fn *src = p->src;
    int n = in->nargs - 2, nix = src->insts[ir_arg(src, in, 1)].type.rank;
    Piece x = p->value[ir_arg(src, in, 0)];
    Sharding tokens = sharding_replicated(), want_u;
    for (int a = 0; a < p->m->naxes; a++)
        if (b >> a & 1) {
            tokens.dim[a] = u.sh.dim[a];
            tokens.pos[a] = u.sh.pos[a];
        }
    Sharding local = sharding_without(&in->sh, b, SH_REPLICATED);
    local.open = 0;
    want_u = tokens;
    for (int d = 0, at = nix; d < in->type.rank; d++) {
        int scattered = 0;
        for (int j = 0; j < n; j++)
            scattered |= ir_attr(src, in, j) == d;
        for (int a = 0; a < p->m->naxes && !scattered; a++)
            if (local.dim[a] == d) {
                want_u.dim[a] = (int8_t)at;
                want_u.pos[a] = local.pos[a];
            }
        at += !scattered;
    }
    u = reshard(p, u, &want_u);
    for (int d = 0; d < nix; d++) {      /* padding tokens add zeros wherever their indices point */
        int axes[MAX_AXES];
        if (sharding_dim_axes(&u.sh, d, axes) && !dim_is_even(p->m, &u.global, &u.sh, d))
            u.v = mask_padding(p, u, d, RED_SUM);
    }
    Shape block = shape_local(p->m, &in->type, &local);
    int32_t args[MAX_RULE_TENSORS];
    int zeros = is_zeros(src, ir_arg(src, in, 0));
    args[0] = b || zeros ? splat(p, 0, &block) : reshard(p, x, &local).v;
    for (int j = 0; j < n; j++) {
        int d = (int)ir_attr(src, in, j);
        Piece idx = reshard(p, p->value[ir_arg(src, in, 1 + j)], &tokens);
        args[1 + j] = shift_into_block(p, idx.v, &local, d, block.dims[d]);
    }
    args[n + 1] = u.v;
    Sharding sh = local;
    for (int a = 0; a < p->m->naxes; a++)
        if (b >> a & 1)
            sh.dim[a] = SH_PARTIAL;      /* each device's tokens only */
    sh.reducer = RED_SUM;
    int v = *scatter = emit_local(p, OP_SCATTER, args, n + 2, ir_attrs(src, in), n, NULL);
    p->dst->insts[v].sh = sh;
    Piece out = {v, sh, in->type, p->place};
    if (!b || (zeros && add_keeps_partial(p, (int)(in - src->insts), &out)))
        return out;                      /* (summed with the add's other partial sums, once) */
    out = reshard(p, out, &in->sh);
    if (!zeros) {                        /* the operand once, after the sum */
        v = emit_local(p, OP_ADD, (int32_t[]){out.v, reshard(p, x, &in->sh).v}, 2, NULL, 0, NULL);
        p->dst->insts[v].sh = out.sh;
        out.v = v;
    }
    return out;
}

/* With the tokens split (axes b), both ways are tried: the partial sums
 * first, taken back, then the gathered updates, kept if they send fewer
 * bytes per device (else taken back too, and the partial sums emitted);
 * the choice becomes the scatter's note. */
int lower_scatter(Part *p, const Inst *in, Piece *out) {
    const Fn *src = p->src;
    int nix = src->insts[ir_arg(src, in, 1)].type.rank;
    Piece u = p->value[ir_arg(src, in, in->nargs - 1)];
    uint32_t b = 0;
    for (int a = 0; a < p->m->naxes; a++)
        if (u.sh.dim[a] >= 0 && u.sh.dim[a] < nix)
            b |= 1u << a;
    int n, at;
    if (!b) {
        *out = scatter_blocks(p, in, u, 0, &at);
        return 1;
    }
    Mark before = mark(p);
    scatter_blocks(p, in, u, b, &at);
    int64_t summed = bytes_since(p, before, &n);
    rollback(p, before);
    *out = scatter_blocks(p, in, u, 0, &at);
    int64_t gathered = bytes_since(p, before, &n);
    int gather = gathered < summed;
    if (!gather) {
        rollback(p, before);
        *out = scatter_blocks(p, in, u, b, &at);
    }
    const char *why = gather ? "the updates all-gathered (fewer bytes): %lld bytes per device; summing each "
                               "device's scatter would send %lld"
                             : "each device's scatter summed: %lld bytes per device; all-gathering the "
                               "updates would send %lld";
    add_note(p->m, p->dst, at, arena_printf(p->m->arena, why, (long long)(gather ? gathered : summed),
                                                (long long)(gather ? summed : gathered)));
    return 1;
}
