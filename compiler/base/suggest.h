/* "Did you mean" for a misspelled name: the candidate nearest to a word by
 * edit distance (insertions, deletions, substitutions and transpositions of
 * adjacent characters, each costing 1), when it is near enough to be the
 * likely intent.  Header-only, so that both shardc (compiler/driver) and
 * the main() of generated programs (lib/host/driver.c, which does not link the
 * compiler) use the same rule. */
#ifndef SHARDC_SUGGEST_H
#define SHARDC_SUGGEST_H

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *word;
    const char *best;            /* NULL until a near candidate is seen */
    int best_len, best_dist;
} Suggest;

enum { SUGGEST_MAX_LEN = 63 };   /* longer names are not compared */

static inline Suggest suggest_begin(const char *word) { return (Suggest){word, NULL, 0, 0}; }

/* Optimal string alignment distance between a[0..n) and b[0..m). */
static inline int suggest_distance(const char *a, int n, const char *b, int m) {
    int d[SUGGEST_MAX_LEN + 2][SUGGEST_MAX_LEN + 2];
    for (int i = 0; i <= n; i++)
        d[i][0] = i;
    for (int j = 0; j <= m; j++)
        d[0][j] = j;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1], best = d[i - 1][j - 1] + cost;
            best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
            best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* Consider the candidate c[0..len) (len < 0: NUL-terminated; NULL: none).  The first of
 * equally near candidates wins, so suggestions follow the caller's order. */
static inline void suggest_add(Suggest *s, const char *c, int len) {
    if (!c)
        return;
    int n = (int)strlen(s->word), m = len < 0 ? (int)strlen(c) : len;
    if (n > SUGGEST_MAX_LEN || m > SUGGEST_MAX_LEN || (n == m && memcmp(s->word, c, (size_t)n) == 0))
        return;
    /* A third of the word's letters may be wrong (at least one): 'rnu' is
     * 'run', 'mpl' is 'mlp', but 'x' is not 'stage'. */
    int limit = n / 3 > 1 ? n / 3 : 1, dist = suggest_distance(s->word, n, c, m);
    if (dist <= limit && (!s->best || dist < s->best_dist)) {
        s->best = c;
        s->best_len = m;
        s->best_dist = dist;
    }
}

/* "; did you mean 'X'?" into buf (empty when no candidate was near), to
 * append to the message that names the unknown word. */
static inline const char *suggest_text(const Suggest *s, char *buf, size_t cap) {
    if (s->best)
        snprintf(buf, cap, "; did you mean '%.*s'?", s->best_len, s->best);
    else if (cap)
        buf[0] = '\0';
    return buf;
}

#endif
