/* Threads inside a device (docs/kernels.md): every kernel that splits its
 * work among the calling thread's OpenMP threads gives, on 3 threads, the
 * bytes it gives on 1, on inputs long enough to be split (SK_PARALLEL_MIN)
 * and with values whose sums depend on their order; the 3-thread calls
 * must really have run on a team of 3 (sk_parallel_stats), the 1-thread
 * calls and short ones on none.  Reductions are also checked against a
 * one-pass reference in memory order, the order the kernel must keep. */
#include "ktest.h"

#include <pthread.h>

/* Random values in [-1, 1) with every bit of the mantissa used, so that
 * sums depend on their order (i32: -1000 .. 999, bool: 0/1). */
static void *rnd(sk_dtype t, int64_t n, unsigned seed) {
    void *p = malloc(n ? (size_t)n * esize(t) : 1);
    uint64_t z = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (int64_t i = 0; i < n; i++) {
        z ^= z << 13;            /* xorshift64 */
        z ^= z >> 7;
        z ^= z << 17;
        double v = (double)(z >> 11) / 4503599627370496.0 - 1.0;   /* 53 bits / 2^52 - 1 */
        st(t, p, i, t == SK_BOOL ? (v > 0) : t == SK_I32 ? (int)(v * 1000) : v);
    }
    return p;
}

typedef enum { REDUCE, TRANSPOSE, BROADCAST, SLICE, UNARY, BINARY, CONVERT, COMPARE, SELECT, CONCAT, ROLL, GATHER,
               IOTA, CUMSUM, DOT } kind;

typedef struct {
    const char *what;
    kind k;
    sk_dtype t;
    sc_shape s;                  /* the (first) operand */
    int n, dims[SC_MAX_RANK];    /* reduce dims, transpose perm, broadcast map, gather nbatch and pairs, ... */
    sc_reduce op;
    sc_shape s2;                 /* broadcast result, dot rhs, gather indices */
    const void *x, *y, *z;       /* inputs */
    int64_t out_elems;
    sk_dtype out_t;
} Case;

static int run(const Case *c, void *out) {
    int64_t n = elems(c->s);
    switch (c->k) {
    case REDUCE: return sk_reduce(NULL, c->t, c->s, c->x, c->n, c->dims, c->op, out);
    case TRANSPOSE: return sk_transpose(NULL, c->t, c->s, c->x, c->dims, out);
    case BROADCAST: return sk_broadcast(NULL, c->t, c->s, c->x, c->s2, c->dims, out);
    case SLICE: {
        int64_t start[SC_MAX_RANK], limit[SC_MAX_RANK];
        for (int d = 0; d < c->s.rank; d++)
            start[d] = c->dims[d], limit[d] = c->s.dims[d] - c->dims[d];
        return sk_slice(NULL, c->t, c->s, c->x, start, limit, out);
    }
    case UNARY: return sk_unary(NULL, (sk_unary_op)c->op, c->t, n, c->x, out);
    case BINARY: return sk_binary(NULL, (sk_binary_op)c->op, c->t, n, c->x, c->y, out);
    case CONVERT: return sk_convert(NULL, c->t, c->out_t, n, c->x, out);
    case COMPARE: return sk_compare(NULL, SK_LT, c->t, n, c->x, c->y, out);
    case SELECT: return sk_select(NULL, c->t, n, c->z, c->x, c->y, out);
    case CONCAT: return sk_concat(NULL, c->t, 2, (sc_shape[]){c->s, c->s2}, (const void *[]){c->x, c->y}, c->n, out);
    case ROLL: return sk_roll(NULL, c->t, c->s, c->x, 77, c->n, out);
    case GATHER: return sk_gather(NULL, c->t, c->s, c->x, c->n, SK_CLAMP, c->s2, c->y, c->dims[0], c->dims + 1, out);
    case IOTA: return sk_iota(NULL, c->t, c->s, c->n, out);
    case CUMSUM: return sk_cumsum(NULL, c->t, c->s, c->x, c->n, out);
    default: {
        sk_dot_dims dd = {0, 1, {0}, {0}, {c->s.rank - 1}, {0}};
        return sk_dot(NULL, c->t, c->s, c->x, c->s2, c->y, &dd, out, NULL);
    }
    }
}

/* The case on 1 thread and on 3: the same bytes, a team of 3 the second
 * time and none the first.  A copy of the 1-thread result into *one. */
static void check_case(const Case *c, void **one) {
    size_t bytes = (size_t)c->out_elems * esize(c->out_t);
    unsigned char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
    memset(a, 0x00, bytes);      /* different garbage: every byte must be written */
    memset(b, 0xa5, bytes);
    sk_set_threads(1);
    sk_parallel_stats s0 = sk_parallel_stats_get();
    int rc1 = run(c, a);
    sk_parallel_stats s1 = sk_parallel_stats_get();
    sk_set_threads(3);
    int rc3 = run(c, b);
    sk_parallel_stats s3 = sk_parallel_stats_get();
    sk_set_threads(1);
    int same = memcmp(a, b, bytes) == 0;
    if (!same)
        for (size_t i = 0; i < bytes; i++)
            if (a[i] != b[i]) {
                printf("# byte %zu of %zu: %02x on 1 thread, %02x on 3\n", i, bytes, a[i], b[i]);
                break;
            }
    int split = s3.kernels > s1.kernels && s3.team == 3;
    check(rc1 == 0 && rc3 == 0 && same && s1.kernels == s0.kernels && split,
          "%s: 3 threads give the 1-thread bytes (%s, %lld parallel calls)", c->what,
          split ? "split" : "NOT split", (long long)(s3.kernels - s1.kernels));
    free(b);
    if (one)
        *one = a;
    else
        free(a);
}

/* f32 (bf16 widened) sum of a run of n elements that fold into one output,
 * after `acc`, as reduce.c adds them: 16 lanes (lane l takes elements l,
 * l + 16, ...) added in lane order, then the tail. */
static float lanes_sum(const Case *c, int64_t at, int64_t n, float acc) {
    float part[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++)
            part[l] += (float)ld(c->t, c->x, at + j + l);
    for (int l = 0; j && l < 16; l++)
        acc += part[l];
    for (; j < n; j++)
        acc += (float)ld(c->t, c->x, at + j);
    return acc;
}

/* The reduction in one pass in memory order, accumulating in f32 (f64 for
 * f64, wrapping for i32), as docs/ir.md and reduce.c say; an f32 or bf16
 * sum whose last dims (past extent-1 ones) are reduced folds each run of
 * them by lanes_sum. */
static void *ref_reduce(const Case *c) {
    int red[SC_MAX_RANK] = {0};
    for (int i = 0; i < c->n; i++)
        red[c->dims[i]] = 1;
    int64_t run = 1;
    for (int d = c->s.rank - 1; d >= 0 && (red[d] || c->s.dims[d] == 1); d--)
        run *= c->s.dims[d];
    int lanes = c->op == SC_SUM && (c->t == SK_F32 || c->t == SK_BF16) && run > 1;
    sc_shape os = {0, {0}};
    for (int d = 0; d < c->s.rank; d++)
        if (!red[d])
            os.dims[os.rank++] = c->s.dims[d];
    int64_t no = elems(os), n = elems(c->s);
    double *acc = malloc((size_t)no * sizeof *acc);
    for (int64_t o = 0; o < no; o++)
        acc[o] = c->op == SC_SUM ? 0 : c->op == SC_MAX ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < n; i++) {
        int64_t ix[SC_MAX_RANK], oix[SC_MAX_RANK];
        unravel(c->s, i, ix);
        int r = 0;
        for (int d = 0; d < c->s.rank; d++)
            if (!red[d])
                oix[r++] = ix[d];
        int64_t o = offset(os, oix);
        double v = ld(c->t, c->x, i);
        if (lanes) {
            acc[o] = lanes_sum(c, i, run, (float)acc[o]);
            i += run - 1;
        } else if (c->op == SC_SUM && c->t == SK_F64)
            acc[o] += v;
        else if (c->op == SC_SUM && c->t == SK_I32)
            acc[o] = (int32_t)(uint32_t)((uint32_t)(int32_t)acc[o] + (uint32_t)(int32_t)v);
        else if (c->op == SC_SUM)
            acc[o] = (float)((float)acc[o] + (float)v);
        else
            acc[o] = c->op == SC_MAX ? fmax(acc[o], v) : fmin(acc[o], v);
    }
    void *want = malloc((size_t)no * esize(c->t));
    for (int64_t o = 0; o < no; o++)
        st(c->t, want, o, acc[o]);
    free(acc);
    return want;
}

static void test_reduce(void) {
    static const struct {
        sc_shape s;
        int n, d[3];
    } sets[] = {
        {SC_SHAPE(64, 3, 700), 1, {2}},          /* rows (softmax's sum): split over 192 rows */
        {SC_SHAPE(1000, 200), 1, {0}},           /* columns: 200 of them split, each summed down */
        {SC_SHAPE(50, 100, 40), 1, {1}},         /* the middle dim */
        {SC_SHAPE(30, 40, 60), 2, {0, 2}},       /* the outer and inner dims: 40 outputs */
        {SC_SHAPE(4, 100, 8, 30), 2, {1, 3}},    /* kept, reduced, kept, reduced: 4 ranges for 3 threads */
        {SC_SHAPE(1, 2, 1, 50000), 1, {3}},      /* extent-1 dims merged away */
    };
    const sk_dtype types[] = {SK_F32, SK_F64, SK_BF16, SK_F16, SK_I32};
    for (int si = 0; si < COUNT(sets); si++)
        for (int ti = 0; ti < COUNT(types); ti++)
            for (int op = 0; op < 3; op++) {
                sk_dtype t = types[ti];
                sc_reduce ops[] = {SC_SUM, SC_MAX, SC_MIN};
                if (op > 0 && t != SK_F32 && t != SK_BF16)
                    continue;
                Case c = {"reduce", REDUCE, t, sets[si].s, sets[si].n, {0}, ops[op], {0, {0}}, NULL, NULL, NULL, 0, t};
                for (int i = 0; i < c.n; i++)
                    c.dims[i] = sets[si].d[i];
                c.x = rnd(t, elems(c.s), 7 + si * 10 + ti);
                c.out_elems = elems(c.s);
                for (int i = 0; i < c.n; i++)
                    c.out_elems /= c.s.dims[c.dims[i]];
                char what[128];
                snprintf(what, sizeof what, "reduce %s %s, shape %d of %lld, set %d", NAME[t],
                         op == 0 ? "sum" : op == 1 ? "max" : "min", c.s.rank, (long long)elems(c.s), si);
                c.what = what;
                void *one, *want = ref_reduce(&c);
                check_case(&c, &one);
                check(equal(t, one, want, c.out_elems), "%s: one pass in memory order", what);
                free(one);
                free(want);
                free((void *)c.x);
            }
    /* Column sums into outputs at every alignment: the ranges' boundaries
     * move to cache lines (sk_parallel_ranges_aligned), each output still
     * in exactly one range. */
    {
        float *xc = rnd(SK_F32, 300 * 200, 41), *o1 = malloc(216 * 4), *o3 = malloc(216 * 4);
        int ok = 1;
        for (int off = 0; off < 16; off++) {
            memset(o1, 0, 216 * 4);
            memset(o3, 0xa5, 216 * 4);
            sk_set_threads(1);
            sk_reduce(NULL, SK_F32, SC_SHAPE(300, 200), xc, 1, (int[]){0}, SC_SUM, o1 + off);
            sk_set_threads(3);
            sk_reduce(NULL, SK_F32, SC_SHAPE(300, 200), xc, 1, (int[]){0}, SC_SUM, o3 + off);
            ok &= memcmp(o1 + off, o3 + off, 200 * 4) == 0;
        }
        sk_set_threads(1);
        check(ok, "reduce f32 columns into outputs at 16 alignments: 3 threads give the 1-thread bytes");
        free(xc);
        free(o1);
        free(o3);
    }
    /* A sum to one element is never split: one thread, one order. */
    float *x = rnd(SK_F32, 100000, 5), s1, s3;
    sk_set_threads(1);
    sk_reduce(NULL, SK_F32, SC_SHAPE(100000), x, 1, (int[]){0}, SC_SUM, &s1);
    sk_set_threads(3);
    sk_parallel_stats a = sk_parallel_stats_get();
    sk_reduce(NULL, SK_F32, SC_SHAPE(100000), x, 1, (int[]){0}, SC_SUM, &s3);
    sk_parallel_stats b = sk_parallel_stats_get();
    sk_set_threads(1);
    check(s1 == s3 && a.kernels == b.kernels, "reduce to one element: not split, the same sum");
    /* Short calls stay on the calling thread. */
    sk_set_threads(3);
    a = sk_parallel_stats_get();
    float r[100];
    sk_reduce(NULL, SK_F32, SC_SHAPE(100, 300), x, 1, (int[]){1}, SC_SUM, r);
    sk_binary(NULL, SK_ADD, SK_F32, 30000, x, x, x + 50000);
    b = sk_parallel_stats_get();
    sk_set_threads(1);
    check(a.kernels == b.kernels, "calls under SK_PARALLEL_MIN elements are not split");
    free(x);
}

static void test_moves(void) {
    float *f = rnd(SK_F32, 400000, 11), *g = rnd(SK_F32, 400000, 12);
    uint16_t *h = rnd(SK_BF16, 400000, 13);
    uint8_t *p = rnd(SK_BOOL, 400000, 14);
    int32_t *idx = rnd(SK_I32, 3000, 15);
    Case cs[] = {
        {"transpose f32 [300,400] {1,0}", TRANSPOSE, SK_F32, SC_SHAPE(300, 400), 2, {1, 0}, 0, {0, {0}}, f, NULL, NULL, 120000, SK_F32},
        {"transpose bf16 [8,64,2,64] {0,2,1,3}", TRANSPOSE, SK_BF16, SC_SHAPE(8, 64, 2, 64), 4, {0, 2, 1, 3}, 0, {0, {0}}, h, NULL, NULL, 65536, SK_BF16},
        {"transpose f32 [100000] {0}", TRANSPOSE, SK_F32, SC_SHAPE(100000), 1, {0}, 0, {0, {0}}, f, NULL, NULL, 100000, SK_F32},
        {"broadcast f32 [300] to [300,400]", BROADCAST, SK_F32, SC_SHAPE(300), 1, {0}, 0, SC_SHAPE(300, 400), f, NULL, NULL, 120000, SK_F32},
        {"broadcast f32 [400] to [3,300,400]", BROADCAST, SK_F32, SC_SHAPE(400), 1, {2}, 0, SC_SHAPE(3, 300, 400), f, NULL, NULL, 360000, SK_F32},
        {"slice f32 [500,700] [3:497, 5:695]", SLICE, SK_F32, SC_SHAPE(500, 700), 2, {3, 5}, 0, {0, {0}}, f, NULL, NULL, 494 * 690, SK_F32},
        {"concat f32 [300,100] [300,200] dim 1", CONCAT, SK_F32, SC_SHAPE(300, 100), 1, {0}, 0, SC_SHAPE(300, 200), f, g, NULL, 90000, SK_F32},
        {"roll f32 [40,1000,3] dim 1", ROLL, SK_F32, SC_SHAPE(40, 1000, 3), 1, {0}, 0, {0, {0}}, f, NULL, NULL, 120000, SK_F32},
        {"gather f32 [500,64] dim 0 by [3000]", GATHER, SK_F32, SC_SHAPE(500, 64), 0, {0}, 0, SC_SHAPE(3000), f, idx, NULL, 3000 * 64, SK_F32},
        {"gather f32 [100,64,50] dim 1 by [100,10], batch dims {0} {0}", GATHER, SK_F32, SC_SHAPE(100, 64, 50), 1, {1, 0, 0}, 0, SC_SHAPE(100, 10), f, idx, NULL, 100 * 10 * 50, SK_F32},
        {"iota i32 [300,400] dim 1", IOTA, SK_I32, SC_SHAPE(300, 400), 1, {0}, 0, {0, {0}}, NULL, NULL, NULL, 120000, SK_I32},
        {"iota bf16 [70000] dim 0", IOTA, SK_BF16, SC_SHAPE(70000), 0, {0}, 0, {0, {0}}, NULL, NULL, NULL, 70000, SK_BF16},
        {"cumsum f32 [40,1000,3] dim 1", CUMSUM, SK_F32, SC_SHAPE(40, 1000, 3), 1, {0}, 0, {0, {0}}, f, NULL, NULL, 120000, SK_F32},
        {"cumsum bf16 [300,400] dim 1", CUMSUM, SK_BF16, SC_SHAPE(300, 400), 1, {0}, 0, {0, {0}}, h, NULL, NULL, 120000, SK_BF16},
    };
    for (int i = 0; i < COUNT(cs); i++)
        check_case(&cs[i], NULL);
    free(f);
    free(g);
    free(h);
    free(p);
    free(idx);
}

static void test_elementwise(void) {
    int64_t n = 100001;          /* odd: the ranges are uneven */
    float *f = rnd(SK_F32, n, 21), *g = rnd(SK_F32, n, 22);
    double *d = rnd(SK_F64, n, 23);
    uint16_t *h = rnd(SK_F16, n, 24), *h2 = rnd(SK_F16, n, 25);
    uint8_t *p = rnd(SK_BOOL, n, 26);
    sc_shape s = SC_SHAPE(n);
    Case cs[] = {
        {"unary exp f32", UNARY, SK_F32, s, 0, {0}, (sc_reduce)SK_EXP, {0, {0}}, f, NULL, NULL, n, SK_F32},
        {"unary tanh f16", UNARY, SK_F16, s, 0, {0}, (sc_reduce)SK_TANH, {0, {0}}, h, NULL, NULL, n, SK_F16},
        {"binary divide f32", BINARY, SK_F32, s, 0, {0}, (sc_reduce)SK_DIV, {0, {0}}, f, g, NULL, n, SK_F32},
        {"binary power f16", BINARY, SK_F16, s, 0, {0}, (sc_reduce)SK_POW, {0, {0}}, h, h2, NULL, n, SK_F16},
        {"convert f64 to f32", CONVERT, SK_F64, s, 0, {0}, 0, {0, {0}}, d, NULL, NULL, n, SK_F32},
        {"compare f32 <", COMPARE, SK_F32, s, 0, {0}, 0, {0, {0}}, f, g, NULL, n, SK_BOOL},
        {"select f32", SELECT, SK_F32, s, 0, {0}, 0, {0, {0}}, f, g, p, n, SK_F32},
    };
    for (int i = 0; i < COUNT(cs); i++)
        check_case(&cs[i], NULL);
    free(f);
    free(g);
    free(d);
    free(h);
    free(h2);
    free(p);
}

/* The i32 dot is shardc's loop, whose rows the threads split; floats of
 * every dtype multiply on a GEMM library, threaded by it. */
static void test_dot(void) {
    int32_t *ia = rnd(SK_I32, 96 * 200, 33), *ib = rnd(SK_I32, 200 * 80, 34);
    Case cs[] = {
        {"dot i32 [96,200] x [200,80]", DOT, SK_I32, SC_SHAPE(96, 200), 0, {0}, 0, SC_SHAPE(200, 80), ia, ib, NULL, 96 * 80, SK_I32},
    };
    for (int i = 0; i < COUNT(cs); i++)
        check_case(&cs[i], NULL);
    free(ia);
    free(ib);
}

/* Each device's thread has its own setting: one's 3 threads do not leak
 * into the other's 1 (sk_main sets it on every device's thread). */
static pthread_barrier_t both;

static void *device(void *arg) {
    int *got = arg;
    sk_set_threads(got[0]);
    pthread_barrier_wait(&both);
    got[1] = sk_threads();
    return NULL;
}

static void test_per_thread(void) {
    int a[2] = {3, 0}, b[2] = {1, 0};
    pthread_t ta, tb;
    pthread_barrier_init(&both, NULL, 2);
    pthread_create(&ta, NULL, device, a);
    pthread_create(&tb, NULL, device, b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&both);
    check(a[1] == 3 && b[1] == 1, "sk_set_threads is per thread (%d, %d)", a[1], b[1]);
}

int main(void) {
    test_reduce();
    test_moves();
    test_elementwise();
    test_dot();
    test_per_thread();
    return tap_done();
}
