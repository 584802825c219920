/* parallel.c: OpenMP threads inside a device (shardc_parallel.h): when a
 * loop goes to a team, the per-thread counts behind sk_parallel_stats, and
 * the split of a kernel's work into one contiguous range per thread. */
#include "internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static _Thread_local sk_parallel_stats stats;

sk_parallel_stats sk_parallel_stats_get(void) { return stats; }

/* The threads a loop of n elements gets: 1 (the calling thread, no
 * parallel region) or the calling thread's OpenMP threads. */
static int team_for(int64_t n) {
#ifdef _OPENMP
    if (n < SK_PARALLEL_MIN || omp_in_parallel())
        return 1;
    return omp_get_max_threads();
#else
    (void)n;
    return 1;
#endif
}

static void note(int64_t *count, int team) {
    ++*count;
    if (team > stats.team)
        stats.team = team;
}

int sk_parallel(int64_t n) {
    int k = team_for(n);
    if (k > 1)
        note(&stats.loops, k);
    return k > 1;
}

int sk_parallel_kernel(int64_t n) {
    int k = team_for(n);
    if (k > 1)
        note(&stats.kernels, k);
    return k > 1;
}

void sk_set_threads(int n) {
#ifdef _OPENMP
    if (n > 0)
        omp_set_num_threads(n);
#else
    (void)n;
#endif
}

int sk_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Range t of nt: n * t / nt moved to the nearest index that is phase
 * modulo grain (0 and n stay). */
static int64_t boundary(int64_t n, int t, int nt, int64_t grain, int64_t phase) {
    if (t == 0 || t == nt)
        return t == 0 ? 0 : n;
    int64_t b = n * t / nt;
    if (grain > 1) {
        int64_t k = b - phase + grain / 2;
        k = k >= 0 ? k / grain : -((-k + grain - 1) / grain);
        b = phase + k * grain;
    }
    return b < 0 ? 0 : b > n ? n : b;
}

#ifdef _OPENMP
/* The team, in a function of its own: clang asks the OpenMP runtime for the
 * thread's id at the entry of a function whose parallel region has a
 * num_threads clause, and that call alone starts the runtime for the thread
 * (which TSan, not seeing inside the runtime, takes for races).  Calls that
 * stay on one thread never get here. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int run_team(int k, int64_t n, int64_t grain, int64_t phase,
                    void (*body)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    int team = 0;
#pragma omp parallel num_threads(k)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (t == 0)
            team = nt;
        int64_t lo = boundary(n, t, nt, grain, phase), hi = boundary(n, t + 1, nt, grain, phase);
        if (lo < hi)
            body(ctx, lo, hi);
    }
    return team;
}
#endif

void sk_parallel_ranges_aligned(int64_t n, int64_t work, int64_t grain, int64_t phase,
                                void (*body)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    int k = n > 1 ? team_for(work) : 1;
    if (k < 2) {
        if (n > 0)
            body(ctx, 0, n);
        return;
    }
#ifdef _OPENMP
    int team = run_team(k < n ? k : (int)n, n, grain > 0 ? grain : 1, phase, body, ctx);
    if (team > 1)
        note(&stats.kernels, team);
#else
    (void)grain;
    (void)phase;
#endif
}

void sk_line_grain(const void *base, int64_t step, int64_t *grain, int64_t *phase) {
    int64_t g = 1, p = 0;
    while (step > 0 && g < 64 && (g * step) % 64 != 0)
        g *= 2;
    while (p < g && ((uintptr_t)base + (uintptr_t)(p * step)) % 64 != 0)
        p++;
    *grain = g;
    *phase = p < g ? p : 0;
}

void sk_parallel_ranges(int64_t n, int64_t work, void (*body)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
    sk_parallel_ranges_aligned(n, work, 1, 0, body, ctx);
}
