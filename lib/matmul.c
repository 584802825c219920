/* matmul.c: bf16 and f16 GEMMs on oneDNN's matmul primitive.
 *
 * dnnl_sgemm is f32 only.  For bf16 and f16, oneDNN's matmul primitive
 * multiplies with the CPU's own instructions (AVX512-BF16's dot products,
 * AMX tiles, AVX512-FP16), accumulates in f32 and rounds once into the
 * result, at several times the f32 GEMM's rate.
 * A dot's epilogue (a bias along the rows, an activation) is folded into
 * the primitive: its bias argument and an eltwise post-op, applied to the
 * f32 accumulator in registers before the result is rounded and stored
 * (or stored as f32: an f32 destination, sk_epilogue's f32_out).
 *
 * Creating a primitive JIT-compiles its kernels (a millisecond or so), so
 * primitives live in one process-wide table keyed by dtype, shape and
 * layout, created on first use and never destroyed: a program has a few
 * dot shapes and runs them many times.  The table is bounded; a shape
 * past it gets a primitive for the one call.  Device threads run the same
 * primitive at once, so each execution brings its own scratchpad (oneDNN's
 * "user" scratchpad mode) and they share nothing mutable.
 *
 * Where oneDNN has only its reference kernels for a dtype (bf16 without
 * AVX-512, f16 without AVX512-FP16) the table says "no" and sk_dot widens
 * the operands to f32 for the f32 GEMM, which is faster than those. */
#include "internal.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { TABLE_SIZE = 1024 };   /* a power of two; entries used at most 3/4 */

typedef struct {
    int used;
    sk_gemm_shape key;
    dnnl_primitive_t prim;    /* NULL: oneDNN has no fast kernel for key */
    size_t scratch;           /* scratchpad bytes one execution needs */
    char impl[40];            /* oneDNN's name for the kernels */
} entry;

static struct {
    pthread_mutex_t lock;
    dnnl_engine_t engine;
    int engine_failed, count;
    entry slot[TABLE_SIZE];
} table = {.lock = PTHREAD_MUTEX_INITIALIZER};

static dnnl_data_type_t dnnl_type(sk_dtype t) {
    return t == SK_BF16 ? dnnl_bf16 : t == SK_F16 ? dnnl_f16 : dnnl_f32;
}

/* A rows x cols matrix read with ld as BLAS does: by rows, or by columns
 * when transposed. */
static void matrix_md(dnnl_memory_desc_t *md, sk_dtype t, int64_t rows, int64_t cols, char trans, int64_t ld) {
    dnnl_dims_t dims = {rows, cols}, strides = {ld, 1};
    if (trans == 'T')
        strides[0] = 1, strides[1] = ld;
    dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_type(t), strides);
}

static int same(const sk_gemm_shape *a, const sk_gemm_shape *b) {
    return a->t == b->t && a->ta == b->ta && a->tb == b->tb && a->M == b->M && a->N == b->N && a->K == b->K &&
           a->lda == b->lda && a->ldb == b->ldb && a->bias == b->bias && a->act == b->act && a->ct == b->ct &&
           a->accumulate == b->accumulate;
}

static uint64_t hash(const sk_gemm_shape *g) {
    const int64_t v[12] = {g->t, g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->bias, g->act, g->ct, g->accumulate};
    uint64_t h = 1469598103934665603u;
    for (int i = 0; i < 12; i++)
        h = (h ^ (uint64_t)v[i]) * 1099511628211u;
    return h;
}

/* g's operands: a, b, c, and the bias (N floats along the rows). */
enum { MD_A, MD_B, MD_C, MD_BIAS };
static void operand_mds(const sk_gemm_shape *g, dnnl_memory_desc_t md[4]) {
    matrix_md(&md[MD_A], g->t, g->M, g->K, g->ta, g->lda);
    matrix_md(&md[MD_B], g->t, g->K, g->N, g->tb, g->ldb);
    matrix_md(&md[MD_C], g->ct, g->M, g->N, 'N', g->N);
    dnnl_dims_t dims = {1, g->N};
    dnnl_memory_desc_init_by_tag(&md[MD_BIAS], 2, dims, dnnl_f32, dnnl_ab);
}

/* oneDNN's eltwise algorithm for an activation sk_dot_epilogue takes. */
static dnnl_alg_kind_t eltwise_of(sk_unary_op act) {
    switch (act) {
    case SK_GELU: return dnnl_eltwise_gelu_tanh;   /* the same function as shardc's gelu */
    case SK_RELU: return dnnl_eltwise_relu;        /* with alpha 0 */
    case SK_TANH: return dnnl_eltwise_tanh;
    default: return dnnl_eltwise_logistic;
    }
}

/* The attributes of g's primitive: a user scratchpad, and the activation
 * or the accumulation (a sum post-op: the f32 accumulator plus c's value,
 * rounded once) as a post-op; NULL if oneDNN refuses them. */
static dnnl_primitive_attr_t attributes(const sk_gemm_shape *g) {
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && (g->act != SK_COPY || g->accumulate))
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             (g->accumulate ? dnnl_post_ops_append_sum(po, 1.0f)
                            : dnnl_post_ops_append_eltwise(po, 1.0f, eltwise_of(g->act), 0.0f, 0.0f)) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po)
        dnnl_post_ops_destroy(po);
    if (!ok && attr) {
        dnnl_primitive_attr_destroy(attr);
        attr = NULL;
    }
    return attr;
}

/* A primitive for g, or NULL when oneDNN has only reference kernels for
 * it (or fails); e gets its scratchpad size and kernels' name.  Caller
 * holds the lock (the engine is created under it). */
static dnnl_primitive_t create(const sk_gemm_shape *g, entry *e) {
    if (!table.engine && !table.engine_failed && dnnl_engine_create(&table.engine, dnnl_cpu, 0) != dnnl_success)
        table.engine_failed = 1;
    if (!table.engine)
        return NULL;
    dnnl_memory_desc_t md[4];
    operand_mds(g, md);
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = attributes(g);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    const char *impl = "ref";
    const dnnl_memory_desc_t *bias = g->bias ? &md[MD_BIAS] : NULL;
    if (!attr || dnnl_matmul_desc_init(&desc, &md[MD_A], &md[MD_B], bias, &md[MD_C]) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &desc, attr, table.engine, NULL) != dnnl_success ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
        impl = "ref";
    /* "ref:any" and "gemm:ref" are oneDNN's scalar reference loops. */
    snprintf(e->impl, sizeof e->impl, "%s", impl);
    if (!strstr(impl, "ref")) {
        e->scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
        if (dnnl_primitive_create(&prim, pd) != dnnl_success)
            prim = NULL;
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return prim;
}

/* The entry for g, created on first use; when the table is full and g is
 * not in it, *own is filled for the call instead (prim NULL if oneDNN has
 * no fast kernels), and the caller destroys own->prim. */
static entry find(const sk_gemm_shape *g, entry *own) {
    pthread_mutex_lock(&table.lock);
    uint64_t i = hash(g) & (TABLE_SIZE - 1);
    while (table.slot[i].used && !same(&table.slot[i].key, g))
        i = (i + 1) & (TABLE_SIZE - 1);
    entry *e = &table.slot[i];
    if (!e->used && table.count < TABLE_SIZE / 4 * 3) {
        e->key = *g;
        e->prim = create(g, e);
        e->used = 1;
        table.count++;
    } else if (!e->used) {
        *own = (entry){.key = *g};
        own->prim = create(g, own);
        e = own;
    }
    entry found = *e;
    pthread_mutex_unlock(&table.lock);
    return found;
}

/* One dot's use of a primitive: its memory objects, stream and scratchpad,
 * made once and pointed at each batch index's matrices in turn. */
enum { SCRATCH = MD_BIAS + 1 };
struct sk_matmul {
    entry e, own;             /* own: a primitive for this dot alone (table full) */
    dnnl_memory_t mem[5];     /* MD_A .. MD_BIAS, then the scratchpad */
    dnnl_stream_t stream;
    void *pad;
};

sk_matmul *sk_matmul_begin(const sk_gemm_shape *g, char *impl, size_t len) {
    entry own = {0}, e = find(g, &own);
    if (impl)
        snprintf(impl, len, "%s", e.impl);
    sk_matmul *m = e.prim ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        if (own.prim)
            dnnl_primitive_destroy(own.prim);
        return NULL;
    }
    m->e = e;
    m->own = own;
    dnnl_memory_desc_t md[5];
    operand_mds(g, md);
    dnnl_dims_t sdims = {(int64_t)e.scratch};
    dnnl_memory_desc_init_by_tag(&md[SCRATCH], 1, sdims, dnnl_u8, dnnl_a);
    int ok = (m->pad = malloc(e.scratch ? e.scratch : 1)) != NULL &&
             dnnl_stream_create(&m->stream, table.engine, dnnl_stream_default_flags) == dnnl_success;
    for (int i = 0; i <= SCRATCH && ok; i++)
        if (i != MD_BIAS || g->bias)
            ok = dnnl_memory_create(&m->mem[i], &md[i], table.engine, i == SCRATCH ? m->pad : DNNL_MEMORY_NONE) ==
                 dnnl_success;
    if (!ok) {
        sk_matmul_end(m);
        return NULL;
    }
    return m;
}

int sk_matmul_run(sk_matmul *m, const void *a, const void *b, const float *bias, void *c) {
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m->mem[MD_A]}, {DNNL_ARG_WEIGHTS, m->mem[MD_B]},
                               {DNNL_ARG_DST, m->mem[MD_C]}, {DNNL_ARG_SCRATCHPAD, m->mem[SCRATCH]},
                               {DNNL_ARG_BIAS, m->mem[MD_BIAS]}};
    int nargs = m->mem[MD_BIAS] ? 5 : 4;
    return dnnl_memory_set_data_handle(m->mem[MD_A], (void *)a) == dnnl_success &&
                   dnnl_memory_set_data_handle(m->mem[MD_B], (void *)b) == dnnl_success &&
                   dnnl_memory_set_data_handle(m->mem[MD_C], c) == dnnl_success &&
                   (!m->mem[MD_BIAS] || dnnl_memory_set_data_handle(m->mem[MD_BIAS], (void *)bias) == dnnl_success) &&
                   dnnl_primitive_execute(m->e.prim, m->stream, nargs, args) == dnnl_success &&
                   dnnl_stream_wait(m->stream) == dnnl_success
               ? 0
               : SC_ERR;
}

void sk_matmul_end(sk_matmul *m) {
    if (!m)
        return;
    for (int i = 0; i < 5; i++)
        if (m->mem[i])
            dnnl_memory_destroy(m->mem[i]);
    if (m->stream)
        dnnl_stream_destroy(m->stream);
    if (m->own.prim)
        dnnl_primitive_destroy(m->own.prim);
    free(m->pad);
    free(m);
}
