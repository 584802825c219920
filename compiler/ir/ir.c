#include "ir.h"
#include "../base/suggest.h"

#include <stdlib.h>
#include <string.h>

const char *const dtype_name[DT_COUNT + 1] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [DT_##ID] = name,
#include "dtypes.def"
#undef DTYPE
    [DT_TUPLE] = "tuple",
};

/* Other languages' names of the dtypes (NumPy's, C's), each with the dtype
 * it means here; a dtype not (yet) in dtypes.def is never suggested. */
static const struct {
    const char *alias, *dtype;
} dtype_alias[] = {
    {"float", "f32"}, {"float32", "f32"}, {"double", "f64"}, {"float64", "f64"}, {"half", "f16"},
    {"float16", "f16"}, {"bfloat16", "bf16"}, {"int", "i32"}, {"int32", "i32"}, {"int64", "i64"},
    {"long", "i64"}, {"uint8", "u8"}, {"byte", "u8"}, {"uint32", "u32"}, {"boolean", "bool"},
};

static int dtype_named(const char *name) {
    for (int i = 0; i < DT_COUNT; i++)
        if (strcmp(name, dtype_name[i]) == 0)
            return 1;
    return 0;
}

/* The alias nearest to word (word itself included), or NULL. */
static const char *near_alias(const char *word) {
    Suggest sg = suggest_begin(word);
    for (size_t i = 0; i < sizeof dtype_alias / sizeof dtype_alias[0]; i++) {
        if (strcmp(word, dtype_alias[i].alias) == 0)
            return dtype_named(dtype_alias[i].dtype) ? dtype_alias[i].dtype : NULL;
        if (dtype_named(dtype_alias[i].dtype))
            suggest_add(&sg, dtype_alias[i].alias, -1);
    }
    for (size_t i = 0; sg.best && i < sizeof dtype_alias / sizeof dtype_alias[0]; i++)
        if (sg.best == dtype_alias[i].alias)
            return dtype_alias[i].dtype;
    return NULL;
}

const char *dtype_hint(const char *word, char *buf, size_t cap) {
    Suggest sg = suggest_begin(word);
    size_t n = (size_t)snprintf(buf, cap, ": dtypes are");
    for (int i = 0; i < DT_COUNT && n < cap; i++) {
        n += (size_t)snprintf(buf + n, cap - n, "%s %s", i ? "," : "", dtype_name[i]);
        if (word[0] == dtype_name[i][0])     /* the first letter is the kind: i64 is no misspelled f64 */
            suggest_add(&sg, dtype_name[i], -1);
    }
    const char *alias = sg.best ? NULL : near_alias(word);
    if (alias)
        sg.best = alias, sg.best_len = (int)strlen(alias);
    if (n < cap)
        suggest_text(&sg, buf + n, cap - n);
    return buf;
}

int dtype_like(const char *word) {
    static const char *const kinds[] = {"f", "i", "u", "b", "bf", "int", "uint", "float"};
    size_t letters = strspn(word, "abcdefghijklmnopqrstuvwxyz"), digits = strspn(word + letters, "0123456789");
    for (size_t k = 0; digits && !word[letters + digits] && k < sizeof kinds / sizeof kinds[0]; k++)
        if (strlen(kinds[k]) == letters && strncmp(word, kinds[k], letters) == 0)
            return 1;
    return near_alias(word) != NULL;
}

int dtype_size(int dt) {
    static const int size[DT_COUNT + 1] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [DT_##ID] = bytes,
#include "dtypes.def"
#undef DTYPE
    };
    return size[dt];
}

int dtype_is_float(int dt) {
    static const char is[DT_COUNT + 1] = {
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [DT_##ID] = is_float,
#include "dtypes.def"
#undef DTYPE
    };
    return is[dt];
}

int dtype_is_num(int dt) { return dt != DT_BOOL && dt != DT_U32 && dt != DT_I64 && dt != DT_U8; }
/* Elementwise arithmetic (ops.def's NUM ops), reductions and cumsum take
 * every dtype but bool: i64, u8 and u32 wrap as i32 does.  dtype_is_num's
 * users (dots, +=, explicit collectives, the partitioner's padded sums) do
 * not take them yet. */
int dtype_is_arith(int dt) { return dt != DT_BOOL; }

void module_init(Module *m, Arena *arena, Symtab *syms) {
    memset(m, 0, sizeof *m);
    m->arena = arena;
    m->syms = syms;
    for (int op = 0; op < OP_COUNT; op++)
        m->op_sym[op] = sym_intern(syms, op_info[op].name, strlen(op_info[op].name));
}

Fn *module_add_fn(Module *m, int sym, int spmd, Loc loc) {
    Fn *fn = VEC_PUSH(m->arena, m->fns, m->nfns, m->fns_cap);
    memset(fn, 0, sizeof *fn);
    fn->sym = sym;
    fn->spmd = spmd;
    fn->loc = loc;
    return fn;
}

Fn fn_without_body(const Fn *fn) {
    Fn out = *fn;
    out.insts = NULL, out.ninsts = out.insts_cap = 0;
    out.args = NULL, out.nargs = out.args_cap = 0;
    out.ints = NULL, out.nints = out.ints_cap = 0;
    out.moves = NULL, out.nmoves = out.moves_cap = 0;
    out.notes = NULL, out.nnotes = out.notes_cap = 0;
    out.peak_bytes = out.peak_nested = 0, out.nbuffers = 0;
    out.carried_in_place = NULL;
    return out;
}

void fn_drop_dead(Module *m, Fn *fn) {
    uint8_t *live = arena_alloc(m->arena, (size_t)fn->ninsts + 1);
    int dead = 0;
    for (int v = fn->ninsts - 1; v >= 0; v--) {
        const Inst *in = &fn->insts[v];
        live[v] |= in->op == OP_RETURN || in->op == OP_PARAMETER;
        dead += !live[v];
        for (int i = 0; i < in->nargs && live[v]; i++)
            live[ir_arg(fn, in, i)] = 1;
    }
    if (!dead)
        return;
    Fn old = *fn;
    *fn = fn_without_body(&old);
    fn->notes = old.notes, fn->nnotes = old.nnotes, fn->notes_cap = old.notes_cap;
    int32_t *map = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(old.ninsts + 1));
    int32_t *args = arena_alloc(m->arena, sizeof(int32_t) * (size_t)(old.nargs + 1));
    for (int v = 0; v < old.ninsts; v++) {
        const Inst *in = &old.insts[v];
        if (!live[v])
            continue;
        for (int i = 0; i < in->nargs; i++)
            args[i] = map[ir_arg(&old, in, i)];
        map[v] = ir_emit(m, fn, (Op)in->op, args, in->nargs, ir_attrs(&old, in), in->nattrs, &in->type, in->loc);
        Inst *out = &fn->insts[map[v]];
        Inst built = *out;
        *out = *in;              /* every field: name, sharding, why, flags, note */
        out->args = built.args, out->attrs = built.attrs, out->type = built.type;
        out->move = 0;
    }
}

int module_clone_fn(Module *m, int f, int sym) {
    Fn src = m->fns[f];                  /* module_add_fn may move m->fns */
    Fn *c = module_add_fn(m, sym, src.spmd, src.loc);
    *c = src;
    c->sym = sym;
    c->insts = arena_alloc(m->arena, sizeof(Inst) * (size_t)(src.ninsts + 1));
    memcpy(c->insts, src.insts, sizeof(Inst) * (size_t)src.ninsts);
    c->ints = arena_alloc(m->arena, sizeof(int64_t) * (size_t)(src.nints + 1));
    memcpy(c->ints, src.ints, sizeof(int64_t) * (size_t)src.nints);
    c->insts_cap = src.ninsts + 1;
    c->ints_cap = src.nints + 1;
    return (int)(c - m->fns);
}

static void visit_callees(const Module *m, int f, uint8_t *seen, int *order, int *n) {
    seen[f] = 1;
    const Fn *fn = &m->fns[f];
    for (int v = 0; v < fn->ninsts; v++)
        if (op_calls(fn->insts[v].op) && !seen[ir_attr(fn, &fn->insts[v], 0)])
            visit_callees(m, (int)ir_attr(fn, &fn->insts[v], 0), seen, order, n);
    order[(*n)++] = f;
}

void module_callees_first(const Module *m, int *order) {
    Arena scratch = {0};
    uint8_t *seen = arena_alloc(&scratch, (size_t)m->nfns + 1);
    int n = 0;
    for (int f = 0; f < m->nfns; f++)
        if (!seen[f])
            visit_callees(m, f, seen, order, &n);
    arena_free(&scratch);
}

/* Append an instruction.  `type` carries what the operands cannot tell (the
 * dtype of a convert, the shape of a reshape or constant); op_infer computes
 * the rest.  If the instruction is inconsistent, it is taken back and the
 * reason returned in *err (with err NULL, that is a compiler bug: abort). */
int ir_emit_checked(Module *m, Fn *fn, Op op, const int32_t *args, int nargs,
                    const int64_t *attrs, int nattrs, const Shape *type, Loc loc, const char **err) {
    int nargs_before = fn->nargs, nints_before = fn->nints;
    Inst *in = VEC_PUSH(m->arena, fn->insts, fn->ninsts, fn->insts_cap);
    memset(in, 0, sizeof *in);
    in->op = (uint16_t)op;
    in->sym = -1;
    in->loc = loc;
    in->why_from = in->why_from2 = in->why_root = -1;
    in->buffer = -1;
    in->args = fn->nargs;
    in->nargs = nargs;
    for (int i = 0; i < nargs; i++)
        *VEC_PUSH(m->arena, fn->args, fn->nargs, fn->args_cap) = args[i];
    in->attrs = fn->nints;
    in->nattrs = nattrs;
    for (int i = 0; i < nattrs; i++)
        *VEC_PUSH(m->arena, fn->ints, fn->nints, fn->ints_cap) = attrs[i];
    /* No type: the op infers it, and the rules that may take a given one
     * (a dot's wide sums) see that none was given. */
    if (type)
        in->type = *type;
    else
        in->type.dtype = DT_TUPLE;
    Shape out;
    const char *why = op_infer(m, fn, in, &out);
    if (why) {
        if (!err) {
            fprintf(stderr, "shardc: internal error: %s builds a bad %s: %s\n",
                    fn->sym >= 0 ? sym_name(m->syms, fn->sym) : "(constants)", op_info[op].name, why);
            abort();
        }
        *err = why;
        fn->ninsts--;
        fn->nargs = nargs_before;
        fn->nints = nints_before;
        return -1;
    }
    in->type = out;
    return fn->ninsts - 1;
}

int ir_emit(Module *m, Fn *fn, Op op, const int32_t *args, int nargs,
            const int64_t *attrs, int nattrs, const Shape *type, Loc loc) {
    return ir_emit_checked(m, fn, op, args, nargs, attrs, nattrs, type, loc, NULL);
}

uint32_t variation_rule(const Fn *fn, int v, uint32_t *keep) {
    const Inst *in = &fn->insts[v];
    *keep = ~0u;
    if (in->op == OP_PARAMETER)
        return sharding_split_axes(&fn->params[ir_attr(fn, in, 0)].sh);
    if (op_info[in->op].at_axes < 0)
        return 0;
    int n;
    const int64_t *axes = inst_axes(fn, in, &n);
    uint32_t mask = 0;
    for (int i = 0; i < n; i++)
        mask |= 1u << axes[i];
    if (op_info[in->op].flags & OPF_INVARIANT) {
        *keep = ~mask;
        return 0;
    }
    return mask;
}

void loop_variation(const Module *m, const Fn *fn, int v, const uint32_t *varies, uint32_t *params,
                    uint32_t *results) {
    const Inst *in = &fn->insts[v];
    const Fn *b = &m->fns[inst_callee(fn, in)];
    const Inst *ret = &b->insts[b->ninsts - 1];
    uint32_t *bv = arena_alloc(m->arena, sizeof(uint32_t) * (size_t)(b->ninsts + 1));
    for (int p = 0; p < b->nparams; p++)
        params[p] = p < in->nargs ? varies[ir_arg(fn, in, p)] : 0;
    /* Each pass adds an axis to a carried value or ends: a carried value
     * differs along what the iterations before leave it differing along. */
    for (int grew = 1; grew;) {
        fn_variation(m, b, params, bv);
        grew = 0;
        for (int k = 1; k <= b->loop_carried; k++) {
            uint32_t r = bv[ir_arg(b, ret, k - 1)];
            grew |= (r & ~params[k]) != 0;
            params[k] |= r;
        }
    }
    for (int i = 0; i < b->nresults; i++)
        results[i] = i < b->loop_carried ? params[1 + i] : bv[ir_arg(b, ret, i)];
}

/* A loop's results, each its own (loop_variation); the loop's tuple
 * differs along all of theirs. */
static uint32_t loop_results(const Module *m, const Fn *fn, int v, const uint32_t *varies, uint32_t **of) {
    const Fn *b = &m->fns[inst_callee(fn, &fn->insts[v])];
    uint32_t *params = arena_alloc(m->arena, sizeof(uint32_t) * (size_t)(b->nparams + 1));
    of[v] = arena_alloc(m->arena, sizeof(uint32_t) * (size_t)(b->nresults + 1));
    loop_variation(m, fn, v, varies, params, of[v]);
    uint32_t all = 0;
    for (int i = 0; i < b->nresults; i++)
        all |= of[v][i];
    return all;
}

void fn_variation(const Module *m, const Fn *fn, const uint32_t *params, uint32_t *varies) {
    uint32_t **loop_of = NULL;   /* a loop value -> its results' */
    for (int v = 0; v < fn->ninsts; v++) {
        const Inst *in = &fn->insts[v];
        const Inst *x = in->nargs ? &fn->insts[ir_arg(fn, in, 0)] : NULL;
        if (in->op == OP_LOOP) {
            if (!loop_of)
                loop_of = arena_alloc(m->arena, sizeof(uint32_t *) * (size_t)fn->ninsts);
            varies[v] = loop_results(m, fn, v, varies, loop_of);
            continue;
        }
        if (in->op == OP_GET_TUPLE_ELEMENT && x->op == OP_LOOP) {
            varies[v] = loop_of[ir_arg(fn, in, 0)][ir_attr(fn, in, 0)];
            continue;
        }
        uint32_t keep, adds = variation_rule(fn, v, &keep);
        varies[v] = adds | (in->op == OP_PARAMETER && params ? params[ir_attr(fn, in, 0)] : 0);
        for (int i = 0; i < in->nargs; i++)
            varies[v] |= varies[ir_arg(fn, in, i)] & keep;
    }
}

void row_major_strides(const Shape *s, int64_t stride[MAX_RANK]) {
    int64_t n = 1;
    for (int d = s->rank - 1; d >= 0; d--) {
        stride[d] = n;
        n *= s->dims[d];
    }
}

int64_t shape_elems(const Shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->dims[d];
    return n;
}

int shape_eq(const Shape *a, const Shape *b) {
    if (a->dtype != b->dtype || a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

Sharding sharding_replicated(void) {
    Sharding sh = {.known = 1};
    for (int a = 0; a < MAX_AXES; a++)
        sh.dim[a] = SH_REPLICATED;
    return sh;
}

int sharding_is_replicated(const Sharding *sh) {
    for (int a = 0; a < MAX_AXES; a++)
        if (sh->dim[a] != SH_REPLICATED)
            return 0;
    return 1;
}

uint32_t sharding_split_axes(const Sharding *sh) {
    uint32_t axes = 0;
    for (int a = 0; a < MAX_AXES; a++)
        if (sh->dim[a] >= 0)
            axes |= 1u << a;
    return axes;
}

int sharding_eq(const Sharding *a, const Sharding *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

int64_t axes_size(const Module *m, uint32_t mask) {
    int64_t n = 1;
    for (int a = 0; a < m->naxes; a++)
        if (mask >> a & 1)
            n *= m->axis_size[a];
    return n;
}

int64_t ir_replica_groups(const Module *m, const int64_t *axes, int naxes, int64_t *members) {
    int64_t stride[MAX_AXES], total = 1;
    for (int a = m->naxes - 1; a >= 0; a--) {
        stride[a] = total;
        total *= m->axis_size[a];
    }
    uint32_t in_group = 0;
    int64_t group_size = 1;
    for (int i = 0; i < naxes; i++) {
        in_group |= 1u << axes[i];
        group_size *= m->axis_size[axes[i]];
    }
    int64_t *next = members;
    for (int64_t dev = 0; dev < total; dev++) {
        int leader = 1;          /* the group's first member: coordinate 0 on every group axis */
        for (int a = 0; a < m->naxes; a++)
            if ((in_group >> a & 1) && (dev / stride[a]) % m->axis_size[a] != 0)
                leader = 0;
        if (!leader)
            continue;
        for (int64_t k = 0; k < group_size; k++) {
            int64_t id = dev, rest = k;
            for (int i = naxes - 1; i >= 0; i--) {
                int64_t size = m->axis_size[axes[i]];
                id += (rest % size) * stride[axes[i]];
                rest /= size;
            }
            *next++ = id;
        }
    }
    return group_size;
}

int sharding_dim_axes(const Sharding *sh, int d, int axes[MAX_AXES]) {
    int n = 0;
    for (int a = 0; a < MAX_AXES; a++)
        if (sh->known && sh->dim[a] == d)
            axes[n++] = a;
    /* Order by position: at most MAX_AXES items, insertion sort. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && sh->pos[axes[j]] < sh->pos[axes[j - 1]]; j--) {
            int t = axes[j];
            axes[j] = axes[j - 1];
            axes[j - 1] = t;
        }
    return n;
}

Shape shape_local(const Module *m, const Shape *global, const Sharding *sh) {
    Shape s = *global;
    if (!sh->known)
        return s;
    for (int a = 0; a < m->naxes; a++) {
        int d = sh->dim[a];
        if (d >= 0 && d < s.rank)
            s.dims[d] = (s.dims[d] + m->axis_size[a] - 1) / m->axis_size[a];
    }
    return s;
}

const Shape *result_type(const Fn *fn, int i) {
    const Inst *ret = &fn->insts[fn->ninsts - 1];
    return &fn->insts[ir_arg(fn, ret, i)].type;
}

int call_tuple_arrays(const Module *m, const Fn *fn, int v) {
    const Inst *in = &fn->insts[v];
    return op_calls(in->op) && in->type.dtype == DT_TUPLE ? m->fns[ir_attr(fn, in, 0)].nresults : 0;
}

int call_arrays(const Module *m, const Fn *fn, int v) {
    const Inst *in = &fn->insts[v];
    if (in->op != OP_LOOP)
        return call_tuple_arrays(m, fn, v);
    return call_tuple_arrays(m, fn, v) + m->fns[ir_attr(fn, in, 0)].nresults + loop_carried(fn, in);
}

const Shape *call_array_type(const Module *m, const Fn *fn, int v, int k) {
    static const Shape none[] = {        /* no elements: the unused half of an in-place ping-pong */
#define DTYPE(ID, name, bytes, ctype, npy, is_float) [DT_##ID] = {DT_##ID, 1, {0}},
#include "dtypes.def"
#undef DTYPE
    };
    const Inst *in = &fn->insts[v];
    const Fn *callee = &m->fns[ir_attr(fn, in, 0)];
    int tuple = call_tuple_arrays(m, fn, v);
    if (k < tuple)
        return result_type(callee, k);
    k -= tuple;
    int nc = loop_carried(fn, in);
    const Shape *t = result_type(callee, k < 2 * nc ? k / 2 : k - nc);
    return k < 2 * nc && k % 2 && loop_carried_in_place(callee, k / 2) ? &none[t->dtype] : t;
}

int call_collectives(const Module *m, const Fn *fn, const Inst *in) {
    int64_t k = m->fns[inst_callee(fn, in)].collectives_started;
    if (in->op == OP_LOOP && k) {
        int64_t trips = loop_trips(fn, in);
        k = trips < 0 || trips > (1 << 20) / k ? 1 << 20 : k * trips;
    }
    return (int)k;
}
