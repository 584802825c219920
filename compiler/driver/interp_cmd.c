/* `shardc interp`: read every parameter from a .npy file, run the function
 * with the reference interpreter, write each result.  Inputs are checked
 * before anything runs, and results are written only after the run
 * succeeds, so an error leaves no output file. */
#include "interp_cmd.h"

#include "../interp/interp.h"
#include "../interp/npy.h"

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

/* Which parameter each --in names; -1 for none.  Returns an exit status. */
static int match_ins(const Module *m, const Fn *fn, const char *const *ins, int nins, int *which) {
    const char *fname = sym_name(m->syms, fn->sym);
    for (int k = 0; k < nins; k++) {
        const char *eq = strchr(ins[k], '=');
        if (!eq || eq == ins[k] || !eq[1]) {
            fprintf(stderr, "shardc: error: --in '%s': expected NAME=FILE.npy\nrun 'shardc --help' for usage\n", ins[k]);
            return 2;
        }
        which[k] = -1;
        for (int i = 0; i < fn->nparams && which[k] < 0; i++) {
            const char *name = param_name(m, fn, i);
            if (name && strlen(name) == (size_t)(eq - ins[k]) && memcmp(name, ins[k], (size_t)(eq - ins[k])) == 0)
                which[k] = i;
        }
        if (which[k] < 0) {
            fprintf(stderr, "shardc: error: --in '%s': '%s' has no parameter named '%.*s'\n", ins[k], fname,
                    (int)(eq - ins[k]), ins[k]);
            return 1;
        }
        for (int j = 0; j < k; j++)
            if (which[j] == which[k]) {
                fprintf(stderr, "shardc: error: --in gives parameter '%s' twice\n", param_name(m, fn, which[k]));
                return 1;
            }
    }
    for (int i = 0; i < fn->nparams; i++) {
        int given = 0;
        for (int k = 0; k < nins; k++)
            given |= which[k] == i;
        if (!given) {
            const char *name = param_name(m, fn, i);
            fprintf(stderr, "shardc: error: no --in for parameter '%s' of '%s', which needs a .npy file of ",
                    name ? name : "?", fname);
            print_type(&fn->params[i].type);
            fputc('\n', stderr);
            return 1;
        }
    }
    return 0;
}

static int read_inputs(const Fn *fn, const char *const *ins, int nins, const int *which, InterpValue *args) {
    char err[512];
    for (int k = 0; k < nins; k++) {
        InterpValue *a = &args[which[k]];
        if (npy_read(strchr(ins[k], '=') + 1, &fn->params[which[k]].type, &a->shape, &a->data, err, sizeof err)) {
            fprintf(stderr, "shardc: error: --in %.*s: %s\n", (int)(strchr(ins[k], '=') - ins[k]), ins[k], err);
            return 1;
        }
    }
    return 0;
}

static int write_results(const char *dir, const InterpValue *res, int n) {
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

int interp_command(const Module *m, int f, const char *const *ins, int nins, const char *out_dir) {
    const Fn *fn = &m->fns[f];
    Arena arena = {0};
    int *which = arena_alloc(&arena, sizeof(int) * ((size_t)nins + 1));
    InterpValue *args = arena_alloc(&arena, sizeof *args * ((size_t)fn->nparams + 1));
    InterpValue *res = arena_alloc(&arena, sizeof *res * ((size_t)fn->nresults + 1));
    int rc = match_ins(m, fn, ins, nins, which);
    if (!rc)
        rc = read_inputs(fn, ins, nins, which, args);
    char err[512];
    if (!rc && interp_call(m, f, args, res, err, sizeof err)) {
        fprintf(stderr, "shardc: error: interpreting '%s': %s\n", sym_name(m->syms, fn->sym), err);
        rc = 1;
    }
    if (!rc)
        rc = write_results(out_dir, res, fn->nresults);
    interp_free_values(args, fn->nparams);     /* the elements: malloc'd (interp.h) */
    interp_free_values(res, fn->nresults);
    arena_free(&arena);
    return rc;
}
