/* Unit tests of the IR layer: op rules, the verifier, shape helpers.  The
 * IR is built by hand here, so these catch verifier and rule bugs that sema
 * can never produce.  Output is TAP-like: "ok N - ..." / "not ok N - ...". */
#include "../../compiler/ir/ir.h"

#include <string.h>

static int test_no;

static void check(int cond, const char *what) {
    printf("%sok %d - %s\n", cond ? "" : "not ", ++test_no, what);
}

typedef struct {
    Arena arena;
    Symtab syms;
    Module m;
    Fn *fn;
} Fixture;

static void setup(Fixture *f, int naxes) {
    memset(f, 0, sizeof *f);
    f->syms.arena = &f->arena;
    module_init(&f->m, &f->arena, &f->syms);
    for (int a = 0; a < naxes; a++) {
        char name[2] = {(char)('X' + a), 0};
        f->m.axis_sym[a] = sym_intern(&f->syms, name, 1);
        f->m.axis_size[a] = 2;
    }
    f->m.naxes = naxes;
    f->fn = module_add_fn(&f->m, sym_intern(&f->syms, "f", 1), 0, (Loc){1, 1});
}

/* f(a: f32[4, 6], b: f32[6, 8]) -> f32[4, 8] = a @ b */
static int build_matmul(Fixture *f) {
    Fn *fn = f->fn;
    fn->nparams = 2;
    fn->nresults = 1;
    fn->params = arena_alloc(&f->arena, 2 * sizeof(Sig));
    fn->results = arena_alloc(&f->arena, sizeof(Sig));
    fn->params[0] = (Sig){{DT_F32, 2, {4, 6}}, sharding_replicated(), 0};
    fn->params[1] = (Sig){{DT_F32, 2, {6, 8}}, sharding_replicated(), 0};
    fn->results[0] = (Sig){{DT_F32, 2, {4, 8}}, sharding_replicated(), 0};
    int a = ir_emit(&f->m, fn, OP_PARAMETER, NULL, 0, (int64_t[]){0}, 1, NULL, (Loc){0, 0});
    int b = ir_emit(&f->m, fn, OP_PARAMETER, NULL, 0, (int64_t[]){1}, 1, NULL, (Loc){0, 0});
    int d = ir_emit(&f->m, fn, OP_DOT, (int32_t[]){a, b}, 2, (int64_t[]){0, 1, 1, 2, 0, 2}, 6, NULL, (Loc){0, 0});
    ir_emit(&f->m, fn, OP_RETURN, (int32_t[]){d}, 1, NULL, 0, NULL, (Loc){0, 0});
    return d;
}

static void test_verifier(void) {
    Fixture f;
    char msg[VERIFY_MSG_SIZE];
    setup(&f, 1);
    int d = build_matmul(&f);
    check(ir_verify(&f.m, msg) == NULL, "a well-formed matmul verifies");
    check(f.fn->insts[d].type.dims[0] == 4 && f.fn->insts[d].type.dims[1] == 8, "dot infers f32[4,8]");

    f.fn->insts[d].type.dims[1] = 9;
    const char *err = ir_verify(&f.m, msg);
    check(err && strstr(err, "recorded shape differs"), "a wrong recorded shape is caught");
    f.fn->insts[d].type.dims[1] = 8;

    f.fn->args[f.fn->insts[d].args] = d;
    err = ir_verify(&f.m, msg);
    check(err && strstr(err, "not defined before its use"), "a use before definition is caught");
    f.fn->args[f.fn->insts[d].args] = 0;

    f.fn->insts[d].sh = sharding_replicated();
    f.fn->insts[d].sh.dim[0] = 2;
    err = ir_verify(&f.m, msg);
    check(err && strstr(err, "sharding"), "a sharding of a dim that does not exist is caught");
    f.fn->insts[d].sh = (Sharding){0};

    f.fn->ints[f.fn->insts[d].attrs + 4] = 2;   /* result labels {2, 2}: not HLO order */
    f.fn->ints[f.fn->insts[d].attrs + 5] = 0;
    err = ir_verify(&f.m, msg);
    check(err != NULL, "a dot with result dims out of HLO order is caught");
    arena_free(&f.arena);
}

static void test_rules(void) {
    Fixture f;
    setup(&f, 0);
    Fn *fn = f.fn;
    fn->nparams = 1;
    fn->params = arena_alloc(&f.arena, sizeof(Sig));
    fn->params[0] = (Sig){{DT_F32, 2, {8, 6}}, sharding_replicated(), 0};
    int x = ir_emit(&f.m, fn, OP_PARAMETER, NULL, 0, (int64_t[]){0}, 1, NULL, (Loc){0, 0});
    Shape to = {DT_F32, 2, {4, 12}};
    int r = ir_emit(&f.m, fn, OP_RESHAPE, (int32_t[]){x}, 1, NULL, 0, &to, (Loc){0, 0});
    Rule rule;
    check(op_rule(fn, &fn->insts[r], &rule) == 1, "reshape has a factor rule");
    check(rule.nfactors == 3 && rule.size[0] == 4 && rule.size[1] == 2 && rule.size[2] == 6,
          "reshape [8,6] -> [4,12] factors as 4, 2, 6");
    check(rule.ndf[0][0] == 2 && rule.ndf[1][1] == 2 && rule.f[1][1][0] == 1 && rule.f[1][1][1] == 2,
          "operand dim 0 is {4,2} and result dim 1 is {2,6}");

    Shape odd = {DT_F32, 2, {6, 8}};
    int t = ir_emit(&f.m, fn, OP_RESHAPE, (int32_t[]){x}, 1, NULL, 0, &odd, (Loc){0, 0});
    op_rule(fn, &fn->insts[t], &rule);
    check(rule.kind[0] == FACTOR_REPLICATE, "reshape [8,6] -> [6,8] has no common factor and replicates");

    int red = ir_emit(&f.m, fn, OP_REDUCE, (int32_t[]){x}, 1, (int64_t[]){RED_SUM, 1}, 2, NULL, (Loc){0, 0});
    op_rule(fn, &fn->insts[red], &rule);
    check(rule.kind[1] == FACTOR_REDUCTION && rule.rank[1] == 1 && rule.f[1][0][0] == 0,
          "reduce over dim 1 makes a reduction factor and keeps dim 0");
    check(fn->insts[red].type.rank == 1 && fn->insts[red].type.dims[0] == 8, "reduce infers f32[8]");

    int tr = ir_emit(&f.m, fn, OP_TRANSPOSE, (int32_t[]){x}, 1, (int64_t[]){1, 0}, 2, NULL, (Loc){0, 0});
    op_rule(fn, &fn->insts[tr], &rule);
    check(fn->insts[tr].type.dims[0] == 6 && rule.f[1][0][0] == 1, "transpose maps result dim 0 to operand dim 1");
    arena_free(&f.arena);
}

/* logits[b, label[b]]: the batch dim is one PASS factor of the table, the
 * indices and the result; bad batch pairs are rejected. */
static void test_gather_batch(void) {
    Fixture f;
    setup(&f, 0);
    Fn *fn = f.fn;
    fn->nparams = 3;
    fn->params = arena_alloc(&f.arena, 3 * sizeof(Sig));
    fn->params[0] = (Sig){{DT_F32, 2, {8, 16}}, sharding_replicated(), 0};
    fn->params[1] = (Sig){{DT_I32, 1, {8}}, sharding_replicated(), 0};
    fn->params[2] = (Sig){{DT_I32, 1, {7}}, sharding_replicated(), 0};
    int t = ir_emit(&f.m, fn, OP_PARAMETER, NULL, 0, (int64_t[]){0}, 1, NULL, (Loc){0, 0});
    int ix = ir_emit(&f.m, fn, OP_PARAMETER, NULL, 0, (int64_t[]){1}, 1, NULL, (Loc){0, 0});
    int short_ix = ir_emit(&f.m, fn, OP_PARAMETER, NULL, 0, (int64_t[]){2}, 1, NULL, (Loc){0, 0});
    int g = ir_emit(&f.m, fn, OP_GATHER, (int32_t[]){t, ix}, 2, (int64_t[]){1, GATHER_CLAMP, 0, 0}, 4, NULL, (Loc){0, 0});
    check(fn->insts[g].type.rank == 1 && fn->insts[g].type.dims[0] == 8, "batched gather of [8,16] by [8] infers f32[8]");
    Rule rule;
    op_rule(fn, &fn->insts[g], &rule);
    int b = rule.f[1][0][0];
    check(rule.f[0][0][0] == b && rule.f[2][0][0] == b && rule.kind[b] == FACTOR_PASS,
          "the batch dim is one PASS factor of table, indices and result");
    check(rule.kind[rule.f[0][1][0]] == FACTOR_REPLICATE, "the gathered dim replicates");
    const char *err = NULL;
    ir_emit_checked(&f.m, fn, OP_GATHER, (int32_t[]){t, ix}, 2, (int64_t[]){1, GATHER_CLAMP, 1, 0}, 4, NULL, (Loc){0, 0}, &err);
    check(err != NULL, "the gathered dim cannot be a batch dim");
    err = NULL;
    ir_emit_checked(&f.m, fn, OP_GATHER, (int32_t[]){t, short_ix}, 2, (int64_t[]){1, GATHER_CLAMP, 0, 0}, 4, NULL, (Loc){0, 0}, &err);
    check(err != NULL, "batch dims of different extents are rejected");
    arena_free(&f.arena);
}

static void test_shapes(void) {
    Fixture f;
    setup(&f, 2);
    f.m.axis_size[1] = 3;
    Shape g = {DT_F32, 2, {10, 7}};
    Sharding sh = sharding_replicated();
    sh.dim[0] = 0;              /* X splits dim 0 */
    sh.dim[1] = 0;              /* and Y splits it too, minor */
    sh.pos[1] = 1;
    Shape l = shape_local(&f.m, &g, &sh);
    check(l.dims[0] == 2 && l.dims[1] == 7, "uneven local blocks round up: 10 over 2x3 devices is 2");
    int axes[MAX_AXES];
    check(sharding_dim_axes(&sh, 0, axes) == 2 && axes[0] == 0 && axes[1] == 1, "dim axes come major first");
    int a = sym_intern(&f.syms, "abc", 3), b = sym_intern(&f.syms, "abcd", 3);
    check(a == b, "interning the same name twice gives one symbol");
    arena_free(&f.arena);
}

/* The groups docs/ir.md lists for mesh X=2, Y=4 (the dump and the
 * interpreter both take them from ir_replica_groups). */
static void test_replica_groups(void) {
    Fixture f;
    setup(&f, 2);
    f.m.axis_size[1] = 4;
    static const struct {
        int64_t axes[2];
        int naxes;
        int64_t size, members[8];
    } want[] = {
        {{1}, 1, 4, {0, 1, 2, 3, 4, 5, 6, 7}},
        {{0}, 1, 2, {0, 4, 1, 5, 2, 6, 3, 7}},
        {{0, 1}, 2, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
        {{1, 0}, 2, 8, {0, 4, 1, 5, 2, 6, 3, 7}},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int64_t members[8];
        int64_t size = ir_replica_groups(&f.m, want[i].axes, want[i].naxes, members);
        check(size == want[i].size && memcmp(members, want[i].members, sizeof members) == 0,
              "replica groups on mesh X=2, Y=4 are the documented ones");
    }
    arena_free(&f.arena);
}

/* The typed accessors read each collective's attributes where ops.def's
 * layout puts them, and op_accepts follows the dtype classes. */
static void test_attribute_layouts(void) {
    Fixture f;
    setup(&f, 2);
    Fn *fn = f.fn;
    fn->spmd = 1;
    fn->nparams = 1;
    fn->params = arena_alloc(&f.arena, sizeof(Sig));
    fn->params[0] = (Sig){{DT_F32, 2, {4, 8}}, sharding_replicated(), 0};
    int x = ir_emit(&f.m, fn, OP_PARAMETER, NULL, 0, (int64_t[]){0}, 1, NULL, (Loc){0, 0});
    int ar = ir_emit(&f.m, fn, OP_ALL_REDUCE, (int32_t[]){x}, 1, (int64_t[]){RED_MAX, 1, 0}, 3, NULL, (Loc){0, 0});
    int ag = ir_emit(&f.m, fn, OP_ALL_GATHER, (int32_t[]){x}, 1, (int64_t[]){1, 0}, 2, NULL, (Loc){0, 0});
    int rs = ir_emit(&f.m, fn, OP_REDUCE_SCATTER, (int32_t[]){x}, 1, (int64_t[]){RED_SUM, 1, 1}, 3, NULL,
                     (Loc){0, 0});
    int aa = ir_emit(&f.m, fn, OP_ALL_TO_ALL, (int32_t[]){x}, 1, (int64_t[]){1, 0, 0, 1}, 4, NULL, (Loc){0, 0});
    int cp = ir_emit(&f.m, fn, OP_COLLECTIVE_PERMUTE, (int32_t[]){x}, 1, (int64_t[]){1, 1, 0, 1, 1, 0}, 6, NULL,
                     (Loc){0, 0});
    const Inst *in = fn->insts;
    int n, npairs;
    const int64_t *axes = inst_axes(fn, &in[ar], &n);
    check(inst_reducer(fn, &in[ar]) == RED_MAX && n == 2 && axes[0] == 1 && axes[1] == 0,
          "all-reduce: reducer, then axes");
    axes = inst_axes(fn, &in[ag], &n);
    check(inst_dim(fn, &in[ag]) == 1 && n == 1 && axes[0] == 0 && in[ag].type.dims[1] == 16,
          "all-gather: dim, then axes");
    axes = inst_axes(fn, &in[rs], &n);
    check(inst_reducer(fn, &in[rs]) == RED_SUM && inst_dim(fn, &in[rs]) == 1 && n == 1 && axes[0] == 1 &&
          in[rs].type.dims[1] == 4, "reduce-scatter: reducer, dim, then axes");
    axes = inst_axes(fn, &in[aa], &n);
    check(inst_dim(fn, &in[aa]) == 1 && inst_concat_dim(fn, &in[aa]) == 0 && n == 2 && axes[1] == 1,
          "all-to-all: split dim, concat dim, then axes");
    axes = inst_axes(fn, &in[cp], &n);
    const int64_t *pairs = inst_pairs(fn, &in[cp], &npairs);
    check(n == 1 && axes[0] == 1 && npairs == 2 && pairs[0] == 0 && pairs[1] == 1 && pairs[2] == 1 && pairs[3] == 0,
          "collective-permute: axis count, axes, then pairs");
    check(op_is_collective(OP_ALL_TO_ALL) && !op_is_collective(OP_DOT) && (op_info[OP_ALL_REDUCE].flags & OPF_INVARIANT) &&
          !(op_info[OP_REDUCE_SCATTER].flags & OPF_INVARIANT), "collective and invariant flags");
    check(op_accepts(OP_COPY, DT_BOOL) && op_accepts(OP_NEGATE, DT_I32) && !op_accepts(OP_NEGATE, DT_BOOL) &&
          !op_accepts(OP_EXP, DT_I32) && op_accepts(OP_EXP, DT_BF16) && !op_accepts(OP_POW, DT_I32),
          "dtype classes: copy any, negate numeric, exp and pow floating point");
    arena_free(&f.arena);
}

int main(void) {
    test_verifier();
    test_rules();
    test_gather_batch();
    test_shapes();
    test_replica_groups();
    test_attribute_layouts();
    printf("# done: %d tests\n", test_no);
    return 0;
}
