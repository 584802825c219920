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

#include <math.h>
#include <string.h>

enum { TILE_Q = 64, TILE_K = 128 };

/* One batch index's operands and the scratch of its query tiles. */
typedef struct {
    const sk_attention_args *a;
    const float *q, *k, *v;
    float *out, *scores, *acc, *m, *l;
} tile;

/* The scores of keys [t0, t0 + cols) scaled and masked, folded into the
 * running max, sum and product with v. */
static int key_tile(const tile *w, int64_t s0, int64_t rows, int64_t t0, int64_t cols) {
    const sk_attention_args *a = w->a;
    if (sk_sgemm('N', 'T', rows, cols, a->K, w->q + s0 * a->q_row, a->q_row, w->k + t0 * a->k_row, a->k_row,
                 0.0f, w->scores, TILE_K))
        return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        float *x = w->scores + i * TILE_K, peak = w->m[i];
        const float *mask = a->mask ? a->mask + (s0 + i) * a->mask_row + t0 : NULL;
        /* Keys past the causal bound are out (the tile's first ones may be in). */
        int64_t in = a->causal < 0 || s0 + i + a->causal - t0 >= cols ? cols : s0 + i + a->causal - t0 + 1;
        for (int64_t j = 0; j < cols; j++) {
            x[j] = mask ? x[j] * a->scale + mask[j] : x[j] * a->scale;
            x[j] = j < in ? x[j] : -INFINITY;
            peak = x[j] > peak ? x[j] : peak;
        }
        /* exp(-inf - finite) is 0: the first tile rescales nothing. */
        float corr = w->m[i] == -INFINITY ? 0.0f : sk_exp_f32(w->m[i] - peak), sum = 0;
        for (int64_t j = 0; j < cols; j++)
            x[j] -= peak;
        if (sk_unary(SK_EXP, SK_F32, cols, x, x))   /* the elementwise kernel's vectorized exp */
            return SC_ERR;
        for (int64_t j = 0; j < cols; j++)
            sum += x[j];
        w->m[i] = peak;
        w->l[i] = w->l[i] * corr + sum;
        float *acc = w->acc + i * a->Kv;
        for (int64_t c = 0; c < a->Kv; c++)
            acc[c] *= corr;
    }
    return sk_sgemm('N', 'N', rows, a->Kv, cols, w->scores, TILE_K, w->v + t0 * a->v_row, a->v_row, 1.0f, w->acc,
                    a->Kv);
}

static int query_tile(const tile *w, int64_t s0, int64_t rows) {
    const sk_attention_args *a = w->a;
    for (int64_t i = 0; i < rows; i++)
        w->m[i] = -INFINITY, w->l[i] = 0;
    memset(w->acc, 0, sizeof(float) * (size_t)(rows * a->Kv));
    int64_t end = a->T;   /* keys past the causal bound of the tile's last row are skipped */
    if (a->causal >= 0 && s0 + rows + a->causal < end)
        end = s0 + rows + a->causal;
    for (int64_t t0 = 0; t0 < end; t0 += TILE_K)
        if (key_tile(w, s0, rows, t0, end - t0 < TILE_K ? end - t0 : TILE_K))
            return SC_ERR;
    for (int64_t i = 0; i < rows; i++) {
        float *o = w->out + (s0 + i) * a->out_row, inv = 1.0f / w->l[i];
        for (int64_t c = 0; c < a->Kv; c++)
            o[c] = w->acc[i * a->Kv + c] * inv;
    }
    return 0;
}

static int valid(const sk_attention_args *a) {
    if (!a || !a->q || !a->k || !a->v || !a->out || a->nbatch < 0 || a->nbatch > SC_MAX_RANK || a->S < 0 ||
        a->T < 1 || a->K < 1 || a->Kv < 1 || a->q_row < a->K || a->k_row < a->K || a->v_row < a->Kv ||
        a->out_row < a->Kv || (a->mask && a->mask_row < a->T) || a->causal < -1 ||
        a->K > INT32_MAX || a->Kv > INT32_MAX || a->q_row > INT32_MAX || a->k_row > INT32_MAX ||
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
    size_t bytes = sizeof(float) * (size_t)(TILE_Q * TILE_K + TILE_Q * a->Kv + 2 * TILE_Q);
    float *scratch = sk_workspace_take(bytes);
    if (!scratch)
        return SC_ERR;
    tile w = {a, NULL, NULL, NULL, NULL, scratch, scratch + TILE_Q * TILE_K, NULL, NULL};
    w.m = w.acc + TILE_Q * a->Kv;
    w.l = w.m + TILE_Q;
    int64_t idx[SC_MAX_RANK] = {0}, oq = 0, ok = 0, ov = 0, oo = 0;   /* the batch odometer */
    int status = 0;
    for (int64_t b = 0; b < nbat && !status; b++) {
        w.q = a->q + oq, w.k = a->k + ok, w.v = a->v + ov, w.out = a->out + oo;
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
