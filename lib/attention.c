/* attention.c: softmax(q k^T * scale + mask) v without the scores matrix.
 *
 * The unfused form computes each head's [S, T] scores, their row max, the
 * exponentials, the row sums and the probabilities, four passes over S x T
 * values held in memory (32 MiB a device for the attention sample's bench
 * size), between two short-K GEMMs.  Here each tile of TILE_Q query rows
 * walks the keys TILE_K at a time, FlashAttention's way: the tile's scores
 * come from one small GEMM into a buffer that stays in cache, each row keeps
 * its running max m, its running sum l of exp(score - m) and its running
 * product with v, and rescales the last two by exp(m_old - m_new) when the
 * max grows; the end divides by l.  Memory is O(TILE_Q x (TILE_K + Kv)),
 * whatever S and T.
 *
 * A causal bound masks keys t > s + offset (their exp is 0, as a fill of
 * -inf or -1e9 in a mask makes it) and skips every key tile past the query
 * tile's last row; a mask, if any, is added as well.  The sums are in f32, as the
 * unfused f32 program's; the order differs (online rescaling), so results
 * agree with it to f32 rounding, not bit for bit.
 *
 * The gradient (sk_attention_grad) walks the same tiles twice, as
 * FlashAttention-2's backward pass does, and holds no [S, T] value either:
 * the first pass is the forward one, which leaves each query row's
 * log-sum-exp and D = dout . out; the second walks key tiles, each over
 * the query tiles that see it, recomputes the probabilities p from the
 * scores and the log-sum-exp, and accumulates dv += p^T dout, dk += ds^T q
 * and dq += ds k with ds = p (dout v^T - D) scale.  That is the softmax's
 * gradient in the closed form compiler/grad's attention rule emits
 * (sum_t p dp = dout . out). */
#include "internal.h"

#include "shardc_elementwise.h"
#include "shardc_parallel.h"

#include <math.h>
#include <string.h>

enum { TILE_Q = 128, TILE_K = 128, WIDE_T = 512 };

/* One batch index's operands and the scratch of its query tiles: q's rows
 * of the tile, and all of k's and v's, copied to rows ld* apart. */
typedef struct {
    sk_ctx *ctx;
    const sk_attention_args *a;
    const char *q;
    char *out;
    size_t size, out_size;       /* bytes of an element of q, k, v and of out */
    float *scores, *acc, *m, *l, *qp, *kp, *vp;
    int64_t ldq, ldk, ldv;
} tile;

/* The operands' rows are copied into blocks of their own: a GEMM of a tile
 * runs at a third of its rate reading rows a multiple of 1 KiB apart (a
 * head of the samples' q[b, s, h, k] is 16 x 64 floats = 4 KiB), measured
 * on an AVX2 EPYC, 25 against 79 GFLOP/s for [64,64] x [64,128]^T; rows
 * of such a length get a padding. */
static int64_t padded(int64_t n) { return n % 256 == 0 ? n + 16 : n; }

static void pack_rows(sk_ctx *ctx, float *dst, int64_t ld, sk_dtype t, const char *src, int64_t src_row, int64_t rows,
                      int64_t cols) {
    size_t size = sk_dtype_size(t);
    for (int64_t r = 0; r < rows; r++)
        sk_convert(ctx, t, SK_F32, cols, src + (size_t)(r * src_row) * size, dst + r * ld);   /* bf16: widened */
}

/* Row i of a score tile, scaled, masked (keys from `in` on are out: the
 * causal bound) and its max; vectorized with one max per lane (no choice
 * inside the loops: AVX2 has no masked lanes for it). */
SK_ISA_CLONES static float scale_row(float *x, const float *mask, float scale, int64_t in, int64_t cols) {
    float peak = -INFINITY;
    if (mask) {
        SK_SIMD_REDUCE(reduction(max : peak))
        for (int64_t j = 0; j < in; j++) {
            float y = x[j] * scale + mask[j];
            x[j] = y;
            peak = y > peak ? y : peak;
        }
    } else {
        SK_SIMD_REDUCE(reduction(max : peak))
        for (int64_t j = 0; j < in; j++) {
            float y = x[j] * scale;
            x[j] = y;
            peak = y > peak ? y : peak;
        }
    }
    for (int64_t j = in; j < cols; j++)
        x[j] = -INFINITY;
    return peak;
}

/* x[j] = exp(x[j] - peak) and their sum.  The sum is a second loop: the
 * vectorized first calls sk_exp_f32's vector variant, around which an
 * accumulator would be stored and reloaded every time (docs/codegen.md,
 * "Row groups", the same split in generated loops). */
SK_ISA_CLONES static float exp_row(float *x, float peak, int64_t cols) {
    SK_SIMD
    for (int64_t j = 0; j < cols; j++)
        x[j] = sk_exp_f32(x[j] - peak);
    float sum = 0;
    SK_SIMD_REDUCE(reduction(+ : sum))
    for (int64_t j = 0; j < cols; j++)
        sum += x[j];
    return sum;
}

SK_ISA_CLONES static void scale_vec(float *x, float by, int64_t n) {
    SK_SIMD
    for (int64_t c = 0; c < n; c++)
        x[c] *= by;
}

/* The scores of keys [t0, t0 + cols) scaled and masked, folded into the
 * running max, sum and product with v. */
static int key_tile(const tile *w, int64_t s0, int64_t rows, int64_t t0, int64_t cols) {
    const sk_attention_args *a = w->a;
    if (sk_sgemm(w->ctx, 'N', 'T', rows, cols, a->K, w->qp, w->ldq, w->kp + t0 * w->ldk, w->ldk, 0.0f, w->scores,
                 TILE_K))
        return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        float *x = w->scores + i * TILE_K;
        /* Keys past the causal bound are out: the tile's first `in` may be
         * in (none, for a row before the tile; every row has key 0). */
        int64_t bound = s0 + i + a->causal - t0 + 1;
        int64_t in = a->causal < 0 || bound >= cols ? cols : bound < 0 ? 0 : bound;
        float peak = scale_row(x, a->mask ? a->mask + (s0 + i) * a->mask_row + t0 : NULL, a->scale, in, cols);
        peak = peak > w->m[i] ? peak : w->m[i];
        float sum = exp_row(x, peak, cols);
        /* exp(-inf - finite) is 0: the first tile rescales nothing; an
         * unchanged max rescales by 1, skipped. */
        if (peak != w->m[i]) {
            float corr = w->m[i] == -INFINITY ? 0.0f : sk_exp_f32(w->m[i] - peak);
            w->l[i] *= corr;
            scale_vec(w->acc + i * a->Kv, corr, a->Kv);
        }
        w->m[i] = peak;
        w->l[i] += sum;
    }
    return sk_sgemm(w->ctx, 'N', 'N', rows, a->Kv, cols, w->scores, TILE_K, w->vp + t0 * w->ldv, w->ldv, 1.0f, w->acc,
                    a->Kv);
}

static int query_tile(const tile *w, int64_t s0, int64_t rows) {
    const sk_attention_args *a = w->a;
    for (int64_t i = 0; i < rows; i++)
        w->m[i] = -INFINITY, w->l[i] = 0;
    memset(w->acc, 0, sizeof(float) * (size_t)(rows * a->Kv));
    pack_rows(w->ctx, w->qp, w->ldq, a->t, w->q + (size_t)(s0 * a->q_row) * w->size, a->q_row, rows, a->K);
    int64_t end = a->T;   /* keys past the causal bound of the tile's last row are skipped */
    if (a->causal >= 0 && s0 + rows + a->causal < end)
        end = s0 + rows + a->causal;
    for (int64_t t0 = 0; t0 < end; t0 += TILE_K)
        if (key_tile(w, s0, rows, t0, end - t0 < TILE_K ? end - t0 : TILE_K))
            return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        float *o = w->acc + i * a->Kv;
        scale_vec(o, 1.0f / w->l[i], a->Kv);
        sk_convert(w->ctx, SK_F32, a->out_t, a->Kv, o, w->out + (size_t)((s0 + i) * a->out_row) * w->out_size);
    }
    return 0;
}

static int float_type(sk_dtype t) { return t == SK_F32 || t == SK_BF16 || t == SK_F16; }

/* q, k, v, the mask and their shapes (the result's are the caller's). */
static int valid_operands(const sk_attention_args *a) {
    if (!a || !a->q || !a->k || !a->v || !float_type(a->t) || a->nbatch < 0 || a->nbatch > SC_MAX_RANK ||
        a->S < 0 || a->T < 1 || a->K < 1 || a->Kv < 1 || a->q_row < a->K || a->k_row < a->K || a->v_row < a->Kv ||
        (a->mask && a->mask_row < a->T) || a->causal < -1 || a->K > INT32_MAX || a->Kv > INT32_MAX ||
        a->q_row > INT32_MAX || a->k_row > INT32_MAX || a->v_row > INT32_MAX)
        return 0;
    for (int i = 0; i < a->nbatch; i++)
        if (a->batch[i] < 0)
            return 0;
    return 1;
}

static int valid(const sk_attention_args *a) {
    return valid_operands(a) && a->out && float_type(a->out_t) && a->out_row >= a->Kv;
}

int sk_attention(sk_ctx *ctx, const sk_attention_args *a) {
    if (!valid(a))
        return SC_ERR;
    int64_t nbat = 1;
    for (int i = 0; i < a->nbatch; i++)
        nbat *= a->batch[i];
    if (nbat == 0 || a->S == 0)
        return 0;
    tile w = {.ctx = ctx, .a = a, .size = sk_dtype_size(a->t), .out_size = sk_dtype_size(a->out_t), .ldq = padded(a->K),
              .ldk = padded(a->K), .ldv = padded(a->Kv)};
    size_t bytes = sizeof(float) * (size_t)(TILE_Q * (TILE_K + a->Kv + 2 + w.ldq) + a->T * (w.ldk + w.ldv));
    float *scratch = sk_dev_take(ctx, bytes);
    if (!scratch)
        return SC_ERR;
    w.scores = scratch;
    w.acc = w.scores + TILE_Q * TILE_K;
    w.m = w.acc + TILE_Q * a->Kv;
    w.l = w.m + TILE_Q;
    w.qp = w.l + TILE_Q;
    w.kp = w.qp + TILE_Q * w.ldq;
    w.vp = w.kp + a->T * w.ldk;
    int64_t idx[SC_MAX_RANK] = {0}, oq = 0, ok = 0, ov = 0, oo = 0;   /* the batch odometer */
    int status = 0;
    for (int64_t b = 0; b < nbat && !status; b++) {
        w.q = (const char *)a->q + (size_t)oq * w.size, w.out = (char *)a->out + (size_t)oo * w.out_size;
        pack_rows(ctx, w.kp, w.ldk, a->t, (const char *)a->k + (size_t)ok * w.size, a->k_row, a->T, a->K);
        pack_rows(ctx, w.vp, w.ldv, a->t, (const char *)a->v + (size_t)ov * w.size, a->v_row, a->T, a->Kv);
        for (int64_t s0 = 0; s0 < a->S && !status; s0 += TILE_Q)
            status = query_tile(&w, s0, a->S - s0 < TILE_Q ? a->S - s0 : TILE_Q);
        for (int d = a->nbatch - 1; d >= 0; d--) {
            oq += a->q_batch[d], ok += a->k_batch[d], ov += a->v_batch[d], oo += a->out_batch[d];
            if (++idx[d] < a->batch[d])
                break;
            oq -= a->q_batch[d] * a->batch[d], ok -= a->k_batch[d] * a->batch[d];
            ov -= a->v_batch[d] * a->batch[d], oo -= a->out_batch[d] * a->batch[d];
            idx[d] = 0;
        }
    }
    sk_dev_give(ctx, scratch, bytes);
    return status;
}

/* ---- the gradient ---- */

/* One batch index's gradient: every row of q and dout (qp, dop), k and v
 * (the forward tile's kp, vp) packed as f32; per query row its
 * log-sum-exp and D; dq's f32 sums; one key tile's dk and dv sums; the
 * probabilities p of a tile (pr: rounded to q's dtype, as the unfused
 * program's product with dout reads them) and dp, then ds, in place. */
typedef struct {
    const sk_attention_grad_args *g;
    tile f;
    float *qp, *dop, *lse, *delta, *dq, *dk, *dv, *p, *pr, *dp;
    int64_t lddo, ldp;           /* ldp: a row of p, pr and dp; TILE_K, or T when one pass holds every key */
} grad_tile;

/* x rounded to dtype t and widened again, in place (f32: unchanged). */
static void round_to(sk_ctx *ctx, sk_dtype t, float *x, int64_t n) {
    uint16_t narrow[TILE_K];
    if (t == SK_F32)
        return;
    for (int64_t j = 0; j < n; j += TILE_K) {
        int64_t m = n - j < TILE_K ? n - j : TILE_K;
        sk_convert(ctx, SK_F32, t, m, x + j, narrow);
        sk_convert(ctx, t, SK_F32, m, narrow, x + j);
    }
}

/* Row i of a score tile: p = exp(score * scale + mask - lse), 0 from key
 * `in` on (the causal bound). */
SK_ISA_CLONES static void prob_row(float *x, const float *mask, float scale, float lse, int64_t in, int64_t cols) {
    if (mask) {
        SK_SIMD
        for (int64_t j = 0; j < in; j++)
            x[j] = sk_exp_f32(x[j] * scale + mask[j] - lse);
    } else {
        SK_SIMD
        for (int64_t j = 0; j < in; j++)
            x[j] = sk_exp_f32(x[j] * scale - lse);
    }
    for (int64_t j = in; j < cols; j++)
        x[j] = 0;
}

/* dp[j] = p[j] (dp[j] - delta) scale: the scores' cotangent. */
SK_ISA_CLONES static void ds_row(float *dp, const float *p, float delta, float scale, int64_t cols) {
    SK_SIMD
    for (int64_t j = 0; j < cols; j++)
        dp[j] = p[j] * (dp[j] - delta) * scale;
}

SK_ISA_CLONES static float dot_row(const float *x, const float *y, int64_t n) {
    float sum = 0;
    SK_SIMD_REDUCE(reduction(+ : sum))
    for (int64_t c = 0; c < n; c++)
        sum += x[c] * y[c];
    return sum;
}

/* The first pass over the query tile at s0: the forward's running max,
 * sum and product with v, kept as each row's log-sum-exp and D. */
static int grad_stats(grad_tile *w, int64_t s0, int64_t rows) {
    const sk_attention_args *a = &w->g->fwd;
    tile f = w->f;
    f.qp = w->qp + s0 * f.ldq;
    for (int64_t i = 0; i < rows; i++)
        f.m[i] = -INFINITY, f.l[i] = 0;
    memset(f.acc, 0, sizeof(float) * (size_t)(rows * a->Kv));
    int64_t end = a->T;
    if (a->causal >= 0 && s0 + rows + a->causal < end)
        end = s0 + rows + a->causal;
    for (int64_t t0 = 0; t0 < end; t0 += TILE_K)
        if (key_tile(&f, s0, rows, t0, end - t0 < TILE_K ? end - t0 : TILE_K))
            return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        w->lse[s0 + i] = f.m[i] + logf(f.l[i]);
        w->delta[s0 + i] = dot_row(w->dop + (s0 + i) * w->lddo, f.acc + i * a->Kv, a->Kv) / f.l[i];
    }
    return 0;
}

/* Query tile s0 against key tile t0: p, dv, dp, ds, then dq and dk. */
static int grad_block(grad_tile *w, int64_t s0, int64_t rows, int64_t t0, int64_t cols) {
    const sk_attention_args *a = &w->g->fwd;
    const float *qp = w->qp + s0 * w->f.ldq, *dop = w->dop + s0 * w->lddo;
    const float *kp = w->f.kp + t0 * w->f.ldk, *vp = w->f.vp + t0 * w->f.ldv;
    if (sk_sgemm(w->f.ctx, 'N', 'T', rows, cols, a->K, qp, w->f.ldq, kp, w->f.ldk, 0.0f, w->p, w->ldp))
        return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        int64_t bound = s0 + i + a->causal - t0 + 1;
        int64_t in = a->causal < 0 || bound >= cols ? cols : bound < 0 ? 0 : bound;
        float *x = w->p + i * w->ldp;
        prob_row(x, a->mask ? a->mask + (s0 + i) * a->mask_row + t0 : NULL, a->scale, w->lse[s0 + i], in, cols);
        if (w->pr != w->p) {
            memcpy(w->pr + i * w->ldp, x, sizeof(float) * (size_t)cols);
            round_to(w->f.ctx, a->t, w->pr + i * w->ldp, cols);
        }
    }
    if (sk_sgemm(w->f.ctx, 'T', 'N', cols, a->Kv, rows, w->pr, w->ldp, dop, w->lddo, 1.0f, w->dv, a->Kv) ||
        sk_sgemm(w->f.ctx, 'N', 'T', rows, cols, a->Kv, dop, w->lddo, vp, w->f.ldv, 0.0f, w->dp, w->ldp))
        return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        ds_row(w->dp + i * w->ldp, w->p + i * w->ldp, w->delta[s0 + i], a->scale, cols);
        round_to(w->f.ctx, a->t, w->dp + i * w->ldp, cols);
    }
    if (sk_sgemm(w->f.ctx, 'N', 'N', rows, a->K, cols, w->dp, w->ldp, kp, w->f.ldk, 1.0f, w->dq + s0 * a->K, a->K) ||
        sk_sgemm(w->f.ctx, 'T', 'N', cols, a->K, rows, w->dp, w->ldp, qp, w->f.ldq, 1.0f, w->dk, a->K))
        return SC_ERR;
    return 0;
}

/* A query tile against every key at once, when one pass can hold them
 * (T <= WIDE_T): the rows' max and sum are exact there, so p, D = sum_t p
 * dp and ds come from the one pass, five GEMMs as the unfused program's
 * (the two-pass walk computes q k^T and the product with v once more). */
static int grad_rows(grad_tile *w, int64_t s0, int64_t rows) {
    const sk_attention_args *a = &w->g->fwd;
    const float *qp = w->qp + s0 * w->f.ldq, *dop = w->dop + s0 * w->lddo;
    int64_t end = a->T;   /* keys past the causal bound of the tile's last row are out */
    if (a->causal >= 0 && s0 + rows + a->causal < end)
        end = s0 + rows + a->causal;
    if (sk_sgemm(w->f.ctx, 'N', 'T', rows, end, a->K, qp, w->f.ldq, w->f.kp, w->f.ldk, 0.0f, w->p, w->ldp) ||
        sk_sgemm(w->f.ctx, 'N', 'T', rows, end, a->Kv, dop, w->lddo, w->f.vp, w->f.ldv, 0.0f, w->dp, w->ldp))
        return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        int64_t bound = s0 + i + a->causal + 1;
        int64_t in = a->causal < 0 || bound >= end ? end : bound;
        float *x = w->p + i * w->ldp, *d = w->dp + i * w->ldp;
        float peak = scale_row(x, a->mask ? a->mask + (s0 + i) * a->mask_row : NULL, a->scale, in, end);
        scale_vec(x, 1.0f / exp_row(x, peak, end), end);
        if (w->pr != w->p) {
            memcpy(w->pr + i * w->ldp, x, sizeof(float) * (size_t)end);
            round_to(w->f.ctx, a->t, w->pr + i * w->ldp, end);
        }
        ds_row(d, x, dot_row(x, d, end), a->scale, end);
        round_to(w->f.ctx, a->t, d, end);
    }
    return sk_sgemm(w->f.ctx, 'T', 'N', end, a->Kv, rows, w->pr, w->ldp, dop, w->lddo, 1.0f, w->dv, a->Kv) ||
                   sk_sgemm(w->f.ctx, 'N', 'N', rows, a->K, end, w->dp, w->ldp, w->f.kp, w->f.ldk, 0.0f,
                            w->dq + s0 * a->K, a->K) ||
                   sk_sgemm(w->f.ctx, 'T', 'N', end, a->K, rows, w->dp, w->ldp, qp, w->f.ldq, 1.0f, w->dk, a->K)
               ? SC_ERR
               : 0;
}

static void store_rows(sk_ctx *ctx, sk_dtype t, void *dst, int64_t row, const float *src, int64_t rows, int64_t cols) {
    size_t size = sk_dtype_size(t);
    for (int64_t r = 0; r < rows; r++)
        sk_convert(ctx, SK_F32, t, cols, src + r * cols, (char *)dst + (size_t)(r * row) * size);
}

/* The gradient of one batch index, its operands at the given offsets. */
static int grad_one(grad_tile *w, const int64_t *off) {
    const sk_attention_grad_args *g = w->g;
    const sk_attention_args *a = &g->fwd;
    size_t size = sk_dtype_size(a->t), dsize = sk_dtype_size(g->dout_t), gsize = sk_dtype_size(g->grad_t);
    pack_rows(w->f.ctx, w->qp, w->f.ldq, a->t, (const char *)a->q + (size_t)off[0] * size, a->q_row, a->S, a->K);
    pack_rows(w->f.ctx, w->f.kp, w->f.ldk, a->t, (const char *)a->k + (size_t)off[1] * size, a->k_row, a->T, a->K);
    pack_rows(w->f.ctx, w->f.vp, w->f.ldv, a->t, (const char *)a->v + (size_t)off[2] * size, a->v_row, a->T, a->Kv);
    pack_rows(w->f.ctx, w->dop, w->lddo, g->dout_t, (const char *)g->dout + (size_t)off[3] * dsize, g->dout_row, a->S,
              a->Kv);
    if (w->ldp != TILE_K) {              /* every key in one pass */
        memset(w->dk, 0, sizeof(float) * (size_t)(a->T * a->K));
        memset(w->dv, 0, sizeof(float) * (size_t)(a->T * a->Kv));
        for (int64_t s0 = 0; s0 < a->S; s0 += TILE_Q)
            if (grad_rows(w, s0, a->S - s0 < TILE_Q ? a->S - s0 : TILE_Q))
                return SC_ERR;
        store_rows(w->f.ctx, g->grad_t, (char *)g->dk + (size_t)off[5] * gsize, g->dk_row, w->dk, a->T, a->K);
        store_rows(w->f.ctx, g->grad_t, (char *)g->dv + (size_t)off[6] * gsize, g->dv_row, w->dv, a->T, a->Kv);
        store_rows(w->f.ctx, g->grad_t, (char *)g->dq + (size_t)off[4] * gsize, g->dq_row, w->dq, a->S, a->K);
        return 0;
    }
    for (int64_t s0 = 0; s0 < a->S; s0 += TILE_Q)
        if (grad_stats(w, s0, a->S - s0 < TILE_Q ? a->S - s0 : TILE_Q))
            return SC_ERR;
    memset(w->dq, 0, sizeof(float) * (size_t)(a->S * a->K));
    for (int64_t t0 = 0; t0 < a->T; t0 += TILE_K) {
        int64_t cols = a->T - t0 < TILE_K ? a->T - t0 : TILE_K;
        memset(w->dk, 0, sizeof(float) * (size_t)(cols * a->K));
        memset(w->dv, 0, sizeof(float) * (size_t)(cols * a->Kv));
        /* Causal: queries s < t0 - causal see none of the tile's keys. */
        int64_t first = a->causal >= 0 && t0 - a->causal > 0 ? (t0 - a->causal) / TILE_Q * TILE_Q : 0;
        for (int64_t s0 = first; s0 < a->S; s0 += TILE_Q)
            if (grad_block(w, s0, a->S - s0 < TILE_Q ? a->S - s0 : TILE_Q, t0, cols))
                return SC_ERR;
        store_rows(w->f.ctx, g->grad_t, (char *)g->dk + (size_t)(off[5] + t0 * g->dk_row) * gsize, g->dk_row, w->dk,
                   cols, a->K);
        store_rows(w->f.ctx, g->grad_t, (char *)g->dv + (size_t)(off[6] + t0 * g->dv_row) * gsize, g->dv_row, w->dv,
                   cols, a->Kv);
    }
    store_rows(w->f.ctx, g->grad_t, (char *)g->dq + (size_t)off[4] * gsize, g->dq_row, w->dq, a->S, a->K);
    return 0;
}

static int grad_valid(const sk_attention_grad_args *g) {
    return g && valid_operands(&g->fwd) && g->dout && g->dq && g->dk && g->dv && float_type(g->dout_t) &&
           float_type(g->grad_t) && g->dout_row >= g->fwd.Kv && g->dq_row >= g->fwd.K && g->dk_row >= g->fwd.K &&
           g->dv_row >= g->fwd.Kv && g->dout_row <= INT32_MAX;
}

int sk_attention_grad(sk_ctx *ctx, const sk_attention_grad_args *g) {
    if (!grad_valid(g))
        return SC_ERR;
    const sk_attention_args *a = &g->fwd;
    int64_t nbat = 1;
    for (int i = 0; i < a->nbatch; i++)
        nbat *= a->batch[i];
    if (nbat == 0)
        return 0;
    grad_tile w = {.g = g, .f = {.ctx = ctx, .a = a, .ldq = padded(a->K), .ldk = padded(a->K), .ldv = padded(a->Kv)},
                   .lddo = padded(a->Kv)};
    int pr = a->t != SK_F32;
    int64_t acc_rows = a->T <= WIDE_T ? a->T : TILE_K;   /* dk and dv's sums: every key's, or a tile's */
    w.ldp = a->T <= WIDE_T ? padded(a->T) : TILE_K;
    size_t floats = (size_t)(TILE_Q * (TILE_K + a->Kv + 2) + a->T * (w.f.ldk + w.f.ldv) +
                             a->S * (w.f.ldq + w.lddo + 2 + a->K) + acc_rows * (a->K + a->Kv) +
                             TILE_Q * w.ldp * (2 + pr));
    float *scratch = sk_dev_take(ctx, sizeof(float) * floats), *x = scratch;
    if (!scratch)
        return SC_ERR;
    w.f.scores = x, x += TILE_Q * TILE_K;
    w.f.acc = x, x += TILE_Q * a->Kv;
    w.f.m = x, x += TILE_Q;
    w.f.l = x, x += TILE_Q;
    w.f.kp = x, x += a->T * w.f.ldk;
    w.f.vp = x, x += a->T * w.f.ldv;
    w.qp = x, x += a->S * w.f.ldq;
    w.dop = x, x += a->S * w.lddo;
    w.lse = x, x += a->S;
    w.delta = x, x += a->S;
    w.dq = x, x += a->S * a->K;
    w.dk = x, x += acc_rows * a->K;
    w.dv = x, x += acc_rows * a->Kv;
    w.p = x, x += TILE_Q * w.ldp;
    w.dp = x, x += TILE_Q * w.ldp;
    w.pr = pr ? x : w.p;
    /* The batch odometer over the seven operands' offsets. */
    const int64_t *stride[7] = {a->q_batch, a->k_batch, a->v_batch, g->dout_batch, g->dq_batch, g->dk_batch,
                                g->dv_batch};
    int64_t idx[SC_MAX_RANK] = {0}, off[7] = {0};
    int status = 0;
    for (int64_t b = 0; b < nbat && !status; b++) {
        status = grad_one(&w, off);
        for (int d = a->nbatch - 1; d >= 0; d--) {
            for (int o = 0; o < 7; o++)
                off[o] += stride[o][d];
            if (++idx[d] < a->batch[d])
                break;
            for (int o = 0; o < 7; o++)
                off[o] -= stride[o][d] * a->batch[d];
            idx[d] = 0;
        }
    }
    sk_dev_give(ctx, scratch, sizeof(float) * floats);
    return status;
}
