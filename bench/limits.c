/* bench/limits.c: the machine's limits, which `make bench` divides every
 * figure by.
 *
 * - FMA peak: f32 fused multiply-adds per second on independent chains,
 *   with the widest vectors the ISA found by CPUID has (lib/cpu.c), on one
 *   core and on every core (one thread per core, all at once).  Enough
 *   chains to cover the FMA latency on every core of today (16 x 4-cycle
 *   latency x 2 pipes at most).
 * - bf16 peak: the same for bf16 products summed in f32, on the unit
 *   oneDNN's bf16 GEMMs use: AMX tiles (TDPBF16PS, four accumulator tiles)
 *   where the CPU has them and Linux grants them, else AVX512-BF16's
 *   VDPBF16PS chains; `bf16_unit none` where the CPU has neither (bf16
 *   dots are widened to the f32 GEMM there, docs/kernels.md).
 * - STREAM triad, a[i] = b[i] + s * c[i] over doubles, 24 bytes per element,
 *   on every core, arrays far larger than any cache.
 * - libm rate: f32 tanhf calls per second on one core, over a 16 MiB
 *   array: what an elementwise op that calls <math.h> costs per element
 *   (the cost model's libm_rate, docs/autoshard.md).
 *
 * Prints one `name value` line per figure; bench/report.py reads them. */
#define _DEFAULT_SOURCE   /* syscall */
#include "shardc_lib.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { CHAINS = 16, RUNS = 5 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Each returns a value that depends on every chain, so nothing is dropped;
 * the chains converge (x -> 0.9999999 x + 1e-7), staying normal. */
#define FMA_LOOP(vec, set1, fmadd, add, lanes_out)                          \
    vec acc[CHAINS], m = set1(0.9999999f), c = set1(1e-7f);                \
    for (int j = 0; j < CHAINS; j++)                                        \
        acc[j] = set1(1.0f + (float)j);                                     \
    for (long i = 0; i < n; i++)                                            \
        _Pragma("GCC unroll 16") for (int j = 0; j < CHAINS; j++)           \
            acc[j] = fmadd(acc[j], m, c);                                   \
    for (int j = 1; j < CHAINS; j++)                                        \
        acc[0] = add(acc[0], acc[j]);                                       \
    float out[lanes_out];                                                   \
    memcpy(out, &acc[0], sizeof out);                                       \
    return out[0];

__attribute__((target("avx512f"))) static float chains_avx512(long n) {
    FMA_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 16)
}

__attribute__((target("avx2,fma"))) static float chains_avx2(long n) {
    FMA_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, 8)
}

/* No FMA below AVX2: a multiply and an add, counted as one FMA's 2 flops. */
static inline __m128 mul_add(__m128 a, __m128 b, __m128 c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
static float chains_sse(long n) {
    FMA_LOOP(__m128, _mm_set1_ps, mul_add, _mm_add_ps, 4)
}

/* bf16: VDPBF16PS, 16 f32 lanes each summing two products: 64 flops. */
__attribute__((target("avx512f,avx512bf16"))) static float chains_dpbf16(long n) {
    __m512 acc[CHAINS];
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
    __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    for (int j = 0; j < CHAINS; j++)
        acc[j] = _mm512_set1_ps((float)j);
    for (long i = 0; i < n; i++)
        _Pragma("GCC unroll 16") for (int j = 0; j < CHAINS; j++)
            acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
    for (int j = 1; j < CHAINS; j++)
        acc[0] = _mm512_add_ps(acc[0], acc[j]);
    float out[16];
    memcpy(out, &acc[0], sizeof out);
    return out[0];
}

/* AMX: TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one into a
 * 16 x 16 f32 tile, 16384 flops; four accumulators from two A and two B
 * tiles, as a GEMM's inner kernel keeps them.  The tile configuration is
 * per thread. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

__attribute__((target("amx-tile,amx-bf16"))) static float chains_amx(long n) {
    tile_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++)
        cfg.colsb[t] = 64, cfg.rows[t] = 16;
    uint16_t data[16 * 32];
    for (int i = 0; i < 16 * 32; i++)
        data[i] = 0x3a83;   /* bf16 1e-3 */
    float out[16 * 16];
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, data, 64);
    _tile_loadd(5, data, 64);
    _tile_loadd(6, data, 64);
    _tile_loadd(7, data, 64);
    for (long i = 0; i < n; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}

/* Linux lends AMX's tile state to a process that asks for it. */
static int amx_granted(void) {
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* What every job starts with: the barrier its threads start at, and the
 * seconds its thread took. */
typedef struct {
    pthread_barrier_t *start;
    double seconds;
} timing;

/* Runs fn on `threads` threads at once, thread t on the job at jobs + t *
 * size (which starts with a timing); the slowest thread's seconds. */
static double slowest(int threads, void *(*fn)(void *), char *jobs, size_t size) {
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    pthread_barrier_t start;
    if (!tid)
        exit(1);
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        ((timing *)(void *)(jobs + (size_t)t * size))->start = &start;
        pthread_create(&tid[t], NULL, fn, jobs + (size_t)t * size);
    }
    double worst = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        double s = ((timing *)(void *)(jobs + (size_t)t * size))->seconds;
        worst = s > worst ? s : worst;
    }
    pthread_barrier_destroy(&start);
    free(tid);
    return worst;
}

/* A peak's loop: its flops per iteration. */
typedef struct {
    float (*chains)(long n);
    double flops;
} unit;

static unit fma_unit(sk_isa isa) {
    return isa >= SK_ISA_AVX512 ? (unit){chains_avx512, 2.0 * CHAINS * 16}
         : isa == SK_ISA_AVX2  ? (unit){chains_avx2, 2.0 * CHAINS * 8}
                               : (unit){chains_sse, 2.0 * CHAINS * 4};
}

typedef struct {
    timing time;
    unit u;
    long n;
    float sink;
} peak_job;

static void *peak_thread(void *arg) {
    peak_job *j = arg;
    pthread_barrier_wait(j->time.start);
    double t0 = now_s();
    j->sink = j->u.chains(j->n);
    j->time.seconds = now_s() - t0;
    return NULL;
}

/* GFLOP/s of `threads` threads running the unit's loop at once: the total
 * work over the slowest thread's time, best of RUNS. */
static double peak(unit u, int threads) {
    long n = (long)(4e9 / u.flops);   /* 0.1 s a run at 40 GFLOP/s, 4 ms at 1 TFLOP/s */
    peak_job *jobs = calloc((size_t)threads, sizeof *jobs);
    double best = 0;
    if (!jobs)
        exit(1);
    for (int r = 0; r < RUNS + 1; r++) {
        for (int t = 0; t < threads; t++)
            jobs[t] = (peak_job){{NULL, 0}, u, n, 0};
        double gflops = u.flops * (double)n * threads /
                        slowest(threads, peak_thread, (char *)jobs, sizeof *jobs) * 1e-9;
        if (r > 0 && gflops > best)   /* run 0 warms up (clocks, vector units) */
            best = gflops;
    }
    free(jobs);
    return best;
}

typedef struct {
    timing time;
    double *a, *b, *c;
    long lo, hi;
} triad_job;

static void *triad_thread(void *arg) {
    triad_job *j = arg;
    for (long i = j->lo; i < j->hi; i++)   /* first touch on this thread's core */
        j->a[i] = 0, j->b[i] = 1, j->c[i] = 2;
    pthread_barrier_wait(j->time.start);
    double t0 = now_s();
    double *restrict a = j->a, *restrict b = j->b, *restrict c = j->c;
    for (long i = j->lo; i < j->hi; i++)
        a[i] = b[i] + 3.0 * c[i];
    j->time.seconds = now_s() - t0;
    return NULL;
}

/* GB/s of the triad on `threads` threads, best of RUNS. */
static double stream_triad(int threads) {
    long n = 1L << 24;   /* 128 MiB per array */
    double *a = malloc((size_t)n * 8), *b = malloc((size_t)n * 8), *c = malloc((size_t)n * 8);
    triad_job *jobs = calloc((size_t)threads, sizeof *jobs);
    double best = 0;
    if (!a || !b || !c || !jobs)
        exit(1);
    for (int r = 0; r < RUNS + 1; r++) {
        for (int t = 0; t < threads; t++)
            jobs[t] = (triad_job){{NULL, 0}, a, b, c, n * t / threads, n * (t + 1) / threads};
        double gbs = 24.0 * (double)n / slowest(threads, triad_thread, (char *)jobs, sizeof *jobs) * 1e-9;
        if (r > 0 && gbs > best)
            best = gbs;
    }
    free(a), free(b), free(c), free(jobs);
    return best;
}

static double libm_rate(void) {
    long n = 1L << 22;
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    if (!a || !b)
        exit(1);
    for (long i = 0; i < n; i++)
        a[i] = (float)(i % 1000) * 0.003f - 1.5f;
    double best = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_s();
        for (long i = 0; i < n; i++)
            b[i] = tanhf(a[i]);
        double rate = (double)n / (now_s() - t0);
        best = rate > best ? rate : best;
    }
    volatile float keep = b[n / 2];   /* the loop's results are used */
    (void)keep;
    free(a), free(b);
    return best;
}

int main(void) {
    sk_isa isa = sk_cpu_isa();
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char engine[512];
    sk_gemm_engine(engine, sizeof engine);
    printf("isa %s\n", sk_isa_name(isa));
    printf("cores %d\n", cores);
    printf("kernels %s\n", engine);
    printf("fma_peak_1 %.1f\n", peak(fma_unit(isa), 1));
    printf("fma_peak_all %.1f\n", peak(fma_unit(isa), cores));
    unit bf16 = {NULL, 0};
    const char *bf16_name = "none";
    if (isa >= SK_ISA_AVX512_AMX && amx_granted())
        bf16 = (unit){chains_amx, 4 * 16384.0}, bf16_name = "amx";
    else if (isa >= SK_ISA_AVX512_BF16)
        bf16 = (unit){chains_dpbf16, 64.0 * CHAINS}, bf16_name = "avx512_bf16";
    printf("bf16_unit %s\n", bf16_name);
    if (bf16.chains) {
        printf("bf16_peak_1 %.1f\n", peak(bf16, 1));
        printf("bf16_peak_all %.1f\n", peak(bf16, cores));
    }
    printf("stream_triad_all %.2f\n", stream_triad(cores));
    printf("libm_rate_1 %.4g\n", libm_rate());
    return 0;
}
