#include "toolchain.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append the blank-separated words of `words` to t->flags. */
static int add_words(Toolchain *t, size_t *used, const char *words) {
    for (const char *p = words; *p;) {
        p += strspn(p, " \t");
        size_t n = strcspn(p, " \t");
        if (!n)
            break;
        if (t->nflags == TOOLCHAIN_MAX_FLAGS || *used + n + 1 > sizeof t->text)
            return -1;
        char *w = t->text + *used;
        memcpy(w, p, n);
        w[n] = 0;
        *used += n + 1;
        t->flags[t->nflags++] = w;
        p += n;
    }
    t->flags[t->nflags] = NULL;
    return 0;
}

int toolchain_read(const char *libdir, Toolchain *t) {
    char path[PATH_MAX + 32], line[1024], openmp[512] = "-fopenmp", other[512] = "";
    snprintf(t->cc, sizeof t->cc, "cc");
    snprintf(path, sizeof path, "%s/shardc-toolchain", libdir);
    FILE *f = fopen(path, "r");
    int bad = 0;
    for (int ln = 1; f && fgets(line, sizeof line, f); ln++) {
        line[strcspn(line, "\n")] = 0;
        const char *v = strchr(line, '=');
        size_t k = v ? (size_t)(v - line) : 0;
        if (v && k == 2 && strncmp(line, "cc", 2) == 0 && v[1])
            snprintf(t->cc, sizeof t->cc, "%s", v + 1);
        else if (v && k == 6 && strncmp(line, "openmp", 6) == 0)
            snprintf(openmp, sizeof openmp, "%s", v + 1);
        else if (v && k == 5 && strncmp(line, "flags", 5) == 0)
            snprintf(other, sizeof other, "%s", v + 1);
        else if (line[0] && line[0] != '#' && !bad) {
            fprintf(stderr, "shardc: error: %s:%d: expected cc=, openmp= or flags=, not '%s'\n", path, ln, line);
            bad = 1;
        }
    }
    if (f)
        fclose(f);
    const char *cc = getenv("CC"), *omp = getenv("SHARDC_OPENMP"), *extra = getenv("SHARDC_CFLAGS");
    if (cc && *cc)
        snprintf(t->cc, sizeof t->cc, "%s", cc);
    size_t used = 0;
    t->nflags = 0;
    t->flags[0] = NULL;
    if (add_words(t, &used, omp ? omp : openmp) || add_words(t, &used, other) ||
        add_words(t, &used, extra ? extra : "")) {
        fprintf(stderr, "shardc: error: too many compiler flags in %s, $SHARDC_OPENMP or $SHARDC_CFLAGS\n", path);
        bad = 1;
    }
    return bad ? -1 : 0;
}
