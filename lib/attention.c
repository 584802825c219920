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
 * agree with it to f32 rounding, not bit for bit. */
#include "internal.h"

#include "shardc_elementwise.h"
#include "shardc_parallel.h"

#include <math.h>
#include <string.h>

enum { TILE_Q = 128, TILE_K = 128 };

/* One batch index's operands and the scratch of its query tiles: q's rows
 * of the tile, and all of k's and v's, copied to rows ld* apart. */
typedef struct {
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

static void pack_rows(float *dst, int64_t ld, sk_dtype t, const char *src, int64_t src_row, int64_t rows,
                      int64_t cols) {
    size_t size = sk_dtype_size(t);
    for (int64_t r = 0; r < rows; r++)
        sk_convert(t, SK_F32, cols, src + (size_t)(r * src_row) * size, dst + r * ld);   /* bf16: widened */
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

/* x[j] = exp(x[j] - peak) and their sum; the inline exp vectorizes. */
SK_ISA_CLONES static float exp_row(float *x, float peak, int64_t cols) {
    float sum = 0;
    SK_SIMD_REDUCE(reduction(+ : sum))
    for (int64_t j = 0; j < cols; j++) {
        float e = sk_exp_f32(x[j] - peak);
        x[j] = e;
        sum += e;
    }
    return sum;
}

SK_ISA_CLONES static void scale_vec(float *x, float by, int64_t n) {
    SK_INDEPENDENT
    for (int64_t c = 0; c < n; c++)
        x[c] *= by;
}

/* The scores of keys [t0, t0 + cols) scaled and masked, folded into the
 * running max, sum and product with v. */
static int key_tile(const tile *w, int64_t s0, int64_t rows, int64_t t0, int64_t cols) {
    const sk_attention_args *a = w->a;
    if (sk_sgemm('N', 'T', rows, cols, a->K, w->qp, w->ldq, w->kp + t0 * w->ldk, w->ldk, 0.0f, w->scores, TILE_K))
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
    return sk_sgemm('N', 'N', rows, a->Kv, cols, w->scores, TILE_K, w->vp + t0 * w->ldv, w->ldv, 1.0f, w->acc, a->Kv);
}

static int query_tile(const tile *w, int64_t s0, int64_t rows) {
    const sk_attention_args *a = w->a;
    for (int64_t i = 0; i < rows; i++)
        w->m[i] = -INFINITY, w->l[i] = 0;
    memset(w->acc, 0, sizeof(float) * (size_t)(rows * a->Kv));
    pack_rows(w->qp, w->ldq, a->t, w->q + (size_t)(s0 * a->q_row) * w->size, a->q_row, rows, a->K);
    int64_t end = a->T;   /* keys past the causal bound of the tile's last row are skipped */
    if (a->causal >= 0 && s0 + rows + a->causal < end)
        end = s0 + rows + a->causal;
    for (int64_t t0 = 0; t0 < end; t0 += TILE_K)
        if (key_tile(w, s0, rows, t0, end - t0 < TILE_K ? end - t0 : TILE_K))
            return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        float *o = w->acc + i * a->Kv;
        scale_vec(o, 1.0f / w->l[i], a->Kv);
        sk_convert(SK_F32, a->out_t, a->Kv, o, w->out + (size_t)((s0 + i) * a->out_row) * w->out_size);
    }
    return 0;
}

static int float_type(sk_dtype t) { return t == SK_F32 || t == SK_BF16 || t == SK_F16; }

static int valid(const sk_attention_args *a) {
    if (!a || !a->q || !a->k || !a->v || !a->out || !float_type(a->t) || !float_type(a->out_t) || a->nbatch < 0 ||
        a->nbatch > SC_MAX_RANK || a->S < 0 || a->T < 1 || a->K < 1 || a->Kv < 1 || a->q_row < a->K ||
        a->k_row < a->K || a->v_row < a->Kv || a->out_row < a->Kv || (a->mask && a->mask_row < a->T) ||
        a->causal < -1 || a->K > INT32_MAX || a->Kv > INT32_MAX || a->q_row > INT32_MAX || a->k_row > INT32_MAX ||
        a->v_row > INT32_MAX)
        return 0;
    for (int i = 0; i < a->nbatch; i++)
        if (a->batch[i] < 0)
            return 0;
    return 1;
}

int sk_attention(const sk_attention_args *a) {
    if (!valid(a))
        return SC_ERR;
    int64_t nbat = 1;
    for (int i = 0; i < a->nbatch; i++)
        nbat *= a->batch[i];
    if (nbat == 0 || a->S == 0)
        return 0;
    tile w = {.a = a, .size = sk_dtype_size(a->t), .out_size = sk_dtype_size(a->out_t), .ldq = padded(a->K),
              .ldk = padded(a->K), .ldv = padded(a->Kv)};
    size_t bytes = sizeof(float) * (size_t)(TILE_Q * (TILE_K + a->Kv + 2 + w.ldq) + a->T * (w.ldk + w.ldv));
    float *scratch = sk_workspace_take(bytes);
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
        pack_rows(w.kp, w.ldk, a->t, (const char *)a->k + (size_t)ok * w.size, a->k_row, a->T, a->K);
        pack_rows(w.vp, w.ldv, a->t, (const char *)a->v + (size_t)ov * w.size, a->v_row, a->T, a->Kv);
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
    sk_workspace_give(scratch, bytes);
    return status;
}
