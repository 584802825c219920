/* Tensor types and shardings: `f32[B@X, D]`, `@(X, Y)`, `@?`. */
#include "sema.h"

#include <string.h>

_Noreturn void not_an_axis(Sema *s, int symbol, Loc loc) {
    check_axis_declared_later(s, symbol, loc);
    if (s->m->naxes == 0)
        sema_error(s, loc, "'%s' is not a mesh axis: the program declares no mesh", sym(s, symbol));
    sema_error(s, loc, "'%s' is not a mesh axis%s", sym(s, symbol), did_you_mean(s, symbol, NEAR_AXES));
}

/* Record axes `ax` as splitting `dim` of `sh`.  `used` collects the axes a
 * tensor's dims have taken so far: an axis splits at most one dim. */
void resolve_axes(Sema *s, const AstAxes *ax, int dim, Sharding *sh, uint32_t *used) {
    if (ax->kind == AXES_OPEN) {
        sh->open |= (uint8_t)(1u << dim);
        return;
    }
    if (ax->kind == AXES_AUTO) {     /* open until the search (compiler/autoshard) decides it */
        if (!s->auto_ok)
            sema_error(s, ax->loc, "'@auto' marks a dim of an entry fn's parameter or result for the sharding "
                                   "search; it is not allowed here");
        if (!s->auto_loc.line)
            s->auto_loc = ax->loc;
        s->auto_dims |= (uint8_t)(1u << dim);
        sh->open |= (uint8_t)(1u << dim);
        return;
    }
    for (int i = 0; i < ax->n; i++) {
        if (strcmp(sym(s, ax->syms[i]), "auto") == 0)
            sema_error(s, ax->locs[i], "'auto' is not a mesh axis: write '@auto' alone to let the sharding search "
                                       "choose the dim's axes");
        Binding *b = lookup(s, ax->syms[i]);
        if (!b || b->kind != B_AXIS)
            not_an_axis(s, ax->syms[i], ax->locs[i]);
        int a = b->index;
        const Submesh *sm = fn_submesh(s, s->fn);
        if (sm && sm->axis == a)     /* the fn runs where this axis has one coordinate */
            sema_error(s, ax->locs[i], "'%s' runs on %s, so its shardings cannot use %s", sym(s, s->fn->sym),
                       submesh_str(s, sm), sym(s, ax->syms[i]));
        if (*used >> a & 1)
            sema_error(s, ax->locs[i], "mesh axis '%s' splits more than one dim of this tensor", sym(s, ax->syms[i]));
        *used |= 1u << a;
        sh->dim[a] = (int8_t)dim;
        sh->pos[a] = (uint8_t)i;
    }
}

void resolve_type(Sema *s, const AstType *t, Shape *shape, Sharding *sh) {
    if (t->ndims > MAX_RANK)
        sema_error(s, t->loc, "a tensor has at most %d dims, this type has %d", MAX_RANK, t->ndims);
    *shape = (Shape){(uint8_t)t->dtype, (uint8_t)t->ndims, {0}};
    *sh = sharding_replicated();
    uint32_t used = 0;
    int64_t elems = 1;
    s->auto_dims = 0;
    for (int d = 0; d < t->ndims; d++) {
        const AstDim *dim = &t->dims[d];
        int64_t n = eval_const_int(s, dim->size, "a dimension");
        if (n < 1)
            sema_error(s, dim->size->loc, "dimension must be at least 1, not %lld", (long long)n);
        if (__builtin_mul_overflow(elems, n, &elems) || elems > INT64_MAX / 16)
            sema_error(s, dim->size->loc, "tensor type has too many elements");
        shape->dims[d] = n;
        resolve_axes(s, &dim->axes, d, sh, &used);
    }
}

/* In an spmd fn every split dim must divide evenly: the body sees blocks. */
void check_spmd_divisible(Sema *s, const Shape *shape, const Sharding *sh, Loc loc) {
    for (int d = 0; d < shape->rank; d++) {
        int axes[MAX_AXES], n = sharding_dim_axes(sh, d, axes);
        int64_t parts = 1;
        for (int i = 0; i < n; i++)
            parts *= s->m->axis_size[axes[i]];
        if (shape->dims[d] % parts)
            sema_error(s, loc, "dim %d of size %lld does not divide into %lld blocks; spmd fn needs even blocks",
                       d, (long long)shape->dims[d], (long long)parts);
    }
}

/* `X` or `(X, Y)` as an argument of size(), axis_index() and collectives.
 * Returns the axis mask; `order` gets the axes major first. */
uint32_t axes_arg(Sema *s, const Expr *e, int64_t *order, int *n) {
    const Expr *one[1] = {e};
    const Expr *const *items = e->kind == E_TUPLE ? (const Expr *const *)e->args.items : one;
    int count = e->kind == E_TUPLE ? e->args.n : 1;
    uint32_t mask = 0;
    *n = 0;
    for (int i = 0; i < count; i++) {
        const Expr *x = items[i];
        Binding *b = x->kind == E_NAME ? lookup(s, x->sym) : NULL;
        if (x->kind == E_NAME && !b)        /* psum(x, Xx): a typo, or an axis of a later mesh line */
            not_an_axis(s, x->sym, x->loc);
        if (!b || b->kind != B_AXIS)
            sema_error(s, x->loc, "expected a mesh axis name or a tuple of them");
        if (mask >> b->index & 1)
            sema_error(s, x->loc, "mesh axis '%s' is named twice", sym(s, x->sym));
        mask |= 1u << b->index;
        order[(*n)++] = b->index;
    }
    return mask;
}
