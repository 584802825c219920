/* Tests of the kernel library's contraction, reduction and prefix sum
 * (lib/dot.c, lib/reduce.c; docs/kernels.md): many dot layouts, every
 * reduction and cumsum along every dim, for every dtype, and attention
 * without its scores (lib/attention.c), against reference loops written
 * from the definitions.
 * TAP-like output: "ok N - ...", then "# done: N tests". */
#include "ktest.h"

/* ---- dot ---- */

static sk_dot_dims dd(int nb, const int *lb, const int *rb, int nc, const int *lc, const int *rc) {
    sk_dot_dims d = {nb, nc, {0}, {0}, {0}, {0}};
    for (int i = 0; i < nb; i++)
        d.lhs_batch[i] = lb[i], d.rhs_batch[i] = rb[i];
    for (int i = 0; i < nc; i++)
        d.lhs_contract[i] = lc[i], d.rhs_contract[i] = rc[i];
    return d;
}

/* The definition: result[batch, lfree, rfree] = sum over the contracting
 * indices of lhs[...] * rhs[...], labels placed by hand. */
static void ref_dot(sk_dtype t, sc_shape ls, const void *a, sc_shape rs, const void *b,
                    const sk_dot_dims *d, void *out, sc_shape *os) {
    int lrole[8] = {0}, rrole[8] = {0}, lfree[8], rfree[8], nlf = 0, nrf = 0;
    for (int i = 0; i < d->nbatch; i++)
        lrole[d->lhs_batch[i]] = rrole[d->rhs_batch[i]] = 1;
    for (int i = 0; i < d->ncontract; i++)
        lrole[d->lhs_contract[i]] = rrole[d->rhs_contract[i]] = 2;
    for (int i = 0; i < ls.rank; i++)
        if (!lrole[i]) lfree[nlf++] = i;
    for (int i = 0; i < rs.rank; i++)
        if (!rrole[i]) rfree[nrf++] = i;
    os->rank = d->nbatch + nlf + nrf;
    for (int i = 0; i < d->nbatch; i++) os->dims[i] = ls.dims[d->lhs_batch[i]];
    for (int i = 0; i < nlf; i++) os->dims[d->nbatch + i] = ls.dims[lfree[i]];
    for (int i = 0; i < nrf; i++) os->dims[d->nbatch + nlf + i] = rs.dims[rfree[i]];
    sc_shape ks = {d->ncontract, {0}};
    for (int i = 0; i < d->ncontract; i++) ks.dims[i] = ls.dims[d->lhs_contract[i]];
    for (int64_t o = 0; o < elems(*os); o++) {
        int64_t oi[8], li[8] = {0}, ri[8] = {0}, ki[8];
        unravel(*os, o, oi);
        for (int i = 0; i < d->nbatch; i++) li[d->lhs_batch[i]] = ri[d->rhs_batch[i]] = oi[i];
        for (int i = 0; i < nlf; i++) li[lfree[i]] = oi[d->nbatch + i];
        for (int i = 0; i < nrf; i++) ri[rfree[i]] = oi[d->nbatch + nlf + i];
        double sum = 0;
        for (int64_t k = 0; k < elems(ks); k++) {
            unravel(ks, k, ki);
            for (int i = 0; i < d->ncontract; i++) li[d->lhs_contract[i]] = ri[d->rhs_contract[i]] = ki[i];
            sum += ld(t, a, offset(ls, li)) * ld(t, b, offset(rs, ri));
        }
        st(t, out, o, sum);
    }
}

/* Whether dots of dtype t run on a library, which reads operands in place
 * when their layout allows: f32 and f64, and bf16 where oneDNN has kernels
 * for it on this CPU. */
static int on_library(sk_dtype t) {
    char line[512];
    sk_gemm_engine(line, sizeof line);
    return t == SK_F32 || t == SK_F64 || (t == SK_BF16 && strstr(line, "bf16 GEMM: oneDNN matmul"));
}

/* copies: whether a library dot of this layout may copy its operands. */
static void check_dot_c(const char *what, sc_shape ls, sc_shape rs, sk_dot_dims d, int copies) {
    for (int ti = 0; ti < COUNT(NUMERIC); ti++) {
        sk_dtype t = NUMERIC[ti];
        int library = on_library(t);
        void *a = fill(t, elems(ls), 1 + ti), *b = fill(t, elems(rs), 7 + ti);
        sc_shape os, want_s;
        void *want = malloc(4096 * 8), *got = malloc(4096 * 8);
        ref_dot(t, ls, a, rs, b, &d, want, &want_s);
        memset(got, 0x7f, 4096 * 8);
        int64_t c0 = sk_dot_copied_elems();
        int rc = sk_dot(NULL, t, ls, a, rs, b, &d, got, &os);
        if (library && !copies && sk_dot_copied_elems() != c0) {
            printf("# copied %lld elements\n", (long long)(sk_dot_copied_elems() - c0));
            rc = -2;
        }
        int ok = rc == 0 && os.rank == want_s.rank && !memcmp(os.dims, want_s.dims, sizeof os.dims[0] * os.rank) &&
                 equal(t, got, want, elems(want_s));
        check(ok, "dot %s %s%s", what, NAME[t], library && !copies ? ", no copies" : "");
        free(a); free(b); free(want); free(got);
    }
}

static void check_dot(const char *what, sc_shape ls, sc_shape rs, sk_dot_dims d) {
    check_dot_c(what, ls, rs, d, 0);
}

static void test_dot(void) {
    const int z[1] = {0}, o[1] = {1}, t2[1] = {2};
    check_dot("matmul [5,7]x[7,3]", SC_SHAPE(5, 7), SC_SHAPE(7, 3), dd(0, 0, 0, 1, o, z));
    check_dot("transposed lhs [7,5]x[7,3]", SC_SHAPE(7, 5), SC_SHAPE(7, 3), dd(0, 0, 0, 1, z, z));
    check_dot("transposed rhs [5,7]x[3,7]", SC_SHAPE(5, 7), SC_SHAPE(3, 7), dd(0, 0, 0, 1, o, o));
    check_dot("both transposed [7,5]x[3,7]", SC_SHAPE(7, 5), SC_SHAPE(3, 7), dd(0, 0, 0, 1, z, o));
    check_dot("batch leading [4,5,7]x[4,7,3]", SC_SHAPE(4, 5, 7), SC_SHAPE(4, 7, 3), dd(1, z, z, 1, t2, o));
    const int lb[2] = {0, 1}, rb[2] = {0, 2}, l3[1] = {3}, r1[1] = {1};
    check_dot("attention p.v [2,3,4,5]x[2,5,3,6] batch {0,1}/{0,2}", SC_SHAPE(2, 3, 4, 5), SC_SHAPE(2, 5, 3, 6),
              dd(2, lb, rb, 1, l3, r1));
    const int qb[2] = {0, 2}, q3[1] = {3};
    check_dot("q.k [2,4,3,5]x[2,6,3,5] batch {0,2}", SC_SHAPE(2, 4, 3, 5), SC_SHAPE(2, 6, 3, 5),
              dd(2, qb, qb, 1, q3, q3));
    check_dot("batch interleaved [5,4,7]x[7,4,3]", SC_SHAPE(5, 4, 7), SC_SHAPE(7, 4, 3), dd(1, o, o, 1, t2, z));
    /* Batch innermost: no matrix has a unit stride, BLAS cannot read it. */
    check_dot_c("batch last [5,7,4]x[7,3,4] (copied)", SC_SHAPE(5, 7, 4), SC_SHAPE(7, 3, 4), dd(1, t2, t2, 1, o, z), 1);
    const int lc2[2] = {1, 2}, rc2[2] = {0, 1}, rc2s[2] = {2, 0};
    check_dot("two contracting [5,3,4]x[3,4,6]", SC_SHAPE(5, 3, 4), SC_SHAPE(3, 4, 6), dd(0, 0, 0, 2, lc2, rc2));
    check_dot_c("two contracting, split by a free dim [5,3,4]x[4,6,3] (copied)", SC_SHAPE(5, 3, 4),
                SC_SHAPE(4, 6, 3), dd(0, 0, 0, 2, lc2, rc2s), 1);
    const int lc2r[2] = {2, 1}, rc2r[2] = {1, 0};
    check_dot("two contracting listed reversed", SC_SHAPE(5, 3, 4), SC_SHAPE(3, 4, 6), dd(0, 0, 0, 2, lc2r, rc2r));
    check_dot_c("interleaved free dims [2,7,3]x[7,5] (copied)", SC_SHAPE(2, 7, 3), SC_SHAPE(7, 5),
                dd(0, 0, 0, 1, o, z), 1);
    check_dot_c("interleaved rhs [7,2,3]x contract {0,2} (copied)", SC_SHAPE(5, 7, 3), SC_SHAPE(7, 2, 3),
                dd(0, 0, 0, 2, (const int[]){1, 2}, (const int[]){0, 2}), 1);
    check_dot("vector . vector [9]x[9]", SC_SHAPE(9), SC_SHAPE(9), dd(0, 0, 0, 1, z, z));
    check_dot("matrix . vector [5,9]x[9]", SC_SHAPE(5, 9), SC_SHAPE(9), dd(0, 0, 0, 1, o, z));
    check_dot("vector . matrix [9]x[9,4]", SC_SHAPE(9), SC_SHAPE(9, 4), dd(0, 0, 0, 1, z, z));
    check_dot("transposed vector . matrix [9]x[4,9]", SC_SHAPE(9), SC_SHAPE(4, 9), dd(0, 0, 0, 1, z, o));
    check_dot("outer product [5]x[3]", SC_SHAPE(5), SC_SHAPE(3), dd(0, 0, 0, 0, 0, 0));
    check_dot("batched vectors [4,9]x[4,9]", SC_SHAPE(4, 9), SC_SHAPE(4, 9), dd(1, z, z, 1, o, o));
    check_dot("extent-1 dims [1,5,1,7]x[7,1,3]", SC_SHAPE(1, 5, 1, 7), SC_SHAPE(7, 1, 3), dd(0, 0, 0, 1, l3, z));
    check_dot("empty sum [5,0]x[0,3]", SC_SHAPE(5, 0), SC_SHAPE(0, 3), dd(0, 0, 0, 1, o, z));
    check_dot("blocked loop [3,300]x[300,600]", SC_SHAPE(3, 300), SC_SHAPE(300, 600), dd(0, 0, 0, 1, o, z));
    /* i32 products wrap modulo 2^32. */
    int32_t a[2] = {65536, 3}, b[2] = {65536, 5}, c = 0;
    int rc = sk_dot(NULL, SK_I32, SC_SHAPE(2), a, SC_SHAPE(2), b, &(sk_dot_dims){0, 1, {0}, {0}, {0}, {0}}, &c, NULL);
    check(rc == 0 && c == 15, "dot i32 wraps (2^16 * 2^16 + 15 = %d)", c);
    sk_dot_dims bad = dd(0, 0, 0, 1, o, o);
    check(sk_dot(NULL, SK_F32, SC_SHAPE(2, 3), a, SC_SHAPE(2, 4), b, &bad, &c, NULL) == SC_ERR,
          "dot: mismatched contracting extents are an error");
    check(sk_dot(NULL, SK_BOOL, SC_SHAPE(2), a, SC_SHAPE(2), b, &(sk_dot_dims){0, 1, {0}, {0}, {0}, {0}}, &c, NULL) == SC_ERR,
          "dot: bool is an error");
}

/* ---- f32 GEMMs with operands copied into padded rows (lib/sgemm.c) ----
 * Operands stored K-major with rows a multiple of 256 floats apart, at
 * shapes where oneDNN's no-copy kernels run on AVX2: blocks of columns
 * with tails, one operand or both (the narrower copied whole), batched,
 * accumulating, into rows ldo apart.  Each under SHARDC_GEMM_PAD unset
 * (the copies where this CPU needs them), always (on every CPU) and never,
 * exact against a plain loop (the inputs' sums are exact in f32). */
static void ref_matmul(int64_t nbat, int64_t M, int64_t N, int64_t K, int lhs_t, int rhs_t, const float *a,
                       const float *b, float *c) {
    for (int64_t q = 0; q < nbat; q++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double sum = 0;
                for (int64_t k = 0; k < K; k++)
                    sum += (double)a[q * M * K + (lhs_t ? k * M + i : i * K + k)] *
                           b[q * K * N + (rhs_t ? j * K + k : k * N + j)];
                c[(q * M + i) * N + j] = (float)sum;
            }
}

static void check_padded(const char *what, int64_t nbat, int64_t M, int64_t N, int64_t K, int lhs_t, int rhs_t,
                         int acc, int64_t ldo) {
    static const char *const SETTING[] = {NULL, "always", "never"};
    sc_shape ls = lhs_t ? SC_SHAPE(nbat, K, M) : SC_SHAPE(nbat, M, K), rs = rhs_t ? SC_SHAPE(nbat, N, K) : SC_SHAPE(nbat, K, N);
    sk_dot_dims d = {1, 1, {0}, {0}, {lhs_t ? 1 : 2}, {rhs_t ? 2 : 1}};
    float *a = fill(SK_F32, elems(ls), 3), *b = fill(SK_F32, elems(rs), 5), *prod = malloc((size_t)(nbat * M * N) * 4);
    int64_t step = ldo ? ldo : N, rows = nbat * M;
    float *start = fill(SK_F32, rows * step, 11), *got = malloc((size_t)(rows * step) * 4);
    ref_matmul(nbat, M, N, K, lhs_t, rhs_t, a, b, prod);
    for (int si = 0; si < COUNT(SETTING); si++) {
        if (SETTING[si])
            setenv("SHARDC_GEMM_PAD", SETTING[si], 1);
        else
            unsetenv("SHARDC_GEMM_PAD");
        memcpy(got, start, (size_t)(rows * step) * 4);
        sk_epilogue ep = {NULL, SK_COPY, acc, 0};
        int ok = sk_dot_strided(NULL, SK_F32, ls, a, NULL, rs, b, NULL, &d, &ep, got, ldo) == 0;
        for (int64_t r = 0; ok && r < rows; r++)
            for (int64_t j = 0; ok && j < step; j++) {
                float want = j < N ? prod[r * N + j] + (acc ? start[r * step + j] : 0) : start[r * step + j];
                if (got[r * step + j] != want) {
                    printf("# row %lld, column %lld: got %g, want %g\n", (long long)r, (long long)j,
                           got[r * step + j], want);
                    ok = 0;
                }
            }
        check(ok, "dot f32 %s, SHARDC_GEMM_PAD %s", what, SETTING[si] ? SETTING[si] : "unset");
    }
    unsetenv("SHARDC_GEMM_PAD");
    free(a); free(b); free(prod); free(start); free(got);
}

static void test_dot_padded(void) {
    check_padded("[70,300]x[300,768]: rhs rows 768 apart, blocks of 512 and 256", 1, 70, 768, 300, 0, 0, 0, 0);
    check_padded("[300,768]^T x[300,70]: lhs stored K-major", 1, 768, 70, 300, 1, 0, 0, 0);
    check_padded("[300,256]^T x[300,768]: both K-major, the lhs copied whole", 1, 256, 768, 300, 1, 0, 0, 0);
    check_padded("[300,768]^T x[300,256]: both K-major, the rhs copied whole", 1, 768, 256, 300, 1, 0, 0, 0);
    check_padded("[70,300]x[300,768] accumulated into rows 771 apart", 1, 70, 768, 300, 0, 0, 1, 771);
    check_padded("batched [2,64,130]x[2,130,512]", 2, 64, 512, 130, 0, 0, 0, 0);
    check_padded("[70,300]x[768,300]^T: a K-contiguous rhs, never copied", 1, 70, 768, 300, 0, 1, 0, 0);
}

/* ---- dot with an epilogue ---- */

static const sk_unary_op ACTS[] = {SK_COPY, SK_GELU, SK_RELU, SK_TANH, SK_LOGISTIC};
static const char *const ACT_NAME[] = {"none", "gelu", "relu", "tanh", "logistic"};

static double activate(sk_unary_op act, double x) {
    switch (act) {
    case SK_GELU: return x / (1 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
    case SK_RELU: return x > 0 ? x : 0;
    case SK_TANH: return tanh(x);
    case SK_LOGISTIC: return 1 / (1 + exp(-x));
    default: return x;
    }
}

/* act(dot + bias[n]) against the definition in f64, within the dtype's
 * rounding (bf16/f16: rounded once, from oneDNN's or the loop's
 * activation); f32 and f64 also bit for bit against the unfused kernels:
 * sk_dot, then sk_binary per row, then sk_unary.  n: the bias's length. */
static void check_epilogue(const char *what, sc_shape ls, sc_shape rs, sk_dot_dims d, int64_t n) {
    static const sk_dtype FLOATS[] = {SK_F32, SK_F64, SK_BF16, SK_F16};
    static const double TOL[] = {1e-5, 1e-12, 1.0 / 128, 1.0 / 512};
    for (int ti = 0; ti < COUNT(FLOATS); ti++) {
        sk_dtype t = FLOATS[ti];
        void *a = fill(t, elems(ls), 3 + ti), *b = fill(t, elems(rs), 11 + ti), *bias = fill(t, n, 5 + ti);
        double *a64 = malloc(8 * (size_t)(elems(ls) + 1)), *b64 = malloc(8 * (size_t)(elems(rs) + 1));
        for (int64_t i = 0; i < elems(ls); i++) a64[i] = ld(t, a, i);
        for (int64_t i = 0; i < elems(rs); i++) b64[i] = ld(t, b, i);
        sc_shape os, want_s;
        double *acc = malloc(4096 * 8 * 8);
        void *got = malloc(4096 * 8 * 8), *unfused = malloc(4096 * 8 * 8);
        ref_dot(SK_F64, ls, a64, rs, b64, &d, acc, &want_s);
        int64_t m = elems(want_s);
        for (int ai = 0; ai < COUNT(ACTS); ai++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                sk_epilogue ep = {with_bias ? bias : NULL, ACTS[ai], 0, 0};
                memset(got, 0x7f, 4096 * 8 * 8);
                int ok = sk_dot_epilogue(NULL, t, ls, a, rs, b, &d, &ep, got, &os) == 0 && os.rank == want_s.rank &&
                         !memcmp(os.dims, want_s.dims, sizeof os.dims[0] * os.rank);
                for (int64_t i = 0; ok && i < m; i++) {
                    double want = activate(ACTS[ai], acc[i] + (with_bias ? ld(t, bias, i % n) : 0));
                    if (fabs(ld(t, got, i) - want) > TOL[ti] * fmax(1, fabs(want))) {
                        printf("# element %lld: got %g, want %g\n", (long long)i, ld(t, got, i), want);
                        ok = 0;
                    }
                }
                if (ok && (t == SK_F32 || t == SK_F64)) {
                    size_t row = (size_t)n * esize(t);
                    ok = sk_dot(NULL, t, ls, a, rs, b, &d, unfused, NULL) == 0;
                    for (int64_t r = 0; ok && with_bias && r < m / n; r++)
                        ok = sk_binary(NULL, SK_ADD, t, n, (char *)unfused + r * row, bias, (char *)unfused + r * row) == 0;
                    ok = ok && (ACTS[ai] == SK_COPY || sk_unary(NULL, ACTS[ai], t, m, unfused, unfused) == 0) &&
                         equal(t, got, unfused, m);
                }
                check(ok, "dot epilogue %s %s, %s%s", what, NAME[t], ACT_NAME[ai], with_bias ? " + bias" : "");
            }
        free(a); free(b); free(bias); free(a64); free(b64); free(acc); free(got); free(unfused);
    }
}

/* Added to the accumulator, not to the rounded product: 257 (2049 in
 * f16) is not a bf16 number, so the unfused instructions would round it
 * to 256 and give relu(256 - 256) = 0. */
static void check_rounded_once(sk_dtype t, int64_t k) {
    uint16_t *a = malloc(2 * (size_t)k), *b = malloc(2 * (size_t)k), bias, got = 0;
    for (int64_t i = 0; i < k; i++)
        st(t, a, i, 1), st(t, b, i, 1);
    st(t, &bias, 0, -(double)(k - 1));
    sk_epilogue ep = {&bias, SK_RELU, 0, 0};
    int rc = sk_dot_epilogue(NULL, t, SC_SHAPE(1, k), a, SC_SHAPE(k, 1), b, &(sk_dot_dims){0, 1, {0}, {0}, {1}, {0}}, &ep,
                             &got, NULL);
    check(rc == 0 && ld(t, &got, 0) == 1, "dot epilogue %s: bias added to the f32 accumulator (%lld - %lld = %g)",
          NAME[t], (long long)k, (long long)(k - 1), ld(t, &got, 0));
    free(a);
    free(b);
}

/* f32_out: the f32 sums stored as they are.  256 + k - 1 ones is no bf16
 * (f16) number but an f32 one, so a rounded store would differ; read in
 * place (sk_dot_epilogue) and as a column of a [k, 2] array
 * (sk_dot_strided). */
static void check_f32_out(sk_dtype t, int64_t k) {
    uint16_t *a = malloc(2 * (size_t)k), *b = malloc(4 * (size_t)k);
    for (int64_t i = 0; i < k; i++)
        st(t, a, i, i ? 1 : 256), st(t, b, 2 * i, 1), st(t, b, 2 * i + 1, 1);
    sk_epilogue ep = {NULL, SK_COPY, 0, 1};
    sk_dot_dims dims = {0, 1, {0}, {0}, {1}, {0}};
    float got = 0, got_strided = 0;
    int rc = sk_dot_epilogue(NULL, t, SC_SHAPE(1, k), a, SC_SHAPE(k, 1), b, &dims, &ep, &got, NULL) ||
             sk_dot_strided(NULL, t, SC_SHAPE(1, k), a, NULL, SC_SHAPE(k, 1), b + 1, (const int64_t[]){2, 1}, &dims, &ep,
                            &got_strided, 0);
    check(rc == 0 && got == 255 + k && got_strided == 255 + k, "dot %s f32_out: sums unrounded (%g, %g, want %lld)",
          NAME[t], got, got_strided, (long long)(255 + k));
    free(a);
    free(b);
}

/* out += dot in place (sk_epilogue.accumulate) against the definition:
 * every dtype, every layout below; f32 and f64 through BLAS's beta, the
 * others through a product added aside.  out starts as other values, so
 * a kernel that overwrote it (beta 0) or added twice would fail. */
static void check_accumulate(const char *what, sc_shape ls, sc_shape rs, sk_dot_dims d) {
    static const sk_dtype TYPES[] = {SK_F32, SK_F64, SK_BF16, SK_F16, SK_I32};
    static const double TOL[] = {1e-5, 1e-12, 1.0 / 64, 1.0 / 256, 0};
    for (int ti = 0; ti < COUNT(TYPES); ti++) {
        sk_dtype t = TYPES[ti];
        void *a = fill(t, elems(ls), 7 + ti), *b = fill(t, elems(rs), 13 + ti);
        double *a64 = malloc(8 * (size_t)(elems(ls) + 1)), *b64 = malloc(8 * (size_t)(elems(rs) + 1));
        for (int64_t i = 0; i < elems(ls); i++) a64[i] = ld(t, a, i);
        for (int64_t i = 0; i < elems(rs); i++) b64[i] = ld(t, b, i);
        sc_shape want_s;
        double *prod = malloc(4096 * 8 * 8);
        ref_dot(SK_F64, ls, a64, rs, b64, &d, prod, &want_s);
        int64_t m = elems(want_s);
        void *out = fill(t, m, 29 + ti);
        double *before = malloc(8 * (size_t)(m + 1));
        for (int64_t i = 0; i < m; i++) before[i] = ld(t, out, i);
        sk_epilogue ep = {NULL, SK_COPY, 1, 0};
        int ok = sk_dot_epilogue(NULL, t, ls, a, rs, b, &d, &ep, out, NULL) == 0;
        for (int64_t i = 0; ok && i < m; i++) {
            double want = before[i] + prod[i];
            if (t == SK_I32)
                want = (double)(int32_t)(uint32_t)(int64_t)want;
            if (fabs(ld(t, out, i) - want) > TOL[ti] * fmax(1, fabs(want))) {
                printf("# element %lld: got %g, want %g\n", (long long)i, ld(t, out, i), want);
                ok = 0;
            }
        }
        check(ok, "dot accumulate %s %s", what, NAME[t]);
        free(a); free(b); free(a64); free(b64); free(prod); free(out); free(before);
    }
}

/* out (f32) += a wide dot's f32 sums in place (accumulate and f32_out:
 * oneDNN's sum post-op for bf16, a product added aside for f16 on a CPU
 * without AVX512-FP16) against the unfused dot and add: the same bits,
 * each element rounded once after the sum as the add rounds it. */
static void check_accumulate_f32_out(const char *what, sk_dtype t, sc_shape ls, sc_shape rs, sk_dot_dims d) {
    void *a = fill(t, elems(ls), 7), *b = fill(t, elems(rs), 13);
    sc_shape os;
    sk_epilogue wide = {NULL, SK_COPY, 0, 1}, acc = {NULL, SK_COPY, 1, 1};
    float *prod = malloc(4 * 4096 * 8), *want = malloc(4 * 4096 * 8), *got = malloc(4 * 4096 * 8);
    int ok = sk_dot_epilogue(NULL, t, ls, a, rs, b, &d, &wide, prod, &os) == 0;
    int64_t m = elems(os);
    for (int64_t i = 0; i < m; i++)
        want[i] = got[i] = (float)(i % 7) - 2.5f;
    ok = ok && sk_binary(NULL, SK_ADD, SK_F32, m, want, prod, want) == 0 &&
         sk_dot_epilogue(NULL, t, ls, a, rs, b, &d, &acc, got, NULL) == 0 && memcmp(got, want, 4 * (size_t)m) == 0;
    check(ok, "dot accumulate f32_out %s %s: the unfused dot and add's bits", what, NAME[t]);
    free(a); free(b); free(prod); free(want); free(got);
}

/* sk_dot_strided: operands that are blocks of larger arrays, read where
 * they lie, against ref_dot of the blocks copied out.  Each operand is
 * the block at `at` of a parent array; with and without accumulate; every
 * dtype (f32 and f64 hand the strides to BLAS, the others copy).  The
 * result, of rows of n elements, lies dense or with its rows n + 3
 * apart, the elements between untouched (ldo; f32 and f64 store there,
 * the others copy in). */
static void *carve(sk_dtype t, sc_shape parent, const void *p, sc_shape block, const int64_t *at) {
    void *out = malloc((size_t)elems(block) * esize(t) + 1);
    for (int64_t i = 0; i < elems(block); i++) {
        int64_t rest = i, off = 0, stride = 1;
        for (int d = block.rank - 1; d >= 0; d--) {
            off += (rest % block.dims[d] + at[d]) * stride;
            rest /= block.dims[d];
            stride *= parent.dims[d];
        }
        st(t, out, i, ld(t, p, off));
    }
    return out;
}

static const void *at_offset(sk_dtype t, sc_shape parent, const void *p, const int64_t *at) {
    int64_t off = 0, stride = 1;
    for (int d = parent.rank - 1; d >= 0; d--) {
        off += at[d] * stride;
        stride *= parent.dims[d];
    }
    return (const char *)p + off * (int64_t)esize(t);
}

static void check_strided(const char *what, sc_shape lp, sc_shape ls, const int64_t *la, sc_shape rp, sc_shape rs,
                          const int64_t *ra, sk_dot_dims d, int64_t row) {
    static const sk_dtype TYPES[] = {SK_F32, SK_F64, SK_BF16, SK_F16, SK_I32};
    for (int ti = 0; ti < COUNT(TYPES); ti++)
        for (int acc = 0; acc < 2; acc++)
            for (int64_t ldo = 0; ldo <= row + 3; ldo += row + 3) {
            sk_dtype t = TYPES[ti];
            void *lpar = fill(t, elems(lp), 3 + ti), *rpar = fill(t, elems(rp), 5 + ti);
            void *a = carve(t, lp, lpar, ls, la), *b = carve(t, rp, rpar, rs, ra);
            int64_t lst[SC_MAX_RANK], rst[SC_MAX_RANK], m = 1;
            for (int k = lp.rank - 1; k >= 0; k--)
                lst[k] = m, m *= lp.dims[k];
            m = 1;
            for (int k = rp.rank - 1; k >= 0; k--)
                rst[k] = m, m *= rp.dims[k];
            sc_shape os;
            void *want = malloc(4096 * 8), *got = fill(t, 4096, 17), *start = fill(t, 4096, 17);
            ref_dot(t, ls, a, rs, b, &d, want, &os);
            int64_t n = elems(os), step = ldo ? ldo : row;
            for (int64_t i = n * step / row; i-- > 0;)   /* want laid out as got: the block, and what it leaves */
                st(t, want, i, i % step < row ? ld(t, want, i / step * row + i % step) : ld(t, start, i));
            for (int64_t i = 0; acc && i < n * step / row; i++)   /* + got's start, rounded as the unfused add */
                if (i % step < row)
                    st(t, want, i, ld(t, want, i) + ld(t, start, i));
            sk_epilogue ep = {NULL, SK_COPY, acc, 0};
            int ok = sk_dot_strided(NULL, t, ls, at_offset(t, lp, lpar, la), lst, rs, at_offset(t, rp, rpar, ra), rst, &d,
                                    &ep, got, ldo) == 0 && equal(t, got, want, n * step / row);
            check(ok, "dot strided %s %s%s, rows %lld apart", what, NAME[t], acc ? " accumulate" : "",
                  (long long)step);
            free(lpar); free(rpar); free(a); free(b); free(want); free(got); free(start);
        }
}

static void test_dot_strided(void) {
    const int z[1] = {0}, o[1] = {1}, t2[1] = {2};
    check_strided("rows and columns of [8,12] x a column block of [7,10]", SC_SHAPE(8, 12), SC_SHAPE(5, 7),
                  (const int64_t[]){1, 2}, SC_SHAPE(7, 10), SC_SHAPE(7, 3), (const int64_t[]){0, 4},
                  dd(0, 0, 0, 1, o, z), 3);
    check_strided("transposed rhs, a block of [6,9]", SC_SHAPE(5, 7), SC_SHAPE(5, 7), (const int64_t[]){0, 0},
                  SC_SHAPE(6, 9), SC_SHAPE(3, 7), (const int64_t[]){2, 1}, dd(0, 0, 0, 1, o, o), 3);
    check_strided("batched blocks of [4,5,9] x [4,8,3]", SC_SHAPE(4, 5, 9), SC_SHAPE(4, 5, 7),
                  (const int64_t[]){0, 0, 1}, SC_SHAPE(4, 8, 3), SC_SHAPE(4, 7, 3), (const int64_t[]){0, 1, 0},
                  dd(1, z, z, 1, t2, o), 3);
    /* An empty sum: zeros in the block's rows, 5 apart, nothing between. */
    float a[1] = {0}, b[1] = {0}, got[10];
    for (int i = 0; i < 10; i++)
        got[i] = 7;
    sk_dot_dims empty = dd(0, 0, 0, 1, o, z);
    int ok = sk_dot_strided(NULL, SK_F32, SC_SHAPE(2, 0), a, NULL, SC_SHAPE(0, 3), b, NULL, &empty, NULL, got, 5) == 0;
    for (int i = 0; i < 10; i++)
        ok &= got[i] == (i % 5 < 3 ? 0 : 7);
    check(ok, "dot strided: an empty sum [2,0]x[0,3] into rows 5 apart");
}

static void test_dot_epilogue(void) {
    const int z[1] = {0}, o[1] = {1}, t2[1] = {2};
    check_epilogue("[5,7]x[7,3]", SC_SHAPE(5, 7), SC_SHAPE(7, 3), dd(0, 0, 0, 1, o, z), 3);
    check_epilogue("transposed rhs [5,7]x[3,7]", SC_SHAPE(5, 7), SC_SHAPE(3, 7), dd(0, 0, 0, 1, o, o), 3);
    check_epilogue("batched [4,5,7]x[4,7,3]", SC_SHAPE(4, 5, 7), SC_SHAPE(4, 7, 3), dd(1, z, z, 1, t2, o), 3);
    check_epilogue("two rhs free dims [5,7]x[7,2,3]", SC_SHAPE(5, 7), SC_SHAPE(7, 2, 3), dd(0, 0, 0, 1, o, z), 6);
    check_epilogue("[3,300]x[300,600]", SC_SHAPE(3, 300), SC_SHAPE(300, 600), dd(0, 0, 0, 1, o, z), 600);
    check_epilogue("empty sum [5,0]x[0,3]", SC_SHAPE(5, 0), SC_SHAPE(0, 3), dd(0, 0, 0, 1, o, z), 3);
    check_accumulate("[5,7]x[7,3]", SC_SHAPE(5, 7), SC_SHAPE(7, 3), dd(0, 0, 0, 1, o, z));
    check_accumulate("batched [4,5,7]x[4,7,3]", SC_SHAPE(4, 5, 7), SC_SHAPE(4, 7, 3), dd(1, z, z, 1, t2, o));
    check_accumulate("interleaved free dims [2,7,3]x[7,5] (copied)", SC_SHAPE(2, 7, 3), SC_SHAPE(7, 5),
                     dd(0, 0, 0, 1, o, z));
    check_accumulate("[3,300]x[300,600]", SC_SHAPE(3, 300), SC_SHAPE(300, 600), dd(0, 0, 0, 1, o, z));
    check_accumulate("empty sum [5,0]x[0,3]", SC_SHAPE(5, 0), SC_SHAPE(0, 3), dd(0, 0, 0, 1, o, z));
    sk_epilogue acc_relu = {NULL, SK_RELU, 1, 0};
    float p[2] = {1, 2}, q[2] = {3, 4}, r = 0;
    check(sk_dot_epilogue(NULL, SK_F32, SC_SHAPE(2), p, SC_SHAPE(2), q, &(sk_dot_dims){0, 1, {0}, {0}, {0}, {0}}, &acc_relu,
                          &r, NULL) == SC_ERR,
          "dot epilogue: accumulate with an activation is an error");
    check_rounded_once(SK_BF16, 257);
    check_rounded_once(SK_F16, 2049);
    check_f32_out(SK_BF16, 4);
    check_f32_out(SK_F16, 2050);
    for (int ti = 0; ti < 2; ti++) {
        sk_dtype t = ti ? SK_F16 : SK_BF16;
        check_accumulate_f32_out("[5,7]x[7,3]", t, SC_SHAPE(5, 7), SC_SHAPE(7, 3), dd(0, 0, 0, 1, o, z));
        check_accumulate_f32_out("batched [4,5,7]x[4,7,3]", t, SC_SHAPE(4, 5, 7), SC_SHAPE(4, 7, 3),
                                 dd(1, z, z, 1, t2, o));
        check_accumulate_f32_out("transposed rhs [64,300]x[100,300]", t, SC_SHAPE(64, 300), SC_SHAPE(100, 300),
                                 dd(0, 0, 0, 1, o, o));
        check_accumulate_f32_out("[16,2000]x[2000,64]", t, SC_SHAPE(16, 2000), SC_SHAPE(2000, 64),
                                 dd(0, 0, 0, 1, o, z));
    }
    sk_epilogue wide = {NULL, SK_COPY, 0, 1};
    check(sk_dot_epilogue(NULL, SK_F32, SC_SHAPE(2), p, SC_SHAPE(2), q, &(sk_dot_dims){0, 1, {0}, {0}, {0}, {0}}, &wide, &r,
                          NULL) == SC_ERR,
          "dot epilogue: f32_out of f32 operands is an error");
    int32_t x[2] = {1, 2}, y[2] = {3, 4}, c;
    sk_epilogue relu = {NULL, SK_RELU, 0, 0}, exp_ = {NULL, SK_EXP, 0, 0};
    check(sk_dot_epilogue(NULL, SK_I32, SC_SHAPE(2), x, SC_SHAPE(2), y, &(sk_dot_dims){0, 1, {0}, {0}, {0}, {0}}, &relu, &c,
                          NULL) == SC_ERR,
          "dot epilogue: i32 is an error");
    float f[2] = {1, 2}, g[2] = {3, 4}, h;
    check(sk_dot_epilogue(NULL, SK_F32, SC_SHAPE(2), f, SC_SHAPE(2), g, &(sk_dot_dims){0, 1, {0}, {0}, {0}, {0}}, &exp_, &h,
                          NULL) == SC_ERR,
          "dot epilogue: an activation it does not take (exp) is an error");
}

/* ---- reduce ---- */

static void test_reduce(void) {
    static const struct { int n, d[3]; } sets[] = {{0, {0}}, {1, {0}}, {1, {1}}, {1, {2}}, {2, {0, 2}}, {2, {2, 1}}, {3, {0, 1, 2}}};
    const sc_reduce ops[] = {SC_SUM, SC_MAX, SC_MIN};
    sc_shape s = SC_SHAPE(3, 4, 5);
    for (int ti = 0; ti < COUNT(ALL); ti++)
        for (int oi = 0; oi < 3; oi++) {
            sk_dtype t = ALL[ti];
            if (t == SK_BOOL && ops[oi] == SC_SUM)
                continue;
            int ok = 1;
            void *x = fill(t, 60, 3 + ti);
            for (int si = 0; si < COUNT(sets) && ok; si++) {
                int red[3] = {0};
                for (int i = 0; i < sets[si].n; i++) red[sets[si].d[i]] = 1;
                sc_shape os = {0, {0}};
                for (int d = 0; d < 3; d++)
                    if (!red[d]) os.dims[os.rank++] = s.dims[d];
                double acc[64];
                for (int i = 0; i < 64; i++) acc[i] = ops[oi] == SC_SUM ? 0 : ops[oi] == SC_MAX ? -INFINITY : INFINITY;
                for (int64_t i = 0; i < 60; i++) {
                    int64_t ix[3], oix[3];
                    unravel(s, i, ix);
                    int r = 0;
                    for (int d = 0; d < 3; d++)
                        if (!red[d]) oix[r++] = ix[d];
                    int64_t o = offset(os, oix);
                    double v = ld(t, x, i);
                    acc[o] = ops[oi] == SC_SUM ? acc[o] + v : ops[oi] == SC_MAX ? fmax(acc[o], v) : fmin(acc[o], v);
                }
                char want[64 * 8], got[64 * 8];
                for (int64_t i = 0; i < elems(os); i++) st(t, want, i, acc[i]);
                ok = sk_reduce(NULL, t, s, x, sets[si].n, sets[si].d, ops[oi], got) == 0 && equal(t, got, want, elems(os));
            }
            check(ok, "reduce %s %s over {}, {0}, {1}, {2}, {0,2}, {2,1}, {0,1,2}", NAME[t],
                  oi == 0 ? "sum" : oi == 1 ? "max" : "min");
            free(x);
        }
    float x[4] = {1, NAN, 3, -INFINITY}, m[2];
    check(sk_reduce(NULL, SK_F32, SC_SHAPE(2, 2), x, 1, (int[]){1}, SC_MAX, m) == 0 && isnan(m[0]) && m[1] == 3,
          "reduce max propagates NaN");
    int32_t big[2] = {INT32_MAX, 2}, s32;
    check(sk_reduce(NULL, SK_I32, SC_SHAPE(2), big, 1, (int[]){0}, SC_SUM, &s32) == 0 && s32 == INT32_MIN + 1,
          "reduce i32 sum wraps");
    /* bf16 sums accumulate in f32: 256 + 1 + ... (256 ones) is 512, not 256. */
    uint16_t h[257];
    h[0] = sc_bf16_from_float(256);
    for (int i = 1; i < 257; i++) h[i] = sc_bf16_from_float(1);
    uint16_t hs;
    check(sk_reduce(NULL, SK_BF16, SC_SHAPE(257), h, 1, (int[]){0}, SC_SUM, &hs) == 0 && sc_bf16_to_float(hs) == 512,
          "reduce bf16 sum accumulates in f32 (%g)", sc_bf16_to_float(hs));
    float e[1];
    check(sk_reduce(NULL, SK_F32, SC_SHAPE(0, 1), x, 1, (int[]){0}, SC_MAX, e) == 0 && e[0] == -INFINITY,
          "reduce of an empty dim gives the identity");
}

/* ---- top_k ---- */

/* The definition: element j of a row ranks by how many elements rank above
 * it (greater, or equal at a lower index; NaN above every number), so the
 * result's slot r holds the element with exactly r above it. */
static int above(double a, int64_t ia, double b, int64_t ib, int largest) {
    if (isnan(a) != isnan(b))
        return isnan(a);
    if (a == b || (isnan(a) && isnan(b)))
        return ia < ib;
    return largest ? a > b : a < b;
}

static void ref_top_k(sk_dtype t, int64_t rows, int64_t n, const void *x, int64_t k, int largest, int32_t *out) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            int64_t rank = 0;
            for (int64_t i = 0; i < n; i++)
                rank += above(ld(t, x, r * n + i), i, ld(t, x, r * n + j), j, largest);
            if (rank < k)
                out[r * k + rank] = (int32_t)j;
        }
}

static void test_top_k(void) {
    for (int ti = 0; ti < COUNT(NUMERIC); ti++) {
        sk_dtype t = NUMERIC[ti];
        void *x = fill(t, 6 * 7, 11u + (unsigned)ti);   /* values in -2..2: many ties */
        for (int largest = 0; largest < 2; largest++)
            for (int64_t k = 1; k <= 7; k += 3) {
                int32_t got[6 * 7], want[6 * 7];
                int rc = sk_top_k(NULL, t, SC_SHAPE(2, 3, 7), x, k, largest, got);
                ref_top_k(t, 6, 7, x, k, largest, want);
                check(rc == 0 && memcmp(got, want, sizeof(int32_t) * (size_t)(6 * k)) == 0,
                      "top_k %s k=%lld %s", NAME[t], (long long)k, largest ? "largest" : "smallest");
            }
        free(x);
    }
    float nan_row[5] = {1, NAN, 3, NAN, 3};
    int32_t i3[3], amin[1];
    check(sk_top_k(NULL, SK_F32, SC_SHAPE(5), nan_row, 3, 1, i3) == 0 && i3[0] == 1 && i3[1] == 3 && i3[2] == 2,
          "top_k ranks NaN first, ties by index");
    check(sk_top_k(NULL, SK_F32, SC_SHAPE(5), nan_row, 1, 0, amin) == 0 && amin[0] == 1, "argmin gives the first NaN");
    check(sk_top_k(NULL, SK_F32, SC_SHAPE(5), nan_row, 6, 1, i3) == SC_ERR && sk_top_k(NULL, SK_BOOL, SC_SHAPE(5), nan_row, 1, 1, i3) == SC_ERR,
          "top_k rejects k past the dim and bool");
    /* argsort's order: ascending, ties by index, NaN last (numpy.sort) */
    float row[7] = {NAN, 2, -INFINITY, 2, NAN, INFINITY, -1};
    int32_t order[7], want_order[7] = {2, 6, 1, 3, 5, 0, 4};
    check(sk_top_k(NULL, SK_F32, SC_SHAPE(7), row, 7, SK_ASCENDING, order) == 0 &&
          memcmp(order, want_order, sizeof order) == 0, "top_k SK_ASCENDING sorts NaN last, ties by index");
}

/* out[p, j] = sum_c x[p / rep, c] * w[idx[p], c, j] (trans: w[idx[p], j, c]),
 * the row of an index outside [0, e) clamped, or zeros with fill. */
static void ref_gather_dot(sk_dtype t, const void *w, int64_t e, int64_t k, int64_t n, int trans, int fill,
                           const int32_t *idx, int64_t rows, int64_t rep, const void *x, void *out) {
    for (int64_t p = 0; p < rows; p++) {
        int64_t i = idx[p] < 0 ? 0 : idx[p] >= e ? e - 1 : idx[p];
        int outside = idx[p] != i;
        for (int64_t j = 0; j < n; j++) {
            double sum = 0;
            for (int64_t c = 0; c < k; c++)
                sum += ld(t, x, p / rep * k + c) * ld(t, w, i * k * n + (trans ? j * k + c : c * n + j));
            st(t, out, p * n + j, fill && outside ? 0 : sum);
        }
    }
}

static void test_gather_dot(void) {
    const int64_t e = 3, k = 5, n = 4, rows = 6;
    const int32_t idx[6] = {2, -1, 0, 3, 2, 0};   /* 1 unused, 2 and 0 twice, -1 and 3 outside */
    for (int ti = 0; ti < COUNT(NUMERIC); ti++) {
        sk_dtype t = NUMERIC[ti];
        void *w = fill(t, e * k * n, 3u + (unsigned)ti), *x = fill(t, rows * k, 5u + (unsigned)ti);
        char got[6 * 4 * 8], want[6 * 4 * 8];
        for (int trans = 0; trans < 2; trans++)
            for (int fill_mode = 0; fill_mode < 2; fill_mode++)
                for (int64_t rep = 1; rep <= 2; rep++) {
                    sk_index_mode mode = fill_mode ? SK_FILL : SK_CLAMP;
                    int rc = sk_gather_dot(NULL, t, w, e, k, n, trans, mode, idx, rows, rep, x, got);
                    ref_gather_dot(t, w, e, k, n, trans, fill_mode, idx, rows, rep, x, want);
                    check(rc == 0 && equal(t, got, want, rows * n), "gather_dot %s trans=%d %s rep=%lld", NAME[t],
                          trans, fill_mode ? "fill" : "clamp", (long long)rep);
                }
        free(w);
        free(x);
    }
    float w1[1] = {1}, x1[1] = {1}, out1[1];
    check(sk_gather_dot(NULL, SK_F32, w1, 1, 1, 1, 0, SK_CLAMP, idx, 5, 2, x1, out1) == SC_ERR &&
              sk_gather_dot(NULL, SK_BOOL, w1, 1, 1, 1, 0, SK_CLAMP, idx, 1, 1, x1, out1) == SC_ERR &&
              sk_gather_dot(NULL, SK_F32, w1, 0, 1, 1, 0, SK_CLAMP, idx, 1, 1, x1, out1) == SC_ERR,
          "gather_dot rejects rows not a multiple of rep, bool and an empty table");
}

/* ---- cumsum ---- */

/* Each element's prefix: the sum, in double, of its row's elements up to
 * and including it (exact for ktest.h's inputs), rounded to t. */
static void ref_cumsum(sk_dtype t, sc_shape s, const void *x, int dim, void *want) {
    for (int64_t i = 0; i < elems(s); i++) {
        int64_t ix[SC_MAX_RANK];
        unravel(s, i, ix);
        double sum = 0;
        for (int64_t j = ix[dim]; j >= 0; j--) {
            ix[dim] = j;
            sum += ld(t, x, offset(s, ix));
        }
        st(t, want, i, sum);
    }
}

static void test_cumsum(void) {
    static const sc_shape shapes[] = {SC_SHAPE(3, 4, 5), SC_SHAPE(7), SC_SHAPE(1, 9), SC_SHAPE(6, 1), SC_SHAPE(0, 3),
                                      SC_SHAPE(2, 0)};
    for (int ti = 0; ti < COUNT(NUMERIC); ti++) {
        sk_dtype t = NUMERIC[ti];
        int ok = 1;
        for (int si = 0; si < COUNT(shapes) && ok; si++)
            for (int dim = 0; dim < shapes[si].rank && ok; dim++) {
                sc_shape s = shapes[si];
                void *x = fill(t, elems(s), 5 + ti + si), *want = fill(t, elems(s), 99), *got = fill(t, elems(s), 98);
                ref_cumsum(t, s, x, dim, want);
                ok = sk_cumsum(NULL, t, s, x, dim, got) == 0 && equal(t, got, want, elems(s));
                if (!ok)
                    printf("# shape %d of %lld, dim %d\n", si, (long long)elems(s), dim);
                free(x);
                free(want);
                free(got);
            }
        check(ok, "cumsum %s along every dim of [3,4,5], [7], [1,9], [6,1], [0,3], [2,0]", NAME[t]);
    }
    int32_t big[2] = {INT32_MAX, 2}, s32[2];
    check(sk_cumsum(NULL, SK_I32, SC_SHAPE(2), big, 0, s32) == 0 && s32[0] == INT32_MAX && s32[1] == INT32_MIN + 1,
          "cumsum i32 wraps");
    /* bf16 prefixes accumulate in f32, each rounded once: 256 + 1 is 256 in
     * bf16, but the prefix of 256 and 256 ones is 512, not 256. */
    uint16_t h[257], hs[257];
    h[0] = sc_bf16_from_float(256);
    for (int i = 1; i < 257; i++) h[i] = sc_bf16_from_float(1);
    int rc = sk_cumsum(NULL, SK_BF16, SC_SHAPE(257), h, 0, hs);
    check(rc == 0 && sc_bf16_to_float(hs[1]) == 256 && sc_bf16_to_float(hs[256]) == 512,
          "cumsum bf16 accumulates in f32 (%g, %g)", sc_bf16_to_float(hs[1]), sc_bf16_to_float(hs[256]));
    uint8_t b[4] = {1, 0, 1, 1}, bo[4];
    float f[4] = {1, 2, 3, 4}, fo[4];
    check(sk_cumsum(NULL, SK_BOOL, SC_SHAPE(4), b, 0, bo) == SC_ERR && sk_cumsum(NULL, SK_F32, SC_SHAPE(2, 2), f, 2, fo) == SC_ERR &&
              sk_cumsum(NULL, SK_F32, SC_SHAPE(2, 2), f, -1, fo) == SC_ERR,
          "cumsum of bool, or along a dim out of range, is an error");
}

/* ---- attention without the scores (lib/attention.c) ---- */

/* x's bf16 copy (malloc'd), and x rounded to it in place: the reference
 * reads what the kernel reads. */
static uint16_t *rounded_to_bf16(float *x, int64_t n) {
    uint16_t *h = malloc((size_t)n * 2);
    sk_convert(NULL, SK_F32, SK_BF16, n, x, h);
    sk_convert(NULL, SK_BF16, SK_F32, n, h, x);
    return h;
}

/* Heads laid out as the samples' q[b, s, h, k]: batch dims (b, h) at
 * strides (S*H*K, K), rows H*K apart; the reference in double from the
 * definition: max, exp, sum, divide, then the product with v. */
static void check_attention(const char *what, int64_t B, int64_t H, int64_t S, int64_t T, int64_t K, int64_t Kv,
                            int masked, int64_t causal, int bf16) {
    float *q = fill(SK_F32, B * S * H * K, 3), *k = fill(SK_F32, B * T * H * K, 5), *v = fill(SK_F32, B * T * H * Kv, 7);
    /* The reference's mask: the given one (or zeros), -1e9 past the causal bound. */
    float *mask = masked || causal >= 0 ? fill(SK_F32, S * T, 9) : NULL, *got = malloc((size_t)(B * S * H * Kv) * 4);
    for (int64_t i = 0; !masked && mask && i < S * T; i++)
        mask[i] = 0;
    for (int64_t s = 0; causal >= 0 && s < S; s++)
        for (int64_t t = s + causal + 1; t < T; t++)
            mask[s * T + t] = -1e9f;
    sk_attention_args a = {2, {B, H}, {S * H * K, K}, {T * H * K, K}, {T * H * Kv, Kv}, {S * H * Kv, Kv},
                           S, T, K, Kv, SK_F32, SK_F32, q, k, v, masked ? mask : NULL, H * K, H * K, H * Kv, H * Kv,
                           T, 0.3f, causal, got};
    /* bf16: q, k, v rounded (the reference reads the rounded values), out rounded once. */
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL, *got16 = NULL;
    if (bf16) {
        q16 = rounded_to_bf16(q, B * S * H * K), k16 = rounded_to_bf16(k, B * T * H * K);
        v16 = rounded_to_bf16(v, B * T * H * Kv), got16 = malloc((size_t)(B * S * H * Kv) * 2);
        a.t = a.out_t = SK_BF16, a.q = q16, a.k = k16, a.v = v16, a.out = got16;
    }
    int ok = sk_attention(NULL, &a) == 0;
    if (bf16)
        sk_convert(NULL, SK_BF16, SK_F32, B * S * H * Kv, got16, got);
    double worst = 0, big = 0;
    double *e = malloc((size_t)T * sizeof *e);
    for (int64_t b = 0; ok && b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t s = 0; s < S; s++) {
                double peak = -INFINITY, total = 0;
                for (int64_t t = 0; t < T; t++) {
                    double x = 0;
                    for (int64_t c = 0; c < K; c++)
                        x += (double)q[((b * S + s) * H + h) * K + c] * k[((b * T + t) * H + h) * K + c];
                    e[t] = x * 0.3 + (mask ? mask[s * T + t] : 0);
                    peak = e[t] > peak ? e[t] : peak;
                }
                for (int64_t t = 0; t < T; t++)
                    total += e[t] = exp(e[t] - peak);
                for (int64_t c = 0; c < Kv; c++) {
                    double o = 0;
                    for (int64_t t = 0; t < T; t++)
                        o += e[t] / total * v[((b * T + t) * H + h) * Kv + c];
                    double d = fabs(o - got[((b * S + s) * H + h) * Kv + c]);
                    worst = d > worst ? d : worst;
                    big = fabs(o) > big ? fabs(o) : big;
                }
            }
    check(ok && worst <= (bf16 ? 8e-3 : 1e-5) * (big > 1 ? big : 1), "attention %s: within %.1e of the double reference",
          what, worst);
    free(q); free(k); free(v); free(mask); free(got); free(e);
    free(q16); free(k16); free(v16); free(got16);
}

/* The gradient against its definition in double: p as above, dv = p^T
 * dout, ds = p (dout v^T - sum_t p dout v^T) scale, dq = ds k, dk = ds^T q.
 * q, v, dout and dq lie as the samples' [b, s, h, k]; k and dk as
 * [b, h, t, k] (other strides than q's); dv as [b, t, h, k].  bf16: q, k,
 * v and dout rounded first (the reference reads them so); the kernel
 * rounds p and ds too, which the tolerance allows. */
static void check_attention_grad(const char *what, int64_t B, int64_t H, int64_t S, int64_t T, int64_t K, int64_t Kv,
                                 int masked, int64_t causal, int bf16) {
    int64_t nq = B * S * H * K, nk = B * T * H * K, nv = B * T * H * Kv, no = B * S * H * Kv;
    float *q = fill(SK_F32, nq, 3), *k = fill(SK_F32, nk, 5), *v = fill(SK_F32, nv, 7), *dout = fill(SK_F32, no, 11);
    float *mask = masked || causal >= 0 ? fill(SK_F32, S * T, 9) : NULL;
    for (int64_t i = 0; !masked && mask && i < S * T; i++)
        mask[i] = 0;
    for (int64_t s = 0; causal >= 0 && s < S; s++)
        for (int64_t t = s + causal + 1; t < T; t++)
            mask[s * T + t] = -1e9f;
    float *dq = malloc((size_t)nq * 4), *dk = malloc((size_t)nk * 4), *dv = malloc((size_t)nv * 4);
    sk_attention_grad_args g = {
        .fwd = {2, {B, H}, {S * H * K, K}, {H * T * K, T * K}, {T * H * Kv, Kv}, {0}, S, T, K, Kv, SK_F32, SK_F32,
                q, k, v, masked ? mask : NULL, H * K, K, H * Kv, 0, T, 0.3f, causal, NULL},
        .dout = dout, .dout_t = SK_F32, .grad_t = SK_F32,
        .dout_batch = {S * H * Kv, Kv}, .dq_batch = {S * H * K, K}, .dk_batch = {H * T * K, T * K},
        .dv_batch = {T * H * Kv, Kv}, .dout_row = H * Kv, .dq_row = H * K, .dk_row = K, .dv_row = H * Kv,
        .dq = dq, .dk = dk, .dv = dv};
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL, *o16 = NULL;
    if (bf16) {
        q16 = rounded_to_bf16(q, nq), k16 = rounded_to_bf16(k, nk), v16 = rounded_to_bf16(v, nv);
        o16 = rounded_to_bf16(dout, no);
        g.fwd.t = SK_BF16, g.fwd.q = q16, g.fwd.k = k16, g.fwd.v = v16, g.dout = o16, g.dout_t = SK_BF16;
    }
    int ok = sk_attention_grad(NULL, &g) == 0;
    double *p = malloc((size_t)(S * T) * sizeof *p), *ds = malloc((size_t)(S * T) * sizeof *ds);
    double worst = 0, big = 1;
#define Q(s, c) q[((b * S + (s)) * H + h) * K + (c)]
#define KK(t, c) k[((b * H + h) * T + (t)) * K + (c)]
#define V(t, c) v[((b * T + (t)) * H + h) * Kv + (c)]
#define DO(s, c) dout[((b * S + (s)) * H + h) * Kv + (c)]
#define DIFF(want, got) do { double d_ = fabs((want) - (got)); worst = d_ > worst ? d_ : worst; \
        big = fabs(want) > big ? fabs(want) : big; } while (0)
    for (int64_t b = 0; ok && b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t s = 0; s < S; s++) {
                double peak = -INFINITY, total = 0, dot = 0;
                for (int64_t t = 0; t < T; t++) {
                    double x = 0;
                    for (int64_t c = 0; c < K; c++)
                        x += (double)Q(s, c) * KK(t, c);
                    p[s * T + t] = x * 0.3 + (mask ? mask[s * T + t] : 0);
                    peak = p[s * T + t] > peak ? p[s * T + t] : peak;
                }
                for (int64_t t = 0; t < T; t++)
                    total += p[s * T + t] = exp(p[s * T + t] - peak);
                for (int64_t t = 0; t < T; t++) {
                    p[s * T + t] /= total;
                    double dp = 0;
                    for (int64_t c = 0; c < Kv; c++)
                        dp += (double)DO(s, c) * V(t, c);
                    ds[s * T + t] = dp;
                    dot += p[s * T + t] * dp;
                }
                for (int64_t t = 0; t < T; t++)
                    ds[s * T + t] = p[s * T + t] * (ds[s * T + t] - dot) * 0.3;
            }
            for (int64_t s = 0; s < S; s++)
                for (int64_t c = 0; c < K; c++) {
                    double x = 0;
                    for (int64_t t = 0; t < T; t++)
                        x += ds[s * T + t] * KK(t, c);
                    DIFF(x, dq[((b * S + s) * H + h) * K + c]);
                }
            for (int64_t t = 0; t < T; t++) {
                for (int64_t c = 0; c < K; c++) {
                    double x = 0;
                    for (int64_t s = 0; s < S; s++)
                        x += ds[s * T + t] * Q(s, c);
                    DIFF(x, dk[((b * H + h) * T + t) * K + c]);
                }
                for (int64_t c = 0; c < Kv; c++) {
                    double x = 0;
                    for (int64_t s = 0; s < S; s++)
                        x += p[s * T + t] * DO(s, c);
                    DIFF(x, dv[((b * T + t) * H + h) * Kv + c]);
                }
            }
        }
#undef Q
#undef KK
#undef V
#undef DO
#undef DIFF
    check(ok && worst <= (bf16 ? 8e-3 : 1e-5) * big, "attention gradient %s: within %.1e of the double reference (of %.1f)",
          what, worst, big);
    free(q); free(k); free(v); free(dout); free(mask); free(dq); free(dk); free(dv); free(p); free(ds);
    free(q16); free(k16); free(v16); free(o16);
}

static void test_attention_grad(void) {
    check_attention_grad("[2,3] heads, S 67, T 131, K 19, Kv 23: tails of both tiles", 2, 3, 67, 131, 19, 23, 0, -1, 0);
    check_attention_grad("with an additive mask", 2, 3, 67, 131, 19, 23, 1, -1, 0);
    check_attention_grad("causal, S = T = 300", 1, 2, 300, 300, 16, 16, 0, 0, 0);
    check_attention_grad("causal offset 5 and a mask, S 130 < T 300", 1, 2, 130, 300, 8, 12, 1, 5, 0);
    check_attention_grad("causal offset 200, S 70 < T 300", 2, 1, 70, 300, 8, 8, 0, 200, 0);
    check_attention_grad("one key", 1, 1, 5, 1, 4, 4, 0, -1, 0);
    /* More than 512 keys: two passes over key tiles, not every key in one. */
    check_attention_grad("two passes, S 130, T 600, a mask", 1, 2, 130, 600, 8, 12, 1, -1, 0);
    check_attention_grad("two passes, causal offset 500, S 140 < T 700", 1, 2, 140, 700, 8, 8, 0, 500, 0);
    check_attention_grad("two passes, bf16, causal, S = T = 520", 1, 1, 520, 520, 8, 8, 0, 0, 1);
    check_attention_grad("bf16 q, k, v and dout, causal, S = T = 200", 2, 2, 200, 200, 16, 24, 0, 0, 1);
    check_attention_grad("bf16 with a mask, S 67, T 131", 1, 3, 67, 131, 19, 23, 1, -1, 1);
    sk_attention_grad_args bad = {0};
    check(sk_attention_grad(NULL, &bad) != 0 && sk_attention_grad(NULL, NULL) != 0, "attention gradient rejects missing operands");
}

static void test_attention(void) {
    check_attention("[2,3] heads, S 67, T 131, K 19, Kv 23: tails of both tiles", 2, 3, 67, 131, 19, 23, 0, -1, 0);
    check_attention("with an additive mask", 2, 3, 67, 131, 19, 23, 1, -1, 0);
    check_attention("causal, S = T = 200 (key tiles past each query tile skipped)", 1, 2, 200, 200, 16, 16, 1, 0, 0);
    check_attention("causal offset 5, S 130 < T 300", 1, 2, 130, 300, 8, 12, 1, 5, 0);
    check_attention("causal by position alone (no mask), S = T = 200", 1, 2, 200, 200, 16, 16, 0, 0, 0);
    check_attention("causal by position alone, offset 70, S 70 < T 300", 2, 1, 70, 300, 8, 8, 0, 70, 0);
    check_attention("one key", 1, 1, 5, 1, 4, 4, 0, -1, 0);
    check_attention("bf16 q, k, v and out, causal, S = T = 200", 2, 2, 200, 200, 16, 24, 0, 0, 1);
    check_attention("bf16 with a mask, S 67, T 131", 1, 3, 67, 131, 19, 23, 1, -1, 1);
    sk_attention_args bad = {0};
    check(sk_attention(NULL, &bad) != 0 && sk_attention(NULL, NULL) != 0, "attention rejects missing operands");
}

int main(void) {
    test_gather_dot();
    test_attention_grad();
    test_dot();
    test_dot_epilogue();
    test_dot_strided();
    test_dot_padded();
    test_reduce();
    test_top_k();
    test_cumsum();
    test_attention();
    return tap_done();
}
