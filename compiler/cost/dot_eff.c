/* A GEMM's efficiency by shape (docs/autoshard.md, "GEMM efficiency"): a
 * table of measured fractions of the peak on a grid of M, N and K values,
 * read trilinearly in log2 of each dim.  Log space, because a GEMM's
 * efficiency changes with the dims' orders of magnitude (a 64-wide panel
 * against a 4096-wide one), not their differences; a grid, because thin
 * products are thin in one dim at a time (M small and N large is not N
 * small and M large for a kernel's blocking), which a curve over the size
 * M*N*K alone would blur.  Outside the grid each dim is clamped to its
 * edge: below the smallest dims measured the per-call overhead dominates
 * anyway, above the largest a GEMM runs as the largest did.  A grid per
 * layout: a BLAS reads a transposed operand in another order (a weight
 * gradient's x^T dy, M = N = 512 and K = 4096, ran at 0.73 of x dy's
 * rate on an AVX2 EPYC). */
#include "cost.h"

#include <math.h>

const char *const dot_layout_name[DOT_LAYOUTS] = {"nn", "nt", "tn", "tt"};

/* Adds v to an axis's ascending values; returns its index or -1 when full. */
static int axis_add(double *at, int *n, double v) {
    int i = 0;
    while (i < *n && at[i] < v)
        i++;
    if (i < *n && at[i] == v)
        return i;
    if (*n == DOT_EFF_DIMS)
        return -1;
    for (int j = *n; j > i; j--)
        at[j] = at[j - 1];
    at[i] = v;
    (*n)++;
    return i;
}

static int axis_find(const double *at, int n, double v) {
    for (int i = 0; i < n; i++)
        if (at[i] == v)
            return i;
    return -1;
}

int dot_eff_build(DotEff *e, const char *layout, char *msg, size_t cap) {
    static const char *const axis[3] = {"M", "N", "K"};
    for (int a = 0; a < 3; a++) {
        e->n[a] = 0;
        for (int i = 0; i < e->nentries; i++)
            if (axis_add(e->at[a], &e->n[a], e->entry[i][a]) < 0) {
                snprintf(msg, cap, "dot_efficiency %s has more than %d values of %s", layout, DOT_EFF_DIMS, axis[a]);
                return -1;
            }
    }
    unsigned char given[DOT_EFF_DIMS][DOT_EFF_DIMS][DOT_EFF_DIMS] = {{{0}}};
    for (int i = 0; i < e->nentries; i++) {
        const double *x = e->entry[i];
        int a = axis_find(e->at[0], e->n[0], x[0]), b = axis_find(e->at[1], e->n[1], x[1]),
            c = axis_find(e->at[2], e->n[2], x[2]);
        given[a][b][c] = 1;
        e->eff[a][b][c] = x[3];
    }
    for (int a = 0; a < e->n[0]; a++)
        for (int b = 0; b < e->n[1]; b++)
            for (int c = 0; c < e->n[2]; c++)
                if (!given[a][b][c]) {
                    snprintf(msg, cap, "dot_efficiency %s has no entry for %.0f %.0f %.0f (its shapes must form a "
                             "grid: each M with each N and each K it names)", layout, e->at[0][a], e->at[1][b],
                             e->at[2][c]);
                    return -1;
                }
    return 0;
}

/* Where v falls on an axis: the lower grid index and the weight of the one
 * above it, in log2 of the dims, clamped to the axis's ends. */
static void locate(const double *at, int n, double v, int *lo, double *w) {
    *lo = 0;
    *w = 0;
    if (n == 1 || v <= at[0])
        return;
    if (v >= at[n - 1]) {
        *lo = n - 2;
        *w = 1;
        return;
    }
    while (v > at[*lo + 1])
        (*lo)++;
    *w = (log2(v) - log2(at[*lo])) / (log2(at[*lo + 1]) - log2(at[*lo]));
}

double dot_eff_at(const DotEff *e, double m, double n, double k) {
    if (!e->nentries)
        return 1;
    int lo[3];
    double w[3];
    const double v[3] = {m, n, k};
    for (int a = 0; a < 3; a++)
        locate(e->at[a], e->n[a], v[a], &lo[a], &w[a]);
    double sum = 0;
    for (int corner = 0; corner < 8; corner++) {    /* bit a set: the upper value on axis a */
        double weight = 1;
        int i[3];
        for (int a = 0; a < 3; a++) {
            int up = corner >> a & 1;
            if (up && e->n[a] == 1) {
                weight = 0;
                break;
            }
            i[a] = lo[a] + up;
            weight *= up ? w[a] : 1 - w[a];
        }
        if (weight > 0)
            sum += weight * e->eff[i[0]][i[1]][i[2]];
    }
    return sum;
}
