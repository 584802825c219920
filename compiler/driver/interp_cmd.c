/* `shardc interp`: read every parameter from a .npy file, run the function
 * with the reference interpreter, write each result.  Inputs are checked
 * before anything runs, and results are written only after the run
 * succeeds, so an error leaves no output file. */
#include "interp_cmd.h"

#include "../interp/interp.h"
#include "../interp/npy.h"
#include "../base/suggest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *param_name(const Module *m, const Fn *fn, int i) {
    for (int v = 0; v < fn->ninsts; v++)
        if (fn->insts[v].op == OP_PARAMETER && ir_attr(fn, &fn->insts[v], 0) == i && fn->insts[v].sym >= 0)
            return sym_name(m->syms, fn->insts[v].sym);
    return NULL;
}

static void print_type(const Shape *s) {
    fprintf(stderr, "%s[", dtype_name[s->dtype]);
    for (int d = 0; d < s->rank; d++)
        fprintf(stderr, "%s%lld", d ? ", " : "", (long long)s->dims[d]);
    fputc(']', stderr);
}

/* The parameter named name[0..len), or -1; with the nearest name in hint. */
static int find_param(const Module *m, const Fn *fn, const char *name, size_t len, char *hint, size_t cap) {
    char want[128];
    snprintf(want, sizeof want, "%.*s", (int)(len < 100 ? len : 100), name);
    Suggest sg = suggest_begin(want);
    for (int i = 0; i < fn->nparams; i++) {
        const char *p = param_name(m, fn, i), *dot = p ? strchr(p, '.') : NULL;
        if (p && strlen(p) == len && memcmp(p, name, len) == 0)
            return i;
        if (dot)                /* a record's field: the record too */
            suggest_add(&sg, p, (int)(dot - p));
        suggest_add(&sg, p, -1);
    }
    suggest_text(&sg, hint, cap);
    return -1;
}

/* Each parameter's file (`file`, NAME=FILE's FILE, or an archive given
 * alone for every parameter not named otherwise).  Returns an exit status. */
/* --in p=FILE for a record p: its fields' parameters p.wq, p.layer.wq, ...
 * (sema/records.c), each from the archive by sk_npy_record_file.  The
 * number of fields, 0 when p is no record, -1 after an error. */
static int record_ins(const Module *m, const Fn *fn, const char *in, const char *eq, Arena *arena, const char **file) {
    size_t len = (size_t)(eq - in);
    int n = 0;
    for (int i = 0; i < fn->nparams; i++) {
        const char *p = param_name(m, fn, i);
        if (!p || strlen(p) <= len + 1 || memcmp(p, in, len) != 0 || p[len] != '.')
            continue;
        char buf[4096], rec[128];
        snprintf(rec, sizeof rec, "%.*s", (int)(len < 100 ? len : 100), in);
        int rc = sk_npy_record_file(eq + 1, rec, p + len + 1, buf, sizeof buf);
        if (rc == -1) {
            fprintf(stderr, "shardc: error: --in '%s': '%s' is a record, read from a .npz archive (its fields by "
                    "name: %s=FILE.npz)\n", in, rec, rec);
            return -1;
        }
        if (rc < 0 || file[i]) {
            fprintf(stderr, "shardc: error: --in %s: %s\n", p, rc < 0 ? "the file name is too long" : "given twice");
            return -1;
        }
        file[i] = arena_strndup(arena, buf, strlen(buf));
        n++;
    }
    return n;
}

static int match_ins(const Module *m, const Fn *fn, const char *const *ins, int nins, Arena *arena, const char **file) {
    const char *fname = sym_name(m->syms, fn->sym), **archive = arena_alloc(arena, sizeof(char *) * (size_t)(nins + 1));
    int narchives = 0;
    for (int k = 0; k < nins; k++) {
        const char *eq = strchr(ins[k], '='), *npz = strstr(ins[k], ".npz");
        if (!eq && npz && !npz[4] && npz != ins[k]) {
            archive[narchives++] = ins[k];     /* --in data.npz: every parameter by name */
            continue;
        }
        if (!eq || eq == ins[k] || !eq[1]) {
            fprintf(stderr, "shardc: error: --in '%s': expected NAME=FILE.npy\nrun 'shardc --help' for usage\n", ins[k]);
            return 2;
        }
        char hint[160];
        int i = find_param(m, fn, ins[k], (size_t)(eq - ins[k]), hint, sizeof hint);
        int fields = i < 0 ? record_ins(m, fn, ins[k], eq, arena, file) : 0;
        if (fields < 0)
            return 1;
        if (fields)
            continue;
        if (i < 0) {
            fprintf(stderr, "shardc: error: --in '%s': '%s' has no parameter named '%.*s'%s\n", ins[k], fname,
                    (int)(eq - ins[k]), ins[k], hint);
            return 1;
        }
        if (file[i]) {
            fprintf(stderr, "shardc: error: --in gives parameter '%s' twice\n", param_name(m, fn, i));
            return 1;
        }
        file[i] = eq + 1;
    }
    for (int i = 0; i < fn->nparams; i++) {
        /* The first archive alone with the parameter's array (--in data.npz
         * --in ck.npz), else the first, whose error lists its arrays. */
        const char *name = param_name(m, fn, i);
        for (int a = 0; !file[i] && a < narchives; a++)
            if (narchives == 1 || (name && sk_npz_has(archive[a], name)))
                file[i] = archive[a];
        file[i] = file[i] ? file[i] : narchives ? archive[0] : NULL;
        if (!file[i]) {
            fprintf(stderr, "shardc: error: no --in for parameter '%s' of '%s', which needs a .npy file of ",
                    name ? name : "?", fname);
            print_type(&fn->params[i].type);
            fputc('\n', stderr);
            return 1;
        }
    }
    return 0;
}

/* Parameter i from its .npy file or .npz archive; NumPy's float64 and
 * int64 arrays convert when exact (with a warning, which --cast silences)
 * or, with --cast, by rounding. */
static int read_input(const Module *m, const Fn *fn, int i, const char *file, int cast, InterpValue *a) {
    char err[512], path[4096];
    const char *name = param_name(m, fn, i), *from = NULL;
    sk_npy_source src = {path, NULL, cast};
    sk_npy_shape want = npy_shape_of(&fn->params[i].type), got;
    name = name ? name : "?";
    if (sk_npy_split_npz(file, name, path, sizeof path, &src.member) < 0) {
        fprintf(stderr, "shardc: error: --in %s: the file name is too long\n", name);
        return 1;
    }
    if (sk_npy_read_source(&src, &want, &got, &a->data, &from, err, sizeof err)) {
        fprintf(stderr, "shardc: error: --in %s: %s\n", name, err);
        return 1;
    }
    a->shape = (Shape){got.dtype, got.rank, {0}};
    for (int d = 0; d < got.rank; d++)
        a->shape.dims[d] = got.dims[d];
    if (from && !cast)
        fprintf(stderr, "shardc: warning: --in %s: '%s' holds %s data, read as %s (every value is exact); "
                        "--cast says so and silences this\n", name, path, from, dtype_name[got.dtype]);
    return 0;
}

static int read_inputs(const Module *m, const Fn *fn, const char **file, int cast, InterpValue *args) {
    for (int i = 0; i < fn->nparams; i++)
        if (read_input(m, fn, i, file[i], cast, &args[i]))
            return 1;
    return 0;
}

/* The results and, for an archive, the names they are returned as. */
static int write_npz(const Module *m, const Fn *fn, const char *path, const InterpValue *res, int n) {
    Arena arena = {0};
    sk_npz_entry *e = arena_alloc(&arena, sizeof *e * (2 * (size_t)n + 1));
    int k = 0;
    for (int i = 0; i < n; i++)
        e[k++] = (sk_npz_entry){arena_printf(&arena, "result%d", i), npy_shape_of(&res[i].shape), res[i].data};
    for (int i = 0; i < n; i++) {
        const char *name = fn->results[i].name ? sym_name(m->syms, fn->results[i].name - 1) : NULL;
        int taken = !name;
        for (int j = 0; j < k && !taken; j++)
            taken = strcmp(e[j].name, name) == 0;
        if (!taken)
            e[k++] = (sk_npz_entry){name, npy_shape_of(&res[i].shape), res[i].data};
    }
    char err[512];
    int rc = sk_npz_write(path, e, k, err, sizeof err);
    if (rc)
        fprintf(stderr, "shardc: error: %s\n", err);
    arena_free(&arena);
    return rc ? 1 : 0;
}

/* DIR/result0.npy, ..., or one archive when the path ends in .npz. */
static int write_results(const Module *m, const Fn *fn, const char *dir, const InterpValue *res, int n) {
    size_t len = strlen(dir);
    if (len > 4 && strcmp(dir + len - 4, ".npz") == 0)
        return write_npz(m, fn, dir, res, n);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "shardc: error: cannot create '%s': %s\n", dir, strerror(errno));
        return 1;
    }
    char err[512];
    Arena arena = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = npy_write(arena_printf(&arena, "%s/result%d.npy", dir, i), &res[i].shape, res[i].data, err, sizeof err);
        if (rc)
            fprintf(stderr, "shardc: error: %s\n", err);
    }
    arena_free(&arena);
    return rc ? 1 : 0;
}

int interp_command(const Module *m, int f, const char *const *ins, int nins, const char *out_dir, int cast) {
    const Fn *fn = &m->fns[f];
    Arena arena = {0};
    const char **file = arena_alloc(&arena, sizeof(char *) * ((size_t)fn->nparams + 1));
    InterpValue *args = arena_alloc(&arena, sizeof *args * ((size_t)fn->nparams + 1));
    InterpValue *res = arena_alloc(&arena, sizeof *res * ((size_t)fn->nresults + 1));
    int rc = match_ins(m, fn, ins, nins, &arena, file);
    if (!rc)
        rc = read_inputs(m, fn, file, cast, args);
    char err[512];
    if (!rc && interp_call(m, f, args, res, err, sizeof err)) {
        fprintf(stderr, "shardc: error: interpreting '%s': %s\n", sym_name(m->syms, fn->sym), err);
        rc = 1;
    }
    if (!rc)
        rc = write_results(m, fn, out_dir, res, fn->nresults);
    interp_free_values(args, fn->nparams);     /* the elements: malloc'd (interp.h) */
    interp_free_values(res, fn->nresults);
    arena_free(&arena);
    return rc;
}
