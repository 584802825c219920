/* sgemm.c: oneDNN's f32 GEMM, with the operands its no-copy kernels would
 * read at half speed copied first.
 *
 * Without AVX-512, oneDNN 2.x multiplies [M,K] x [K,N] with its no-copy
 * kernels when 1/M + 1/N >= 0.0038 (its gemm driver's first rule: a small
 * M or N, where packing would cost more than it saves).  Those kernels read
 * an operand stored K-major (the lhs transposed, the rhs as it is) one row
 * of K at a time down the rows, and when the rows lie a multiple of 1 KiB
 * apart (every power-of-two width from 256 floats up) they fall into the
 * same cache sets: [256,512] x [512,8192] ran at 36 GFLOP/s on one core of
 * an AVX2 EPYC, 90 with the rhs's rows a cache line longer; a weight
 * gradient's x^T dy ([512,4096] x [4096,512], both operands K-major) at 46,
 * 91 with both padded (docs/kernels.md).  So such an operand is copied, a
 * block of its columns at a time, into rows PAD elements longer, and the
 * GEMM runs block by block on the copies: the copy stays in cache for the
 * block's product, and the scratch is a block, not the operand.  A block of
 * 128 to 512 columns measured best (narrower ones slowed the kernel).
 * Below MIN_REUSE rows of the other side a copy costs more than it saves. */
#include "internal.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>

enum { PAD = 16, BAD_LD = 256, MIN_REUSE = 64, MIN_BLOCK = 128, MAX_BLOCK = 512 };

static int nocopy_kernels(int64_t M, int64_t N) {
    static const dnnl_cpu_isa_t avx512 = dnnl_cpu_isa_avx512_core;
    return (dnnl_get_effective_cpu_isa() & avx512) != avx512 && 1.0 / (double)M + 1.0 / (double)N >= 0.0038;
}

/* SHARDC_GEMM_PAD=never leaves every operand where it lies; =always copies
 * every K-major operand at a bad stride, on any CPU and at any size (the
 * tests reach the copies with it); unset, the rule above. */
static int pad_setting(void) {
    const char *e = getenv("SHARDC_GEMM_PAD");
    return !e ? 0 : strcmp(e, "always") == 0 ? 1 : strcmp(e, "never") == 0 ? -1 : 0;
}

/* Whether an operand at a bad stride is copied: with the setting, or where
 * the no-copy kernels read it and `reuse` rows of the other side pay for
 * its copy. */
static int needs_padding(int setting, int nocopy, int64_t reuse) {
    return setting > 0 || (nocopy && reuse >= MIN_REUSE);
}

/* Columns per block of a padded operand: about 1 MiB of scratch. */
static int64_t block_width(int64_t K, int64_t width) {
    int64_t w = ((1 << 18) / (K > 0 ? K : 1)) / PAD * PAD;
    w = w < MIN_BLOCK ? MIN_BLOCK : w > MAX_BLOCK ? MAX_BLOCK : w;
    return w < width ? w : width;
}

/* Columns [j, j + w) of K rows lying ld apart, into rows w + PAD apart. */
static const float *padded(float *dst, const float *src, int64_t ld, int64_t K, int64_t j, int64_t w) {
    for (int64_t r = 0; r < K; r++)
        memcpy(dst + r * (w + PAD), src + r * ld + j, (size_t)w * sizeof(float));
    return dst;
}

static int sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    return dnnl_sgemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc) == dnnl_success ? 0 : SC_ERR;
}

int sk_sgemm(sk_ctx *ctx, char ta, char tb, int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
             const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    /* Only an operand stored K-major with rows a multiple of BAD_LD apart
     * can need a copy; for the others nothing more is read or asked. */
    int a_bad = ta == 'T' && lda % BAD_LD == 0, b_bad = tb == 'N' && ldb % BAD_LD == 0;
    int setting = a_bad || b_bad ? pad_setting() : -1, nocopy = setting == 0 && nocopy_kernels(M, N);
    int pad_a = a_bad && needs_padding(setting, nocopy, N), pad_b = b_bad && needs_padding(setting, nocopy, M);
    if (!pad_a && !pad_b)
        return sgemm(ta, tb, M, N, K, a, lda, b, ldb, beta, c, ldc);
    /* Blocks of one operand's columns; the other, when padded too, is the
     * narrower (the no-copy region has one side under 530) and is copied
     * whole, once. */
    int64_t mb = M, nb = N;
    if (pad_a && (!pad_b || M > N))
        mb = block_width(K, M);
    else
        nb = block_width(K, N);
    size_t abytes = pad_a ? ((size_t)(K * (mb + PAD)) * sizeof(float) + 63) / 64 * 64 : 0;   /* b's block aligned */
    size_t bbytes = pad_b ? (size_t)(K * (nb + PAD)) * sizeof(float) : 0;
    float *scratch = sk_dev_take(ctx, abytes + bbytes);
    if (!scratch)
        return SC_ERR;
    float *bblock = scratch + abytes / sizeof(float);
    const float *bwhole = pad_b && nb == N ? padded(bblock, b, ldb, K, 0, N) : NULL;
    int status = 0;
    for (int64_t i = 0; i < M && !status; i += mb) {
        int64_t h = M - i < mb ? M - i : mb;
        const float *ai = pad_a ? padded(scratch, a, lda, K, i, h) : ta == 'N' ? a + i * lda : a + i;
        for (int64_t j = 0; j < N && !status; j += nb) {
            int64_t w = N - j < nb ? N - j : nb;
            const float *bj = bwhole ? bwhole : pad_b ? padded(bblock, b, ldb, K, j, w) : tb == 'N' ? b + j : b + j * ldb;
            status = sgemm(ta, tb, h, w, K, ai, pad_a ? h + PAD : lda, bj, pad_b ? w + PAD : ldb, beta,
                           c + i * ldc + j, ldc);
        }
    }
    sk_dev_give(ctx, scratch, abytes + bbytes);
    return status;
}
