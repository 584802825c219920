/* dot.c: the general contraction (HLO's dot) over row-major tensors.
 *
 * Each operand is viewed, for every batch index, as a matrix: the lhs as
 * M x K (M = its free dims, K = the contracting dims), the rhs as K x N.  A
 * group of dims can be one matrix index with one stride when its dims are
 * adjacent in memory in the order used (extent-1 dims do not matter).  When
 * one of the two strides of a matrix is 1, BLAS takes it as it lies:
 * CblasNoTrans if the inner index is contiguous, CblasTrans if the outer one
 * is, with the other stride as the leading dimension.  Batch dims are
 * looped over by their strides, wherever they lie, one GEMM per batch index
 * into a contiguous M x N block of the result.  Only an operand whose free
 * or contracting dims are interleaved (say lhs [m0, k, m1]) is copied first,
 * into [batch..., free..., contracting...] order.
 *
 * f32 GEMMs run on oneDNN (through sgemm.c, which first copies operands
 * its no-copy kernels would read at a bad stride), which picks its kernels
 * from the ISA the CPU reports (AVX2, AVX-512, ...), so it reaches the machine's FMA peak on a
 * CPU whose model name no table knows; OpenBLAS picks by model name and
 * falls back to SSE3 or Haswell kernels on new CPUs (docs/kernels.md has
 * the measurements).  f64 has only OpenBLAS (oneDNN has no dgemm).  bf16
 * and f16 run on oneDNN's matmul primitive (matmul.c) where the CPU has
 * instructions for them.  SHARDC_GEMM=openblas leaves oneDNN out, for
 * comparison: f32 on OpenBLAS, bf16 and f16 on f32 panels (below) on OpenBLAS.
 *
 * Panels, for i32 and for bf16/f16 on CPUs without those instructions:
 * both operands are packed into [b][M][K] and [b][K][N] f32 (int32) panels,
 * multiplied in f32 by the f32 GEMM (int32 by a blocked loop, wrapping)
 * and rounded once into the result (or stored as the f32 sums they are:
 * sk_epilogue's f32_out, for partial sums reduced in f32).  The products
 * of bf16 and f16 values are exact in f32, so the f32 GEMM computes what
 * a bf16 GEMM accumulating in f32 does, at the f32 rate (ten times what
 * a loop of shardc's own reached on an AVX2 CPU: 76 against 7.7 GFLOP/s
 * for 1024^3 on one core).
 *
 * An epilogue (sk_dot_epilogue: a bias along the rows, then an activation)
 * is applied to the f32 accumulator before the rounding where the GEMM
 * allows it: oneDNN's matmul primitive (bias and post-op) and the loop.
 * dnnl_sgemm and BLAS take none, so for f32 and f64 it runs on each
 * batch index's result right after its GEMM, with the elementwise kernels:
 * the same bits as the unfused instructions. */
#include "internal.h"

#include "ew_ops.h"

#include <cblas.h>
#include <limits.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* 1 when GEMMs leave oneDNN out (SHARDC_GEMM=openblas), read once. */
static int without_onednn(void) {
    static atomic_int choice;   /* 0: not read yet, 1: oneDNN, 2: OpenBLAS */
    int c = atomic_load_explicit(&choice, memory_order_relaxed);
    if (!c) {
        const char *e = getenv("SHARDC_GEMM");
        c = e && strcmp(e, "openblas") == 0 ? 2 : 1;
        atomic_store_explicit(&choice, c, memory_order_relaxed);
    }
    return c == 2;
}

/* Elements this thread's dots have copied into packed operands: tests use
 * it to check that BLAS-expressible layouts are not copied. */
static _Thread_local int64_t copied;

int64_t sk_dot_copied_elems(void) { return copied; }

/* One operand as a batch of matrices: element (b, r, c) at
 * base + sum(bi * bstride[i]) + r * rs + c * cs (in elements). */
typedef struct {
    const char *base;
    int64_t bstride[SC_MAX_RANK];
    int64_t rs, cs;
} view;

/* The single stride of dims g[0..n) (major first) taken as one index, or -1
 * if they are not adjacent in memory in that order.  0 means "any": every
 * dim has extent 1, so the stride never matters. */
static int64_t group_stride(int n, const int *g, sc_shape s, const int64_t *st) {
    int64_t stride = 0, next_span = 0;
    for (int i = n - 1; i >= 0; i--) {
        int64_t e = s.dims[g[i]];
        if (e == 1)
            continue;
        if (stride == 0)
            stride = st[g[i]];
        else if (st[g[i]] != next_span)
            return -1;
        next_span = st[g[i]] * e;
    }
    return stride;
}

/* How BLAS reads a rows x cols matrix with strides rs, cs (0 = any):
 * sets *trans and *ld and returns 1, or 0 if it cannot. */
static int blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                       enum CBLAS_TRANSPOSE *trans, int64_t *ld) {
    if ((cs == 1 || cs == 0 || cols == 1) && (rows == 1 || rs >= cols)) {
        *trans = CblasNoTrans;
        *ld = rows == 1 || rs == 0 ? (cols > 1 ? cols : 1) : rs;
        return 1;
    }
    if ((rs == 1 || rs == 0 || rows == 1) && (cols == 1 || cs >= rows)) {
        *trans = CblasTrans;
        *ld = cols == 1 || cs == 0 ? (rows > 1 ? rows : 1) : cs;
        return 1;
    }
    return 0;
}

typedef struct {
    int nb, nfree;
    int batch[SC_MAX_RANK], free[SC_MAX_RANK], contract[SC_MAX_RANK];
} side;

/* Copies operand x into [batch..., free..., contract...] (lhs) or
 * [batch..., contract..., free...] (rhs, when k_first) order, into `into`
 * or, when it is NULL, a fresh buffer (for free()), and sets v to read it. */
static void *pack(size_t es, sc_shape s, const void *x, const int64_t *st, const side *sd, int nc, int k_first,
                  int64_t rows, int64_t cols, view *v, void *into) {
    int64_t dims[3 * SC_MAX_RANK], sst[3 * SC_MAX_RANK];
    int r = 0;
    for (int i = 0; i < sd->nb; i++, r++)
        dims[r] = s.dims[sd->batch[i]], sst[r] = st[sd->batch[i]];
    for (int pass = 0; pass < 2; pass++) {
        int want_k = pass == 0 ? k_first : !k_first;
        int n = want_k ? nc : sd->nfree;
        const int *g = want_k ? sd->contract : sd->free;
        for (int i = 0; i < n; i++, r++)
            dims[r] = s.dims[g[i]], sst[r] = st[g[i]];
    }
    int64_t total = rows * cols;
    for (int i = 0; i < sd->nb; i++)
        total *= s.dims[sd->batch[i]];
    void *buf = into ? into : malloc(total ? (size_t)total * es : 1);
    if (!buf)
        return NULL;
    copied += total;
    sk_strided_copy(es, r, dims, x, sst, buf);
    v->base = buf;
    int64_t m = rows * cols;
    for (int i = sd->nb - 1; i >= 0; i--) {
        v->bstride[i] = m;
        m *= s.dims[sd->batch[i]];
    }
    v->rs = cols;
    v->cs = 1;
    return buf;
}

/* Sorts the contracting pairs by the position of the lhs (which = 0) or rhs
 * (which = 1) dim; the order of K is free since it is summed. */
static void sort_pairs(int n, int *l, int *r, int which) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (which ? r : l)[j - 1] > (which ? r : l)[j]; j--) {
            int t = l[j]; l[j] = l[j - 1]; l[j - 1] = t;
            t = r[j]; r[j] = r[j - 1]; r[j - 1] = t;
        }
}

/* An epilogue for the loop: bias (N floats, or NULL), then act, stored
 * as dtype out. */
typedef struct {
    const float *bias;
    sk_unary_op act;
    sk_dtype out;
} epilogue;

/* C = A B + beta C in f32, row-major, on the engine chosen: oneDNN (sgemm.c)
 * or, under SHARDC_GEMM=openblas, OpenBLAS. */
static int gemm_f32(sk_ctx *ctx, char ta, char tb, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (!without_onednn())
        return sk_sgemm(ctx, ta, tb, M, N, K, a, lda, b, ldb, beta, c, ldc);
    cblas_sgemm(CblasRowMajor, ta == 'N' ? CblasNoTrans : CblasTrans, tb == 'N' ? CblasNoTrans : CblasTrans, (int)M,
                (int)N, (int)K, 1.0f, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return 0;
}

/* The bf16/f16/i32 product: packed panels, f32 or wrapping int32. */
static int panel_dot(sk_ctx *ctx, sk_dtype t, int64_t nbat, int64_t M, int64_t N, int64_t K, const void *a,
                    const void *b, const side *ls, const side *rs, sc_shape lhs, sc_shape rhs,
                    int nc, epilogue ep, void *out);

static int is_activation(sk_unary_op act) {
    return act == SK_COPY || act == SK_GELU || act == SK_RELU || act == SK_TANH || act == SK_LOGISTIC;
}

/* The epilogue (bias: N elements of dtype t, or NULL; then act) of an M x
 * N result c of dtype t, in place, by the elementwise kernels: an f32 or
 * f64 GEMM's, zeros of any dtype, or a bf16/f16 panel dot's f32 sums. */
static int epilogue_after(sk_ctx *ctx, sk_dtype t, const void *bias, sk_unary_op act, void *c, int64_t M, int64_t N) {
    size_t row = (size_t)N * sk_dtype_size(t);
    for (int64_t i = 0; i < M && bias; i++)
        if (sk_binary(ctx, SK_ADD, t, N, (char *)c + i * row, bias, (char *)c + i * row))
            return SC_ERR;
    return act == SK_COPY ? 0 : sk_unary(ctx, act, t, M * N, c, c);
}

/* out += the dot (n elements of dtype ot: t, or f32 for a wide dot's
 * sums), for the GEMMs that take no beta: the product computed aside, then
 * added (rounded as the unfused dot and add are). */
static int accumulate_aside(sk_ctx *ctx, sk_dtype t, sk_dtype ot, sc_shape lhs, const void *a, sc_shape rhs,
                            const void *b, const sk_dot_dims *dd, void *out, int64_t n) {
    void *product = malloc((size_t)n * sk_dtype_size(ot));
    sk_epilogue wide = {NULL, SK_COPY, 0, ot != t};
    int status = !product || sk_dot_epilogue(ctx, t, lhs, a, rhs, b, dd, &wide, product, NULL) ||
                 sk_binary(ctx, SK_ADD, ot, n, out, product, out) ? SC_ERR : 0;
    free(product);
    return status;
}

static int dot_strided(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, const int64_t *lst_in, sc_shape rhs,
                       const void *b, const int64_t *rst_in, const sk_dot_dims *dd, const sk_epilogue *ep,
                       void *out, int64_t ldo, sc_shape *out_shape);

int sk_dot(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, sc_shape rhs, const void *b,
           const sk_dot_dims *dd, void *out, sc_shape *out_shape) {
    return dot_strided(ctx, t, lhs, a, NULL, rhs, b, NULL, dd, NULL, out, 0, out_shape);
}

int sk_dot_epilogue(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, sc_shape rhs, const void *b,
                    const sk_dot_dims *dd, const sk_epilogue *ep, void *out, sc_shape *out_shape) {
    return dot_strided(ctx, t, lhs, a, NULL, rhs, b, NULL, dd, ep, out, 0, out_shape);
}

/* A row-major copy of x, of shape s lying with strides st (for free()). */
static void *densify(sk_dtype t, sc_shape s, const void *x, const int64_t *st) {
    int64_t n = 1, dims[SC_MAX_RANK];
    for (int d = 0; d < s.rank; d++)
        n *= dims[d] = s.dims[d];
    void *buf = malloc(n ? (size_t)n * sk_dtype_size(t) : 1);
    if (buf) {
        copied += n;
        sk_strided_copy(sk_dtype_size(t), s.rank, dims, x, st, buf);
    }
    return buf;
}

/* Copies `rows` runs of `row` bytes between arrays whose runs lie `dst_ld`
 * and `src_ld` bytes apart. */
static void copy_rows(void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows, int64_t row) {
    for (int64_t i = 0; i < rows; i++)
        memcpy((char *)dst + i * dst_ld, (const char *)src + i * src_ld, (size_t)row);
}

/* The elements of operand s outside the dims skip1 and skip2. */
static int64_t free_elems(sc_shape s, const int *skip1, int n1, const int *skip2, int n2) {
    int64_t e = 1;
    for (int d = 0; d < s.rank; d++) {
        int skipped = 0;
        for (int i = 0; i < n1; i++)
            skipped |= skip1[i] == d;
        for (int i = 0; i < n2; i++)
            skipped |= skip2[i] == d;
        e *= skipped ? 1 : s.dims[d];
    }
    return e;
}

/* sk_dot_strided into rows ldo apart, for what cannot store there itself
 * (the packed paths, an epilogue that runs on dense rows): the result
 * computed aside (from out's rows when it accumulates) and copied in. */
static int dot_aside(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, const int64_t *lst, sc_shape rhs,
                     const void *b, const int64_t *rst, const sk_dot_dims *dd, const sk_epilogue *ep, void *out,
                     int64_t ldo) {
    if (!dd || dd->nbatch < 0 || dd->ncontract < 0 || dd->nbatch + dd->ncontract > SC_MAX_RANK)
        return SC_ERR;
    int64_t N = free_elems(rhs, dd->rhs_batch, dd->nbatch, dd->rhs_contract, dd->ncontract);
    int64_t rows = free_elems(lhs, dd->lhs_contract, dd->ncontract, NULL, 0);
    int64_t es = (int64_t)sk_dtype_size(ep && ep->f32_out ? SK_F32 : t);
    void *aside = malloc((size_t)(rows * N * es) + 1);
    if (!aside)
        return SC_ERR;
    if (ep && ep->accumulate)
        copy_rows(aside, N * es, out, ldo * es, rows, N * es);
    int status = sk_dot_strided(ctx, t, lhs, a, lst, rhs, b, rst, dd, ep, aside, 0);
    if (!status)
        copy_rows(out, ldo * es, aside, N * es, rows, N * es);
    free(aside);
    return status;
}

int sk_dot_strided(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, const int64_t *lst, sc_shape rhs,
                   const void *b, const int64_t *rst, const sk_dot_dims *dd, const sk_epilogue *ep, void *out,
                   int64_t ldo) {
    if (!sk_valid_dtype(t) || !sk_valid_shape(lhs) || !sk_valid_shape(rhs) || ldo < 0)
        return SC_ERR;
    int plain = !ep || (!ep->bias && ep->act == SK_COPY && !ep->f32_out);
    if (ldo && ((t != SK_F32 && t != SK_F64) || !plain))
        return dot_aside(ctx, t, lhs, a, lst, rhs, b, rst, dd, ep, out, ldo);
    if (t == SK_F32 || t == SK_F64)      /* BLAS stores the rows where they lie (its ldc) */
        return dot_strided(ctx, t, lhs, a, lst, rhs, b, rst, dd, ep, out, ldo, NULL);
    /* The packed paths of the other dtypes read row-major operands. */
    void *da = lst ? densify(t, lhs, a, lst) : NULL, *db = rst ? densify(t, rhs, b, rst) : NULL;
    int status = (lst && !da) || (rst && !db) ? SC_ERR
                 : dot_strided(ctx, t, lhs, da ? da : a, NULL, rhs, db ? db : b, NULL, dd, ep, out, 0, NULL);
    free(da);
    free(db);
    return status;
}

static int dot_strided(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, const int64_t *lst_in, sc_shape rhs,
                       const void *b, const int64_t *rst_in, const sk_dot_dims *dd, const sk_epilogue *ep,
                       void *out, int64_t ldo, sc_shape *out_shape) {
    if (!sk_valid_dtype(t) || t == SK_BOOL || !sk_valid_shape(lhs) || !sk_valid_shape(rhs) ||
        !dd || dd->nbatch < 0 || dd->ncontract < 0 || dd->nbatch + dd->ncontract > SC_MAX_RANK)
        return SC_ERR;
    static const sk_epilogue none = {NULL, SK_COPY, 0, 0};
    if (!ep)
        ep = &none;
    if ((ep->bias || ep->act != SK_COPY) && (t == SK_I32 || !is_activation(ep->act) || ep->accumulate))
        return SC_ERR;
    if (ep->f32_out && ((t != SK_BF16 && t != SK_F16) || ep->bias || ep->act != SK_COPY))
        return SC_ERR;
    sk_dtype ot = ep->f32_out ? SK_F32 : t;    /* the result's dtype */
    float beta = ep->accumulate ? 1.0f : 0.0f;
    int nb = dd->nbatch, nc = dd->ncontract;
    int lrole[SC_MAX_RANK] = {0}, rrole[SC_MAX_RANK] = {0};   /* 0 free, 1 batch, 2 contract */
    for (int i = 0; i < nb + nc; i++) {
        int l = i < nb ? dd->lhs_batch[i] : dd->lhs_contract[i - nb];
        int r = i < nb ? dd->rhs_batch[i] : dd->rhs_contract[i - nb];
        if (l < 0 || l >= lhs.rank || r < 0 || r >= rhs.rank || lrole[l] || rrole[r] ||
            lhs.dims[l] != rhs.dims[r])
            return SC_ERR;
        lrole[l] = rrole[r] = i < nb ? 1 : 2;
    }
    side ls = {.nb = nb}, rs = {.nb = nb};
    int lc[SC_MAX_RANK], rc[SC_MAX_RANK];
    for (int i = 0; i < nb; i++)
        ls.batch[i] = dd->lhs_batch[i], rs.batch[i] = dd->rhs_batch[i];
    for (int i = 0; i < nc; i++)
        lc[i] = dd->lhs_contract[i], rc[i] = dd->rhs_contract[i];
    for (int d = 0; d < lhs.rank; d++)
        if (!lrole[d])
            ls.free[ls.nfree++] = d;
    for (int d = 0; d < rhs.rank; d++)
        if (!rrole[d])
            rs.free[rs.nfree++] = d;
    if (nb + ls.nfree + rs.nfree > SC_MAX_RANK)
        return SC_ERR;

    sc_shape os = {nb + ls.nfree + rs.nfree, {0}};
    int64_t nbat = 1, M = 1, N = 1, K = 1;
    for (int i = 0; i < nb; i++)
        nbat *= os.dims[i] = lhs.dims[ls.batch[i]];
    for (int i = 0; i < ls.nfree; i++)
        M *= os.dims[nb + i] = lhs.dims[ls.free[i]];
    for (int i = 0; i < rs.nfree; i++)
        N *= os.dims[nb + ls.nfree + i] = rhs.dims[rs.free[i]];
    for (int i = 0; i < nc; i++)
        K *= lhs.dims[lc[i]];
    if (out_shape)
        *out_shape = os;
    size_t es = sk_dtype_size(t), oes = sk_dtype_size(ot);
    if (nbat * M * N == 0)
        return 0;
    int64_t ldc = ldo ? ldo : N;         /* the result's rows lie ldc apart (sk_dot_strided) */
    /* oneDNN's matmul adds into an f32 result (its sum post-op); the panels
     * do not (below). */
    int low_precision = t == SK_BF16 || t == SK_F16;
    if (ep->accumulate && t != SK_F32 && t != SK_F64 && !(low_precision && ep->f32_out))
        return accumulate_aside(ctx, t, ot, lhs, a, rhs, b, dd, out, nbat * M * N);
    if (K == 0) {   /* an empty sum: zeros, whose bits are 0 in every dtype (0 + bias is exact) */
        int64_t runs = ldc == N ? 1 : nbat * M, run = ldc == N ? nbat * M * N : N;   /* rows that touch: one run */
        for (int64_t i = 0; i < runs && !ep->accumulate; i++)
            memset((char *)out + i * ldc * (int64_t)oes, 0, (size_t)run * oes);
        for (int64_t bi = 0; bi < nbat; bi++)
            if (epilogue_after(ctx, ot, ep->bias, ep->act, (char *)out + bi * M * N * (int64_t)oes, M, N))
                return SC_ERR;
        return 0;
    }

    /* Views without copies: K in lhs order, else in rhs order. */
    int64_t lst[SC_MAX_RANK], rst[SC_MAX_RANK];
    sk_strides(lhs, lst);
    sk_strides(rhs, rst);
    for (int d = 0; d < lhs.rank && lst_in; d++)
        lst[d] = lst_in[d];
    for (int d = 0; d < rhs.rank && rst_in; d++)
        rst[d] = rst_in[d];
    int64_t lm = group_stride(ls.nfree, ls.free, lhs, lst);
    int64_t rn = group_stride(rs.nfree, rs.free, rhs, rst);
    int64_t lk = -1, rk = -1;
    for (int which = 0; which < 2 && (lk < 0 || rk < 0); which++) {
        sort_pairs(nc, lc, rc, which);
        lk = group_stride(nc, lc, lhs, lst);
        rk = group_stride(nc, rc, rhs, rst);
    }
    if (lk < 0 && rk < 0) {   /* both copied anyway */
    } else if (lk < 0 || rk < 0) {
        /* Neither order suits both: keep the lhs order, copy the rhs. */
        sort_pairs(nc, lc, rc, 0);
        lk = group_stride(nc, lc, lhs, lst);
        rk = group_stride(nc, rc, rhs, rst);
    }
    for (int i = 0; i < nc; i++)
        ls.contract[i] = lc[i], rs.contract[i] = rc[i];
    view va = {a, {0}, lm, lk}, vb = {b, {0}, rk, rn};
    for (int i = 0; i < nb; i++)
        va.bstride[i] = lst[ls.batch[i]], vb.bstride[i] = rst[rs.batch[i]];

    int on_panels = (t != SK_F32 && t != SK_F64 && !low_precision) || (low_precision && without_onednn());
    /* bf16/f16: the bias as floats, added to the accumulator. */
    float *fbias = low_precision && ep->bias ? malloc((size_t)N * sizeof(float)) : NULL;
    if (low_precision && ep->bias && !fbias)
        return SC_ERR;
    for (int64_t j = 0; fbias && j < N; j++)
        fbias[j] = sk_load_f(t, ep->bias, j);
    epilogue lep = {fbias, ep->act, ot};
    int status = SC_ERR;
    void *pa = NULL, *pb = NULL;
    sk_matmul *mm = NULL;
    if (on_panels)
        goto panels;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        goto done;
    enum CBLAS_TRANSPOSE ta, tb;
    int64_t lda, ldb;
    if (lm < 0 || lk < 0 || !blas_layout(M, K, lm, lk, &ta, &lda)) {
        if (!(pa = pack(es, lhs, a, lst, &ls, nc, 0, M, K, &va, NULL)))
            goto done;
        blas_layout(M, K, va.rs, va.cs, &ta, &lda);
    }
    if (rk < 0 || rn < 0 || !blas_layout(K, N, rk, rn, &tb, &ldb)) {
        if (!(pb = pack(es, rhs, b, rst, &rs, nc, 1, K, N, &vb, NULL)))
            goto done;
        blas_layout(K, N, vb.rs, vb.cs, &tb, &ldb);
    }
    if (lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        goto done;
    sk_gemm_shape g = {t, ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', M, N, K, lda, ldb,
                       fbias != NULL, ep->act, ot, ep->accumulate};
    if (low_precision && !(mm = sk_matmul_begin(&g, NULL, 0)))
        goto panels;
    status = 0;
    /* The batch odometer: one GEMM per batch index. */
    int64_t idx[SC_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t bi = 0; bi < nbat && !status; bi++) {
        if (mm)
            status = sk_matmul_run(mm, va.base + oa * (int64_t)es, vb.base + ob * (int64_t)es, fbias,
                               (char *)out + bi * M * N * (int64_t)oes);
        else if (t == SK_F32)
            status = gemm_f32(ctx, g.ta, g.tb, M, N, K, (const float *)(const void *)va.base + oa, lda,
                              (const float *)(const void *)vb.base + ob, ldb, beta, (float *)out + bi * M * ldc, ldc);
        else
            cblas_dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0,
                        (const double *)(const void *)va.base + oa, (int)lda,
                        (const double *)(const void *)vb.base + ob, (int)ldb, (double)beta,
                        (double *)out + bi * M * ldc, (int)ldc);
        if (!mm && !status)
            status = epilogue_after(ctx, t, ep->bias, ep->act, (char *)out + bi * M * N * (int64_t)es, M, N);
        for (int d = nb - 1; d >= 0; d--) {
            oa += va.bstride[d];
            ob += vb.bstride[d];
            if (++idx[d] < os.dims[d])
                break;
            oa -= va.bstride[d] * os.dims[d];
            ob -= vb.bstride[d] * os.dims[d];
            idx[d] = 0;
        }
    }
    goto done;
panels:                                /* no library for this dtype or layout on this CPU */
    status = ep->accumulate ? accumulate_aside(ctx, t, ot, lhs, a, rhs, b, dd, out, nbat * M * N)   /* no beta */
                            : panel_dot(ctx, t, nbat, M, N, K, a, b, &ls, &rs, lhs, rhs, nc, lep, out);
done:
    sk_matmul_end(mm);
    free(pa);
    free(pb);
    free(fbias);
    return status;
}

enum { BLOCK_K = 128, BLOCK_N = 512 };

/* c += x * y over n int32 elements, wrapping: restrict tells the compiler
 * the rows do not overlap, so it vectorizes the loop; eight lanes at a
 * time for -O2's cheap vectorizer. */
static void axpy_i(int64_t n, uint32_t x, const uint32_t *restrict y, uint32_t *restrict c) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++)
            c[j + l] += x * y[j + l];
    for (; j < n; j++)
        c[j] += x * y[j];
}

/* One batch index of the panels' product, for rows [lo, hi) of A and C. */
typedef struct {
    int64_t bi, M, N, K;
    const void *wa, *wb;
    float *acc;                  /* M x N: the f32 GEMM's sums, or int32 bits */
    epilogue ep;
    void *out;
} Panels;

/* i32: i-k-j, blocked over k and j so a panel of B stays in cache; the
 * inner j loop is a contiguous axpy the compiler vectorizes. */
static void int_rows(void *ctx, int64_t lo, int64_t hi) {
    const Panels *p = ctx;
    int64_t bi = p->bi, M = p->M, N = p->N, K = p->K;
    uint32_t *acc = (uint32_t *)(void *)p->acc;
    memset(acc + lo * N, 0, (size_t)((hi - lo) * N) * 4);
    for (int64_t k0 = 0; k0 < K; k0 += BLOCK_K) {
        int64_t k1 = k0 + BLOCK_K < K ? k0 + BLOCK_K : K;
        for (int64_t j0 = 0; j0 < N; j0 += BLOCK_N) {
            int64_t j1 = j0 + BLOCK_N < N ? j0 + BLOCK_N : N;
            for (int64_t i = lo; i < hi; i++)
                for (int64_t k = k0; k < k1; k++)
                    axpy_i(j1 - j0, ((const uint32_t *)p->wa)[(bi * M + i) * K + k],
                           (const uint32_t *)p->wb + (bi * K + k) * N + j0, acc + i * N + j0);
        }
    }
    memcpy((int32_t *)p->out + (bi * M + lo) * N, acc + lo * N, (size_t)((hi - lo) * N) * 4);
}

/* bf16/f16: the epilogue on the f32 sums of rows [lo, hi), rounded once
 * into the result, by the elementwise kernels (compiled per ISA and
 * vectorized, where an activation element by element here ran scalar). */
static void store_rows(void *ctx, int64_t lo, int64_t hi) {
    const Panels *p = ctx;
    int64_t N = p->N;
    float *rows = p->acc + lo * N;
    epilogue_after(ctx, SK_F32, p->ep.bias, p->ep.act, rows, hi - lo, N);
    sk_convert(ctx, SK_F32, p->ep.out, (hi - lo) * N, rows,
               (char *)p->out + (size_t)((p->bi * p->M + lo) * N) * sk_dtype_size(p->ep.out));
}

static int panel_dot(sk_ctx *ctx, sk_dtype t, int64_t nbat, int64_t M, int64_t N, int64_t K, const void *a,
                     const void *b, const side *ls, const side *rs, sc_shape lhs, sc_shape rhs,
                     int nc, epilogue ep, void *out) {
    /* One workspace block: the operands packed in their dtype, then (bf16,
     * f16) widened once to f32 (O(size) conversions, not O(M N K)), and the
     * sums.  Fresh pages for every call cost a fifth of a 1024^3 product.
     * i32 panels are multiplied as they are packed. */
    int is_int = t == SK_I32;
    size_t es = sk_dtype_size(t), an = (size_t)(nbat * M * K), bn = (size_t)(nbat * K * N), cn = (size_t)(M * N);
    size_t at[5] = {0}, bytes = 0;   /* offsets of na, nb, acc, wa, wb: 64-byte aligned */
    size_t len[5] = {an * es, bn * es, cn * 4, is_int ? 0 : an * 4, is_int ? 0 : bn * 4};
    for (int i = 0; i < 5; i++, bytes = (bytes + 63) / 64 * 64)
        at[i] = bytes, bytes += len[i];
    char *block = M > INT_MAX || N > INT_MAX || K > INT_MAX ? NULL : sk_dev_take(ctx, bytes);
    if (!block)
        return SC_ERR;
    float *acc = (float *)(void *)(block + at[2]);
    int64_t lst[SC_MAX_RANK], rst[SC_MAX_RANK];   /* row-major: sk_dot_strided packed the others */
    sk_strides(lhs, lst);
    sk_strides(rhs, rst);
    view pa, pb;
    void *wa = pack(es, lhs, a, lst, ls, nc, 0, M, K, &pa, block + at[0]);
    void *wb = pack(es, rhs, b, rst, rs, nc, 1, K, N, &pb, block + at[1]);
    int rc = SC_ERR;
    if (!is_int) {
        if (sk_convert(ctx, t, SK_F32, nbat * M * K, wa, block + at[3]) ||
            sk_convert(ctx, t, SK_F32, nbat * K * N, wb, block + at[4]))
            goto done;
        wa = block + at[3], wb = block + at[4];
    }
    /* Each batch index's rows split among the device's OpenMP threads, each
     * thread's accumulator rows from the start of a cache line (the int32
     * loop updates them K times). */
    int64_t grain, phase;
    sk_line_grain(acc, N * 4, &grain, &phase);
    for (int64_t bi = 0; bi < nbat; bi++) {
        Panels p = {bi, M, N, K, wa, wb, acc, ep, out};
        if (is_int) {
            sk_parallel_ranges_aligned(M, M * N * K, grain, phase, int_rows, &p);
            continue;
        }
        /* f32 sums kept as they are (a wide dot's) go straight into out. */
        int direct = ep.out == SK_F32 && !ep.bias && ep.act == SK_COPY;
        if (gemm_f32(ctx, 'N', 'N', M, N, K, (const float *)wa + bi * M * K, K, (const float *)wb + bi * K * N, N, 0.0f,
                     direct ? (float *)out + bi * M * N : acc, N))
            goto done;
        if (!direct)
            sk_parallel_ranges_aligned(M, M * N, grain, phase, store_rows, &p);
    }
    rc = 0;
done:
    sk_dev_give(ctx, block, bytes);
    return rc;
}

/* oneDNN runs on the OpenMP runtime the program links (libgomp with gcc's
 * -fopenmp), as the other kernels' loops do: the calling thread's setting. */
void sk_blas_threads(int n) {
    openblas_set_num_threads(n > 0 ? n : 1);
    sk_set_threads(n > 0 ? n : 1);
}

static const char *dnnl_isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse4.1";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

void sk_gemm_engine(char *buf, size_t len) {
    const dnnl_version_t *v = dnnl_version();
    char dnnl[96];
    snprintf(dnnl, sizeof dnnl, "oneDNN %d.%d.%d (%s kernels)", v->major, v->minor, v->patch,
             dnnl_isa_name(dnnl_get_effective_cpu_isa()));
    char *config = openblas_get_config(), *core = openblas_get_corename();
    const char *version = strncmp(config, "OpenBLAS ", 9) == 0 ? config + 9 : "?";
    char blas[96];
    snprintf(blas, sizeof blas, "OpenBLAS %.*s (%s kernels)", (int)strcspn(version, " "), version, core);
    /* bf16 and f16: what a 256^3 GEMM would run on. */
    char low[2][64];
    for (int i = 0; i < 2; i++) {
        sk_dtype t = i ? SK_F16 : SK_BF16;
        sk_gemm_shape g = {t, 'N', 'N', 256, 256, 256, 256, 256, 0, SK_COPY, t, 0};
        char impl[40];
        sk_matmul *mm = without_onednn() ? NULL : sk_matmul_begin(&g, impl, sizeof impl);
        if (mm)
            snprintf(low[i], sizeof low[i], "oneDNN matmul (%s)", impl);
        else
            snprintf(low[i], sizeof low[i], "widened to the f32 GEMM");
        sk_matmul_end(mm);
    }
    snprintf(buf, len, "CPU ISA %s; f32 GEMM: %s; f64 GEMM: %s; bf16 GEMM: %s; f16 GEMM: %s; i32: shardc's loop",
             sk_isa_name(sk_cpu_isa()), without_onednn() ? blas : dnnl, blas, low[0], low[1]);
}
