/* shardc_parallel.h: OpenMP threads inside a device (docs/kernels.md,
 * "Threads inside a device").  shardc_lib.h includes it.
 *
 * A device that has several cores to itself (fewer devices than cores: one
 * MPI process of one device per node, or 2 devices on 16 cores) runs its
 * long loops, the fused elementwise loops of generated code and the kernel
 * library's, on OpenMP threads: sk_main (lib/host/driver.c) gives each device
 * thread its share of the cores with sk_set_threads, and a loop of at least
 * SK_PARALLEL_MIN elements is split among that many threads.  Only
 * independent outputs are split (a reduction's sum keeps its order), so the
 * results are the one thread's bit for bit.
 *
 * Programs and the library are compiled with -fopenmp (gcc: libgomp; clang:
 * LLVM's libomp).  Without it, SK_PARALLEL_FOR is the plain loop and
 * everything runs on the calling thread. */
#ifndef SHARDC_PARALLEL_H
#define SHARDC_PARALLEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Loops of fewer elements run on the calling thread: a parallel region
 * costs microseconds (docs/kernels.md has the measurements). */
#define SK_PARALLEL_MIN 32768

/* Whether a loop of n elements runs on the calling thread's OpenMP threads:
 * n >= SK_PARALLEL_MIN, the thread is not in a parallel region already, and
 * its OpenMP settings (omp_get_max_threads) give it more than one thread.
 * Each yes counts as a parallel loop of the thread (sk_parallel_stats). */
int sk_parallel(int64_t n);

/* The OpenMP threads that the calling thread's parallel loops use (its
 * nthreads ICV: omp_set_num_threads); nothing for n < 1, or when the library
 * was built without OpenMP.  sk_main calls it on every device's thread. */
void sk_set_threads(int n);
/* What the calling thread's parallel loops would use: omp_get_max_threads(),
 * or 1 without OpenMP. */
int sk_threads(void);

/* What ran on several threads, counted per calling thread (a device's
 * thread): parallel loops of generated code (sk_parallel), parallel kernel
 * calls of the library, and the largest team either had. */
typedef struct {
    int64_t loops, kernels;
    int team;
} sk_parallel_stats;
sk_parallel_stats sk_parallel_stats_get(void);

/* SK_PARALLEL_FOR(n, for (...) {...}); a loop over n independent elements
 * (generated code's fused loops): on the calling thread's OpenMP threads
 * when sk_parallel(n) says so (omp parallel for simd: each thread's part
 * vectorized too), else the same loop as written, after SK_SIMD.  A
 * parallel region, even one that runs on one thread, costs a microsecond
 * or more in libgomp, so the one-thread path enters none; the loop's
 * source is written once and compiled twice.
 * SK_PARALLEL_ROWS(n, for (row ...) {...}); the same for the row loop of a
 * nested one, whose inner loop has its own SK_SIMD: rows are split
 * among the threads.  Each element is computed as on one thread, so the
 * results are the same bits. */
#ifdef _OPENMP
#define SK_PRAGMA_(x) _Pragma(#x)
#if defined(__clang__)   /* simd: clang warns when it cannot vectorize a loop it was told to */
#define SK_OMP_FOR_ SK_PRAGMA_(omp parallel for schedule(static))
#else
#define SK_OMP_FOR_ SK_PRAGMA_(omp parallel for simd schedule(static))
#endif
/* The loop on the calling thread's team when cond holds, else as written. */
#define SK_PARALLEL_IF_(cond, ...)                                \
    do {                                                          \
        if (cond) {                                               \
            SK_PRAGMA_(omp parallel for schedule(static))         \
            __VA_ARGS__                                           \
        } else {                                                  \
            __VA_ARGS__                                           \
        }                                                         \
    } while (0)
#define SK_PARALLEL_FOR(n, ...)                                   \
    do {                                                          \
        if (sk_parallel(n)) {                                     \
            SK_OMP_FOR_                                           \
            __VA_ARGS__                                           \
        } else {                                                  \
            SK_SIMD                                               \
            __VA_ARGS__                                           \
        }                                                         \
    } while (0)
#else
#define SK_PARALLEL_IF_(cond, ...) \
    do {                           \
        __VA_ARGS__                \
    } while (0)
#define SK_PARALLEL_FOR(n, ...) \
    do {                        \
        SK_INDEPENDENT          \
        __VA_ARGS__             \
    } while (0)
#endif
#define SK_PARALLEL_ROWS(n, ...) SK_PARALLEL_IF_(sk_parallel(n), __VA_ARGS__)

/* SK_SIMD_REDUCE(reduction(+ : s) ...) before the inner loop of a row that
 * accumulates row reductions (codegen's row groups): GCC vectorizes it
 * with one partial result per vector lane, combined at the end, so the
 * result depends on the vector width (the ISA the CPU runs), never on the
 * thread count.  Without OpenMP, or under clang (which warns when it
 * cannot vectorize a loop it was told to), a plain loop in order. */
#if defined(_OPENMP) && defined(__GNUC__) && !defined(__clang__)
#define SK_SIMD_REDUCE(clauses) SK_PRAGMA_(omp simd clauses)
#else
#define SK_SIMD_REDUCE(clauses) SK_INDEPENDENT
#endif
/* SK_SIMD before a loop of independent iterations (generated code's fused
 * loops, the kernels' loops of any trip count): vectorized, always.  At -O2
 * GCC vectorizes a plain loop (SK_INDEPENDENT) only when its very cheap
 * cost model agrees: never for a trip count that is not a multiple of the
 * vector width (every variable one), and not always otherwise: it left
 * the GPT bf16 step's gelu gradient (an exp and a bf16 operand over 262144
 * elements) scalar, and the step 16% slower. */
#define SK_SIMD SK_SIMD_REDUCE()

#ifdef __cplusplus
}
#endif

#endif
