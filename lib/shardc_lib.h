/* shardc_lib.h: the local kernel library that shardc's generated per-device
 * programs call (libshardc_lib.a; link with -lshardc_rt -ldnnl -lopenblas
 * -lm, and -fopenmp).
 * See docs/kernels.md.
 *
 * Every kernel works on dense row-major tensors described by a dtype and an
 * sc_shape (runtime/shardc_rt.h), with the semantics of the IR op of the same
 * name in docs/ir.md.  bf16 and f16 are stored as uint16_t bit patterns and
 * computed in f32; bool is one byte, 0 or 1.  Output buffers never overlap
 * inputs, except that the elementwise kernels may run in place.
 *
 * Kernels that can fail return 0 or SC_ERR (an invalid argument: a dtype the
 * op does not take, a bad dim; or out of memory). */
#ifndef SHARDC_LIB_H
#define SHARDC_LIB_H

#include "shardc_elementwise.h"
#include "shardc_parallel.h"
#include "shardc_rng.h"
#include "shardc_rt.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime's dtypes. */
typedef enum {
    SK_F32 = SC_F32,
    SK_F64 = SC_F64,
    SK_BF16 = SC_BF16,
    SK_F16 = SC_F16,
    SK_I32 = SC_I32,
    SK_BOOL = SC_BOOL,
    SK_U32 = SC_U32,
    SK_I64 = SC_I64,
    SK_U8 = SC_U8,
    SK_DTYPE_COUNT = SC_DTYPE_COUNT
} sk_dtype;

/* A device's kernel context (device.c, below): every kernel takes it
 * first, where a stream would live; its scratch is device memory from it.
 * NULL is host memory with the thread's workspace. */
typedef struct sk_ctx sk_ctx;

size_t sk_dtype_size(sk_dtype t);
int64_t sk_elems(sc_shape s);

/* ---- contraction ----
 * lhs_batch[i] pairs with rhs_batch[i], lhs_contract[i] with
 * rhs_contract[i].  The result dims are HLO's: the batch dims (in the order
 * of the lists), then the lhs free dims, then the rhs free dims, each in
 * operand order.  f32 goes to oneDNN's sgemm (OpenBLAS's with
 * SHARDC_GEMM=openblas), f64 to OpenBLAS's dgemm, one call per batch index,
 * with batch dims and transposes expressed by strides; bf16/f16 accumulate
 * in f32 and round once; i32 wraps.  Result shape in *out_shape when
 * out_shape is not NULL. */
typedef struct {
    int nbatch, ncontract;
    int lhs_batch[SC_MAX_RANK], rhs_batch[SC_MAX_RANK];
    int lhs_contract[SC_MAX_RANK], rhs_contract[SC_MAX_RANK];
} sk_dot_dims;

int sk_dot(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, sc_shape rhs, const void *b,
           const sk_dot_dims *dims, void *out, sc_shape *out_shape);
/* How many operand elements the calling thread's sk_dot calls have copied
 * so far (layouts BLAS cannot read, and every bf16/f16/i32 dot). */
int64_t sk_dot_copied_elems(void);
/* The threads each GEMM may use: the calling thread's OpenMP setting
 * (sk_set_threads: oneDNN's, and the other kernels' loops) and OpenBLAS's,
 * which is the whole process's. */
void sk_blas_threads(int n);
/* One line naming the library, version and kernels that run each dtype's
 * GEMMs, as chosen on this machine. */
void sk_gemm_engine(char *buf, size_t len);

/* ---- generated loops ----
 * SK_INDEPENDENT before a loop whose iterations each read and write their
 * own elements (codegen's fusion guarantees it), which the compiler cannot
 * prove through the buffers' pointers: GCC's ivdep, so that -O2 adds no
 * run-time overlap checks when its cost model vectorizes the loop
 * (SK_SIMD, shardc_parallel.h, vectorizes it regardless).  SK_ISA_CLONES before a
 * function with such loops: GCC compiles it for x86-64-v4 (AVX-512),
 * x86-64-v3 (AVX2, FMA) and the baseline, and the loader picks by what the
 * CPU reports.  The versions compute the same bits (C11 mode contracts no
 * a * b + c into an fma, an fmaf is one rounding everywhere, and lanes do
 * what scalars do), except the row reductions of SK_SIMD_REDUCE loops
 * (shardc_parallel.h), whose partial results follow the vector width. */
#if defined(__GNUC__) && !defined(__clang__)
#define SK_INDEPENDENT _Pragma("GCC ivdep")
#else   /* clang vectorizes with run-time overlap checks, and warns when a loop it was told to vectorize is not */
#define SK_INDEPENDENT
#endif
/* Compiled for a chosen ISA past the baseline (-march=native in
 * $SHARDC_CFLAGS, say: __AVX2__), the code is that ISA's alone, once. */
#if SK_HAS_ISA_CLONES && !defined(__AVX2__)   /* shardc_elementwise.h */
#define SK_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SK_ISA_CLONES
#endif

/* ---- workspaces ----
 * A generated function takes one block for its buffers on entry and gives
 * it back on return, in stack order.  With a workspace bound to the calling
 * thread, the block is kept between calls (grown to the most ever needed);
 * without, each take is a malloc.  The driver binds one per device. */
typedef struct sk_workspace sk_workspace;
sk_workspace *sk_workspace_new(void);
void sk_workspace_free(sk_workspace *w);
void sk_workspace_bind(sk_workspace *w);   /* to the calling thread; NULL unbinds */
void *sk_workspace_take(size_t bytes);      /* 64-byte aligned; NULL when out of memory */
void sk_workspace_give(void *p, size_t bytes);

/* ---- device memory and the kernel context (lib/device.c) ----
 * A device's arrays live in its memory space, which the host reaches only
 * through these calls: a generated function takes its buffers with
 * sk_dev_take, runs each kernel (which takes the context, and its scratch
 * from it, the same way), fused loop and collective between
 * sk_launch_begin and sk_launch_end, and moves values between host and
 * device with sk_dev_read, sk_dev_write and sk_dev_copy (a loop's trip
 * count, a dynamic slice's offsets, constants, results, carries).  Work
 * launched may complete later: sk_dev_read waits for it.  The context is
 * the device's (sc_device_ctx); NULL is host memory with the thread's
 * workspace, as for a device run by hand.
 *
 *   host     the arrays are host memory: the calls are memcpy and the
 *            workspace, begin and end are nothing.
 *   guarded  a test fixture, the template of a device backend
 *            (docs/backends.md): the arrays are a region of their own,
 *            mapped PROT_NONE except between the begin and end of work on
 *            the device and inside these calls, so that any other access
 *            from the host faults. */
typedef enum { SK_MEM_HOST, SK_MEM_GUARDED } sk_mem_space;
/* SHARDC_DEVICE_MEMORY=host|guarded (unset: host); -1 with a message. */
int sk_mem_space_from_env(sk_mem_space *space, char *err, size_t errlen);
const char *sk_mem_space_name(sk_mem_space space);
sk_ctx *sk_ctx_new(sk_mem_space space);   /* NULL when out of memory */
void sk_ctx_free(sk_ctx *c);
void *sk_dev_take(sk_ctx *c, size_t bytes);          /* a function's block, in stack order */
void sk_dev_give(sk_ctx *c, void *p, size_t bytes);
void *sk_dev_alloc(sk_ctx *c, size_t bytes);         /* zeroed; kept until sk_dev_free */
void sk_dev_free(sk_ctx *c, void *p, size_t bytes);
int sk_dev_read(sk_ctx *c, void *host, const void *dev, size_t bytes);
int sk_dev_write(sk_ctx *c, void *dev, const void *host, size_t bytes);
int sk_dev_copy(sk_ctx *c, void *dst, const void *src, size_t bytes);
/* The most bytes of blocks taken (sk_dev_take) at once so far: the
 * functions' and the kernels' scratch (host: the thread's workspace's). */
size_t sk_dev_peak(const sk_ctx *c);
void sk_launch_begin(sk_ctx *c);
void sk_launch_end(sk_ctx *c);

/* ---- the machine ----
 * The instruction set, from CPUID and the OS's saved-state mask (XCR0),
 * never from the CPU's model name (lib/cpu.c).  Each level includes the
 * ones before it: AVX2 means AVX2 and FMA; AVX512 means F, DQ, BW and VL. */
typedef enum {
    SK_ISA_BASELINE,
    SK_ISA_SSE41,
    SK_ISA_AVX2,
    SK_ISA_AVX512,
    SK_ISA_AVX512_BF16,
    SK_ISA_AVX512_AMX
} sk_isa;
typedef struct {
    uint32_t leaf1_ecx, leaf7_ebx, leaf7_edx, leaf7_1_eax;
    uint64_t xcr0;
} sk_cpu_regs;
void sk_cpu_read(sk_cpu_regs *r);
sk_isa sk_isa_from_cpuid(const sk_cpu_regs *r);
sk_isa sk_cpu_isa(void);   /* sk_isa_from_cpuid of this CPU's registers */
const char *sk_isa_name(sk_isa isa);

/* ---- reduction ----
 * Combines the `ndims` listed dims (any order, distinct) with SC_SUM, SC_MAX
 * or SC_MIN; the result keeps the other dims in order.  Sums of f32, bf16 and
 * f16 accumulate in f32, of i32 wrap; max and min propagate NaN.  Bool takes
 * max (any) and min (all). */
int sk_reduce(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int ndims, const int *dims, sc_reduce op,
              void *out);
/* cumsum: the inclusive prefix sum along `dim` (not bool); accumulates as
 * sk_reduce's sums do (bf16 and f16 in f32, each prefix rounded; i32 wraps). */
int sk_cumsum(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int dim, void *out);
/* One contiguous f32 row's sum, max or min (lib/row_reduce.c): the row
 * reductions of generated row groups.  64 lanes in a fixed order, so that
 * every ISA gives the same bits; max and min give NaN when an element is
 * NaN.  sk_row_reduce_f32_isa runs the form for `isa` (tests compare them). */
float sk_row_sum_f32(const float *x, int64_t n);
float sk_row_max_f32(const float *x, int64_t n);
float sk_row_min_f32(const float *x, int64_t n);
float sk_row_reduce_f32_isa(sk_isa isa, sc_reduce op, const float *x, int64_t n);

/* ---- selection ----
 * top_k: out[R..., j] (i32, shape [..., k]) is the index along the last dim
 * of the operand's element of rank j in row R, largest first (largest = 1)
 * or smallest first (0); equal elements rank by index, lower first, and
 * NaN ranks above every number either way (jax.lax.top_k, jnp.argmax and
 * argmin: argmax is k = 1).  largest = SK_ASCENDING is numpy's sort order:
 * smallest first, NaN below every number (last), equal elements by index
 * (argsort is k = the last dim).  Numeric dtypes; 1 <= k <= the last dim. */
enum { SK_ASCENDING = 2 };
int sk_top_k(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int64_t k, int largest, int32_t *out);

/* ---- structure ----
 * transpose: result dim i is operand dim perm[i].
 * broadcast: operand dim i becomes result dim map[i] (same extent); the
 *   other result dims are new.
 * slice: [start[d], limit[d]) per dim, stride 1.
 * dynamic_slice: offsets (one per dim) are clamped into 0 .. extent - size.
 * dynamic_update_slice: out = x with upd written at the offsets, clamped into
 *   0 .. extent - upd extent; out may be x (then only upd's bytes move).
 * concat: n operands that agree off `dim`, joined along it.
 * roll: element i along `dim` moves to (i + shift) mod extent (any shift).
 * gather: result[I..., R...] = table[R with clamp(idx[I...]) inserted at dim],
 *   or with mode SK_FILL zeros where idx[I...] is outside the dim;
 *   with nbatch > 0, batch holds nbatch (table dim, index dim) pairs of equal
 *   extent: table dim batch[2j] is read at I's coordinate along index dim
 *   batch[2j + 1] (take_along_axis), and R skips the batch dims too.
 * scatter_add: out = x, then out[P with idx[j][I...] at dims[j] for each j]
 *   += updates[I..., P...] for every position I of the nidx index tensors
 *   (all of shape idx_shape), P running over x's other dims in order; a
 *   position outside x in any scattered dim is dropped (negative ones too).
 *   Duplicates add in position order.  Not bool; out may be x; x NULL is
 *   zeros (a scatter into zeros(...) writes them itself).
 * iota: each element is its index along `dim`. */
int sk_transpose(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, const int *perm, void *out);
int sk_broadcast(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, sc_shape out_shape, const int *map,
                 void *out);
int sk_slice(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, const int64_t *start, const int64_t *limit,
             void *out);
int sk_dynamic_slice(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, const int32_t *offsets,
                     const int64_t *sizes, void *out);
int sk_dynamic_update_slice(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, sc_shape upd, const void *u,
                            const int32_t *offsets, void *out);
int sk_concat(sk_ctx *ctx, sk_dtype t, int n, const sc_shape *in, const void *const *x, int dim, void *out);
int sk_roll(sk_ctx *ctx, sk_dtype t, sc_shape in, const void *x, int64_t shift, int dim, void *out);
typedef enum { SK_CLAMP, SK_FILL } sk_index_mode;
int sk_gather(sk_ctx *ctx, sk_dtype t, sc_shape table, const void *x, int dim, sk_index_mode mode, sc_shape idx_shape,
              const int32_t *idx, int nbatch, const int *batch, void *out);
int sk_scatter_add(sk_ctx *ctx, sk_dtype t, sc_shape x_shape, const void *x, int nidx, const int *dims,
                   sc_shape idx_shape, const int32_t *const *idx, const void *updates, void *out);
int sk_iota(sk_ctx *ctx, sk_dtype t, sc_shape s, int dim, void *out);
/* random (random.c, docs/language.md#random-numbers): out[i] = the draw of
 * `kind` (shardc_rng.h) with key[0..1] at counter[i] (the element's index
 * in the whole tensor, i32 or u32 bits), n elements of dtype t: the
 * Threefry words (u32; a split key is both), JAX's 32 random bits (u32),
 * uniform [0, 1), normal and truncated normal (floating point; lo and hi
 * point to the bounds, of dtype t), randint (i32; lo and hi point to minval
 * and maxval, i32).  lo and hi are NULL for the other kinds. */
int sk_random(sk_ctx *ctx, sk_rng_kind kind, sk_dtype t, const uint32_t *key, int64_t n, const uint32_t *counter,
              const void *lo, const void *hi, void *out);
/* attention (attention.c): for every batch index, out[s, :] = sum_t
 * softmax_t(scale * q[s, :] . k[t, :] + mask[s, t]) v[t, :], without the
 * [S, T] scores: query tiles walk key tiles with an online softmax.  q, k
 * and v are of dtype t (f32, bf16 or f16: widened, their products summed
 * in f32), out of out_t (rounded once); the mask and the softmax are f32.
 * The batch dims lie at each operand's own strides (elements); within a
 * batch index rows lie *_row apart, their elements contiguous.  mask, when
 * not NULL, is [S, T] with rows mask_row apart, the same for every batch
 * index.  causal >= 0 masks keys t > s + causal out (their exp is 0) and
 * skips the tiles past them; -1: none. */
typedef struct {
    int nbatch;
    int64_t batch[SC_MAX_RANK], q_batch[SC_MAX_RANK], k_batch[SC_MAX_RANK], v_batch[SC_MAX_RANK],
        out_batch[SC_MAX_RANK];
    int64_t S, T, K, Kv;                   /* queries, keys, q and k's dim, v's dim */
    sk_dtype t, out_t;
    const void *q, *k, *v;
    const float *mask;
    int64_t q_row, k_row, v_row, out_row, mask_row;
    float scale;
    int64_t causal;
    void *out;
} sk_attention_args;
int sk_attention(sk_ctx *ctx, const sk_attention_args *a);

/* The attention's gradient (attention.c): given dout, the cotangent of
 * sk_attention's result for fwd's operands (fwd.out and its fields are not
 * read), dq, dk and dv, each [S, K], [T, K] and [T, Kv] per batch index,
 * laid out as fwd lays out q, k and v (its own batch strides and row
 * stride, elements contiguous), of dtype grad_t; dout of dout_t.  The mask
 * gets no gradient.  With q, k and v of a narrow dtype the probabilities
 * and the scores' cotangent are rounded to it before their products, as
 * the unfused program's wide dots read them; the sums are f32.  No [S, T]
 * value: the scores are recomputed tile by tile. */
typedef struct {
    sk_attention_args fwd;
    const void *dout;
    sk_dtype dout_t, grad_t;
    int64_t dout_batch[SC_MAX_RANK], dq_batch[SC_MAX_RANK], dk_batch[SC_MAX_RANK], dv_batch[SC_MAX_RANK];
    int64_t dout_row, dq_row, dk_row, dv_row;
    void *dq, *dk, *dv;
} sk_attention_grad_args;
int sk_attention_grad(sk_ctx *ctx, const sk_attention_grad_args *g);

/* gather-dot: out[p, :] = x[p / rep, :] @ w[idx[p]] for p < rows, where
 * w holds e matrices [k, n] (trans: [n, k], contracted on their last dim)
 * and an index outside [0, e) is clamped (SK_CLAMP) or gives a zero row
 * (SK_FILL): a gather of w by idx then a dot, without the gathered
 * [rows, k, n] block.  One GEMM per matrix over its rows (gather_dot.c). */
int sk_gather_dot(sk_ctx *ctx, sk_dtype t, const void *w, int64_t e, int64_t k, int64_t n, int trans,
                  sk_index_mode mode, const int32_t *idx, int64_t rows, int64_t rep, const void *x, void *out);

/* ---- elementwise, over n elements ---- */
/* The ops and their formulas are the lines of shardc_elementwise.def:
 * SK_COPY, SK_NEGATE, SK_ABS, SK_SQUARE, SK_RELU (every dtype but bool; copy
 * bool too), SK_EXP, SK_LOG, SK_TANH, SK_SQRT, SK_RSQRT, SK_SIN, SK_COS,
 * SK_GELU, SK_LOGISTIC (floating point); SK_ADD, SK_SUB, SK_MUL, SK_DIV,
 * SK_REM, SK_MAX, SK_MIN (every dtype but bool), SK_POW (floating point). */
typedef enum {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi) SK_##ID,
#define SK_BINARY(ID, name, builtin, dtypes, f, fi)
#include "shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
    SK_UNARY_COUNT
} sk_unary_op;

typedef enum {
#define SK_UNARY(ID, name, builtin, dtypes, f, fi)
#define SK_BINARY(ID, name, builtin, dtypes, f, fi) SK_##ID,
#include "shardc_elementwise.def"
#undef SK_UNARY
#undef SK_BINARY
    SK_BINARY_COUNT
} sk_binary_op;

/* The order of the IR's `compare` directions. */
typedef enum { SK_LT, SK_LE, SK_GT, SK_GE, SK_EQ, SK_NE } sk_cmp;

/* Semantics as docs/ir.md's interpreter table: i32 arithmetic wraps, i32
 * divide/remainder are floor division and modulo (x / 0 = -1, x % 0 = x),
 * float remainder has the divisor's sign, max/min propagate NaN, gelu is the
 * tanh approximation. */
int sk_unary(sk_ctx *ctx, sk_unary_op op, sk_dtype t, int64_t n, const void *x, void *out);
int sk_binary(sk_ctx *ctx, sk_binary_op op, sk_dtype t, int64_t n, const void *a, const void *b, void *out);

/* ---- contraction with an epilogue ---- */
/* sk_dot, then an epilogue on its result, applied to the accumulator
 * before it is stored (HLO's output fusion; oneDNN's bias and post-op):
 * out = act(dot + bias[n]), bias NULL or N elements of dtype t (N: the
 * product of the rhs free dims, the result's trailing dims), act SK_COPY
 * (none), SK_GELU, SK_RELU, SK_TANH or SK_LOGISTIC.  Floating point only.
 * bf16/f16 add and activate in f32 and round once (the unfused
 * instructions round after each); f32 and f64 give the unfused bits.
 * accumulate (with no bias and SK_COPY): out = out + dot, in place, as
 * BLAS's beta = 1 for f32 and f64 (an accumulator that a loop of dots
 * adds to needs no second array), and for bf16 and f16 with f32_out on
 * oneDNN (its sum post-op); the rest add a product computed aside.
 * f32_out (bf16 and f16 operands, with no bias and SK_COPY): out is f32,
 * the f32 sums stored unrounded; a partitioned dot's partial sums,
 * reduced in f32 and rounded once after (docs/partitioning.md).  Either
 * way out + dot is rounded once, as the unfused dot and add round it. */
typedef struct {
    const void *bias;
    sk_unary_op act;
    int accumulate;
    int f32_out;
} sk_epilogue;
int sk_dot_epilogue(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, sc_shape rhs, const void *b,
                    const sk_dot_dims *dims, const sk_epilogue *ep, void *out, sc_shape *out_shape);
/* sk_dot_epilogue of operands that lie with the strides lst and rst (in
 * elements, one per dim; NULL: row-major) inside larger arrays: a column
 * block w[:, j : j + n] of a weight, read where it lies.  f32 and f64
 * give it to BLAS as it lies when one of a matrix's strides is 1; other
 * dtypes and layouts copy it first.  The result too may lie in a larger
 * array: ldo > 0 puts its rows (runs of N elements, N the product of the
 * rhs free dims) ldo elements apart, a column block of a matrix (0:
 * row-major); the elements between are left as they are.  f32 and f64
 * without bias or activation store there (BLAS's ldc); the rest compute
 * aside and copy in. */
int sk_dot_strided(sk_ctx *ctx, sk_dtype t, sc_shape lhs, const void *a, const int64_t *lst, sc_shape rhs,
                   const void *b, const int64_t *rst, const sk_dot_dims *dims, const sk_epilogue *ep, void *out,
                   int64_t ldo);
/* Float to i32 truncates toward zero, saturates, NaN gives 0; to bool is
 * x != 0. */
int sk_convert(sk_ctx *ctx, sk_dtype from, sk_dtype to, int64_t n, const void *x, void *out);
/* out[i] (bool) = a[i] DIR b[i]. */
int sk_compare(sk_ctx *ctx, sk_cmp dir, sk_dtype t, int64_t n, const void *a, const void *b, uint8_t *out);
/* out[i] = p[i] ? a[i] : b[i]. */
int sk_select(sk_ctx *ctx, sk_dtype t, int64_t n, const uint8_t *p, const void *a, const void *b, void *out);

#ifdef __cplusplus
}
#endif

#endif
