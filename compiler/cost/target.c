/* Machine descriptions (docs/autoshard.md, "Target files"): one field a
 * line, `#` to the end of a line a comment.
 *   name NAME
 *   peak_flops DTYPE FLOP/S       (f32 required; other dtypes default to it)
 *   mem_bw BYTES/S
 *   mem_per_device BYTES
 *   link intra|inter|AXIS BYTES/S LATENCY_SECONDS   (intra required)
 *   node_devices N                (inter required with it)
 *   libm_rate ELEMENTS/S          (optional)
 *   dot_efficiency [nn|nt|tn|tt] M N K EFF
 *                                 (optional, a grid of them per layout: compiler/cost/dot_eff.c) */
#define _XOPEN_SOURCE 700   /* realpath */
#include "cost.h"
#include "suggest.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const field_name[] = {"name", "peak_flops", "mem_bw", "mem_per_device", "link", "node_devices",
                                         "libm_rate", "dot_efficiency"};
enum { F_NAME, F_PEAK, F_MEM_BW, F_MEM, F_LINK, F_NODE, F_LIBM, F_DOT_EFF, F_COUNT };

/* The built-in default: a modest one-socket CPU core per device.  Its
 * numbers are round guesses; `make bench` measures this machine's. */
static const char cpu_target[] =
    "name cpu\n"
    "peak_flops f32 5e10\n"
    "peak_flops f64 2.5e10\n"
    "mem_bw 1e10\n"
    "mem_per_device 8e9\n"
    "link intra 5e9 2e-6\n";

typedef struct {
    const char *file;
    int line;
    FILE *err;
} Reader;

static int fail(const Reader *r, const char *msg, const char *arg, const char *hint) {
    if (*arg)
        fprintf(r->err, "%s:%d: error: %s '%s'%s\n", r->file, r->line, msg, arg, hint ? hint : "");
    else
        fprintf(r->err, "%s:%d: error: %s\n", r->file, r->line, msg);
    return -1;
}

/* A finite number >= 0; returns 0 or -1 after an error naming it. */
static int number(const Reader *r, const char *tok, const char *field, double *x) {
    char *end;
    if (!tok) {
        char msg[64];
        snprintf(msg, sizeof msg, "%s needs a value", field);
        return fail(r, msg, "", NULL);
    }
    *x = strtod(tok, &end);
    if (end == tok || *end || !(*x >= 0) || *x > 1e30) {
        char msg[80];
        snprintf(msg, sizeof msg, "bad number for %s:", field);
        return fail(r, msg, tok, NULL);
    }
    return 0;
}

/* A field's one value, which must be positive ("mem_bw must be positive"). */
static int positive_value(const Reader *r, const char *tok, const char *field, double *x) {
    if (number(r, tok, field, x))
        return -1;
    if (!(*x > 0)) {
        char msg[80];
        snprintf(msg, sizeof msg, "%s must be positive", field);
        return fail(r, msg, "", NULL);
    }
    return 0;
}

/* The line's next value, positive. */
static int positive(const Reader *r, char **save, const char *field, double *x) {
    return positive_value(r, strtok_r(NULL, " \t", save), field, x);
}

static int unknown(const Reader *r, const char *what, const char *word, const char *const *names, int n) {
    Suggest sg = suggest_begin(word);
    for (int i = 0; i < n; i++)
        suggest_add(&sg, names[i], -1);
    char hint[128];
    return fail(r, what, word, suggest_text(&sg, hint, sizeof hint));
}

static int parse_dtype(const Reader *r, const char *tok) {
    for (int d = 0; tok && d < DT_COUNT; d++)
        if (strcmp(dtype_name[d], tok) == 0)
            return d;
    return tok ? unknown(r, "unknown dtype", tok, dtype_name, DT_COUNT) : fail(r, "peak_flops needs a dtype and a number", "", NULL);
}

static int parse_link(Target *t, const Reader *r, char **save) {
    const char *which = strtok_r(NULL, " \t", save);
    if (!which)
        return fail(r, "link needs intra, inter or an axis, a bandwidth and a latency", "", NULL);
    Link l;
    if (number(r, strtok_r(NULL, " \t", save), "link bandwidth", &l.bw) ||
        number(r, strtok_r(NULL, " \t", save), "link latency", &l.latency))
        return -1;
    if (!(l.bw > 0))
        return fail(r, "link bandwidth must be positive:", which, NULL);
    if (strcmp(which, "intra") == 0)
        t->intra = l;
    else if (strcmp(which, "inter") == 0)
        t->inter = l;
    else if (t->nlinks == TARGET_MAX_LINKS || strlen(which) >= TARGET_NAME_MAX)
        return fail(r, "too many links or too long an axis name:", which, NULL);
    else {
        snprintf(t->link_axis[t->nlinks], TARGET_NAME_MAX, "%s", which);
        t->link[t->nlinks++] = l;
    }
    return 0;
}

/* dot_efficiency [LAYOUT] M N K EFF: one shape of a layout's grid (dims
 * positive integers; no layout: nn). */
static int parse_dot_eff(Target *t, const Reader *r, char **save) {
    static const char *const what[4] = {"dot_efficiency M", "dot_efficiency N", "dot_efficiency K",
                                        "dot_efficiency EFF"};
    const char *tok = strtok_r(NULL, " \t", save);
    int layout = DOT_NN;
    if (tok && !isdigit((unsigned char)*tok) && *tok != '.') {
        while (layout < DOT_LAYOUTS && strcmp(dot_layout_name[layout], tok) != 0)
            layout++;
        if (layout == DOT_LAYOUTS)
            return unknown(r, "unknown dot_efficiency layout", tok, dot_layout_name, DOT_LAYOUTS);
        tok = strtok_r(NULL, " \t", save);
    }
    DotEff *e = &t->dot_eff[layout];
    if (e->nentries == DOT_EFF_MAX)
        return fail(r, "too many dot_efficiency lines for layout", dot_layout_name[layout], NULL);
    double *x = e->entry[e->nentries];
    for (int i = 0; i < 4; i++, tok = strtok_r(NULL, " \t", save))
        if (positive_value(r, tok, what[i], &x[i]))
            return -1;
    for (int i = 0; i < 3; i++)
        if (x[i] > 1e15 || x[i] != floor(x[i]))
            return fail(r, "dot_efficiency's M, N and K must be integers", "", NULL);
    for (int i = 0; i < e->nentries; i++)
        if (!memcmp(e->entry[i], x, 3 * sizeof *x))
            return fail(r, "dot_efficiency gives this shape twice", "", NULL);
    e->nentries++;
    return 0;
}

/* One line's field; seen[] records which were given. */
static int parse_line(Target *t, const Reader *r, char *line, int *seen) {
    char *save, *key = strtok_r(line, " \t", &save);
    if (!key)
        return 0;
    int f = 0;
    while (f < F_COUNT && strcmp(field_name[f], key) != 0)
        f++;
    if (f == F_COUNT)
        return unknown(r, "unknown field", key, field_name, F_COUNT);
    seen[f] = 1;
    double x;
    const char *tok;
    switch (f) {
    case F_NAME:
        if (!(tok = strtok_r(NULL, " \t", &save)) || strlen(tok) >= TARGET_NAME_MAX)
            return fail(r, "name needs a value of at most 63 characters:", tok ? tok : "", NULL);
        snprintf(t->name, sizeof t->name, "%s", tok);
        break;
    case F_PEAK: {
        int d = parse_dtype(r, strtok_r(NULL, " \t", &save));
        if (d < 0 || number(r, strtok_r(NULL, " \t", &save), "peak_flops", &x))
            return -1;
        if (!(x > 0))
            return fail(r, "peak_flops must be positive for", dtype_name[d], NULL);
        t->peak_flops[d] = x;
        break;
    }
    case F_MEM_BW:
        if (positive(r, &save, "mem_bw", &t->mem_bw))
            return -1;
        break;
    case F_MEM:
        if (number(r, strtok_r(NULL, " \t", &save), "mem_per_device", &x))
            return -1;
        t->mem_per_device = (int64_t)x;
        break;
    case F_NODE:
        if (number(r, strtok_r(NULL, " \t", &save), "node_devices", &x))
            return -1;
        if (x < 1 || x != (double)(int64_t)x)
            return fail(r, "node_devices must be a positive integer", "", NULL);
        t->node_devices = (int64_t)x;
        break;
    case F_LIBM:
        if (positive(r, &save, "libm_rate", &t->libm_rate))
            return -1;
        break;
    case F_DOT_EFF:
        if (parse_dot_eff(t, r, &save))
            return -1;
        break;
    case F_LINK:
        return parse_link(t, r, &save) ? -1 : strtok_r(NULL, " \t", &save) ? fail(r, "extra value after", "link", NULL) : 0;
    }
    if ((tok = strtok_r(NULL, " \t", &save)))
        return fail(r, "extra value", tok, NULL);
    return 0;
}

int target_parse(Target *t, const char *text, const char *file, FILE *err) {
    memset(t, 0, sizeof *t);
    snprintf(t->source, sizeof t->source, "%s", file);
    Reader r = {file, 0, err};
    int seen[F_COUNT] = {0};
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char line[1024];
        r.line++;
        if (n >= sizeof line)
            return fail(&r, "line too long:", "", NULL);
        memcpy(line, p, n);
        line[n] = '\0';
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        if (parse_line(t, &r, line, seen))
            return -1;
        p += n + (nl != NULL);
    }
    r.line++;                    /* a missing field is reported after the last line */
    const char *missing = !seen[F_NAME] ? "name" : !t->peak_flops[DT_F32] ? "peak_flops f32" : !seen[F_MEM_BW] ? "mem_bw"
                        : !seen[F_MEM] ? "mem_per_device" : !(t->intra.bw > 0) ? "link intra"
                        : seen[F_NODE] && !(t->inter.bw > 0) ? "link inter" : NULL;
    if (missing) {
        fprintf(err, "%s: error: missing field '%s'\n", file, missing);
        return -1;
    }
    char msg[160];
    for (int l = 0; l < DOT_LAYOUTS; l++)
        if (dot_eff_build(&t->dot_eff[l], dot_layout_name[l], msg, sizeof msg)) {
            fprintf(err, "%s: error: %s\n", file, msg);
            return -1;
        }
    for (int d = 0; d < DT_COUNT; d++)
        if (!t->peak_flops[d])
            t->peak_flops[d] = t->peak_flops[DT_F32];
    if (!(t->inter.bw > 0))
        t->inter = t->intra;
    return 0;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;)
        if ((n += got) == cap - 1)
            buf = realloc(buf, cap *= 2);
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static int load_file(Target *t, const char *path, FILE *err) {
    char *text = slurp(path);
    if (!text) {
        fprintf(err, "shardc: error: cannot read target file '%s'\n", path);
        return -1;
    }
    int rc = target_parse(t, text, path, err);
    free(text);
    return rc;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The directory of the running binary, as codegen_cmd.c's locate() finds it. */
static int self_dir(char *dir, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
    if (n <= 0)
        return -1;
    dir[n] = '\0';
    *strrchr(dir, '/') = '\0';
    return 0;
}

/* The shipped target NAME: the source tree's targets/ beside build/, or
 * PREFIX/share/shardc/targets beside PREFIX/bin. */
static int find_shipped(const char *name, char *path, size_t cap) {
    char dir[PATH_MAX];
    if (self_dir(dir, sizeof dir))
        return -1;
    static const char *const rel[] = {"%s/../targets/%s.target", "%s/../../targets/%s.target",
                                      "%s/../share/shardc/targets/%s.target"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char found[PATH_MAX];
        if (snprintf(path, cap, rel[i], dir, name) < (int)cap && realpath(path, found) &&
            snprintf(path, cap, "%s", found) < (int)cap)
            return 0;
    }
    return -1;
}

static const char *const shipped[] = {"cpu", "h100x8", "tpu-v5e"};

int target_load(Target *t, const char *spec, FILE *err) {
    char path[PATH_MAX + 64];
    if (!spec) {                 /* make bench's description of this machine, else cpu */
        char dir[PATH_MAX];
        if (!self_dir(dir, sizeof dir) && snprintf(path, sizeof path, "%s/host.target", dir) < (int)sizeof path &&
            exists(path))
            return load_file(t, path, err);
        return target_parse(t, cpu_target, "built-in cpu", err);
    }
    size_t n = strlen(spec);
    if (strchr(spec, '/') || (n > 7 && strcmp(spec + n - 7, ".target") == 0))
        return load_file(t, spec, err);
    if (strcmp(spec, "cpu") == 0)
        return target_parse(t, cpu_target, "built-in cpu", err);
    if (!find_shipped(spec, path, sizeof path))
        return load_file(t, path, err);
    Suggest sg = suggest_begin(spec);
    for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++)
        suggest_add(&sg, shipped[i], -1);
    char hint[128];
    fprintf(err, "shardc: error: unknown target '%s'%s (a file path, or one of: cpu, h100x8, tpu-v5e)\n", spec,
            suggest_text(&sg, hint, sizeof hint));
    return -1;
}

Link target_link(const Target *t, const Module *m, const int64_t *axes, int naxes) {
    Link worst = {0, 0};
    for (int i = 0; i < naxes; i++) {
        const char *name = sym_name(m->syms, m->axis_sym[axes[i]]);
        Link l = t->intra;
        int named = 0;
        for (int k = 0; k < t->nlinks && !named; k++)
            if (strcmp(t->link_axis[k], name) == 0) {
                l = t->link[k];
                named = 1;
            }
        if (!named && t->node_devices) {
            /* Device ids are row-major: an axis's group spans its size
             * times the product of the axes after it (minor). */
            int64_t span = m->axis_size[axes[i]];
            for (int a = (int)axes[i] + 1; a < m->naxes; a++)
                span *= m->axis_size[a];
            if (span > t->node_devices)
                l = t->inter;
        }
        if (i == 0 || l.bw < worst.bw)
            worst.bw = l.bw;
        if (l.latency > worst.latency)
            worst.latency = l.latency;
    }
    return naxes ? worst : t->intra;
}
